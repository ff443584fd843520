"""A quantum program written in IR, compiled and run on a device runtime: a 3-qubit GHZ circuit
in a shot loop, lowered by convert-quantum-to-llvm (and convert-transport-to-llvm for
``transport.take_status``), JIT-compiled, and called with the ``bl_device *`` the host opened."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backline_compiler import codegen, pipeline
from backline_compiler.dialects import bquantum
from backline_compiler.passes.convert_quantum_to_llvm import GATE_IDS, NOISE_IDS

from backline_core import _device as device
from backline_core._device import QuantumDevice
from backline_core._abi import last_error

PIPELINE = "convert-quantum-to-llvm,convert-transport-to-llvm"

# @on_wire(device, wire): one op on a wire the caller picks; returns the first failure.
ON_WIRE = """
builtin.module {{
  llvm.func @on_wire(%dev: !llvm.ptr, %w: i32) -> i32 {{
    %d = bquantum.device_from_ptr %dev : !llvm.ptr -> !bquantum.device
    {op}
    %st = transport.take_status : i32
    llvm.return %st : i32
  }}
}}
"""

SHOTS = 500


def compile_program(text: str) -> codegen.JitProgram:
    module = pipeline.parse(text)
    pipeline.run(module, pipeline.from_spec(PIPELINE))
    assert all(op.dialect_name() in ("builtin", "llvm") for op in module.walk())
    return codegen.JitProgram(module)


@pytest.fixture(scope="module")
def ghz(ghz_text) -> codegen.JitProgram:
    return compile_program(ghz_text())


@pytest.fixture(scope="module")
def noisy_ghz(ghz_text) -> codegen.JitProgram:
    return compile_program(ghz_text(noise='bquantum.noise "x_flip" %d, %q2 {p = 0.2 : f64}'))



def test_the_pass_tables_are_device_h() -> None:
    # backline_core._device reads the enum values from the compiled header (cffi)
    assert GATE_IDS == {name: gid for name, gid in device.GATES.items() if name != "CX"}
    assert NOISE_IDS == {name.lower(): cid for name, cid in device.NOISE_CHANNELS.items()}
    assert set(GATE_IDS) == set(bquantum.GATES)
    assert set(NOISE_IDS) == set(bquantum.NOISE_CHANNELS)


def test_ghz_on_stim(ghz: codegen.JitProgram, ghz_shots) -> None:
    pytest.importorskip("backline_device_stim")
    with QuantumDevice.open("stim", 3, seed=5) as dev:
        out = ghz_shots(ghz, dev, SHOTS)
        assert dev.op_count == 6 * SHOTS  # per shot: 3 gates, 3 measurements (reset_all is not counted)
    assert set(out.tolist()) == {0b000, 0b111}
    assert 0.35 < np.mean(out == 0b111) < 0.65


def test_ghz_with_x_flip_noise_on_stim(noisy_ghz: codegen.JitProgram, ghz_shots) -> None:
    pytest.importorskip("backline_device_stim")
    with QuantumDevice.open("stim", 3, seed=5) as dev:
        out = ghz_shots(noisy_ghz, dev, SHOTS)
    q0, q1, q2 = out & 1, (out >> 1) & 1, (out >> 2) & 1
    assert (q0 == q1).all()  # the flip is on qubit 2 only
    rate = np.mean(q2 != q0)
    se = math.sqrt(0.2 * 0.8 / SHOTS)
    assert abs(rate - 0.2) < 4 * se, rate


def test_ghz_on_the_null_device(ghz: codegen.JitProgram, noisy_ghz: codegen.JitProgram, ghz_shots) -> None:
    with QuantumDevice.open("null", 3) as dev:
        assert (ghz_shots(ghz, dev, SHOTS) == 0).all()
        assert (ghz_shots(noisy_ghz, dev, SHOTS) == 0).all()  # a noiseless device ignores noise


@pytest.mark.parametrize(("op", "function"), [
    ('bquantum.gate "H" %d, %w : !bquantum.device', "bl_dev_gate"),
    ("%m = bquantum.measure %d, %w : !bquantum.device -> i1", "bl_dev_measure"),
    ("bquantum.reset %d, %w", "bl_dev_reset"),
    ('bquantum.noise "y_flip" %d, %w {p = 0.5 : f64}', "bl_dev_noise"),
])
def test_a_device_error_reaches_the_caller(op: str, function: str) -> None:
    program = compile_program(ON_WIRE.format(op=op))
    on_wire = program.function("on_wire", "int32", "ptr", "int32")
    with QuantumDevice.open("null", 3) as dev:
        assert on_wire(dev.handle, 2) == 0
        status = on_wire(dev.handle, 7)
        assert status == -1  # BL_EINVAL
        text = last_error()
        assert text.startswith(function) and "wire 7 is out of range" in text, text
        assert on_wire(dev.handle, 1) == 0  # take_status cleared it
