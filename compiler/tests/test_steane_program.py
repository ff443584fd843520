"""Implicit Steane QEC as IR passes, run on stim: a logical 3-qubit GHZ circuit in bquantum is
encoded by encode-steane (a correction round after every logical gate), made noisy by
inject-noise, its decodes lowered locally (convert-bqec-to-llvm) or over a memcpy transport
to a "steane" coprocessor (lower-decode-to-transport), JIT-compiled and run shot by shot."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from backline_compiler import codegen, pipeline

from backline_core import Controller, Coprocessor, Placement
from backline_core.device import QuantumDevice
from backline_core.native import last_error

pytest.importorskip("backline_device_stim")

LOGICAL_QUBITS = 3
PHYSICAL_QUBITS = 7 * LOGICAL_QUBITS + 3  # 7 data wires per logical qubit, 3 ancillas

# @ghz(device, shots, out): for each shot, reset_all, H_L q0, CNOT_L q0 q1, CNOT_L q1 q2,
# measure q0..q2 and write q0 | q1 << 1 | q2 << 2 to out[shot]; returns the first failure.
GHZ = """
builtin.module {attributes} {{
  llvm.func @ghz(%dev: !llvm.ptr, %shots: i64, %out: !llvm.ptr) -> i32 {{
    %d = bquantum.device_from_ptr %dev : !llvm.ptr -> !bquantum.device
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %q0 = llvm.mlir.constant(0 : i32) : i32
    %q1 = llvm.mlir.constant(1 : i32) : i32
    %q2 = llvm.mlir.constant(2 : i32) : i32
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %done = llvm.icmp "sge" %i, %shots : i64
    llvm.cond_br %done, ^exit, ^body
  ^body:
    bquantum.reset_all %d
    bquantum.gate "H" %d, %q0 : !bquantum.device
    bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
    bquantum.gate "CNOT" %d, %q1, %q2 : !bquantum.device
    %m0 = bquantum.measure %d, %q0 : !bquantum.device -> i1
    %m1 = bquantum.measure %d, %q1 : !bquantum.device -> i1
    %m2 = bquantum.measure %d, %q2 : !bquantum.device -> i1
    %b0 = llvm.zext %m0 : i1 to i32
    %e1 = llvm.zext %m1 : i1 to i32
    %e2 = llvm.zext %m2 : i1 to i32
    %b1 = llvm.shl %e1, %q1 : i32
    %b2 = llvm.shl %e2, %q2 : i32
    %b01 = llvm.or %b0, %b1 : i32
    %bits = llvm.or %b01, %b2 : i32
    %slot = llvm.getelementptr %out[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i32
    llvm.store %bits, %slot : i32, !llvm.ptr
    %next = llvm.add %i, %one : i64
    llvm.br ^loop(%next : i64)
  ^exit:
    %st = transport.take_status : i32
    llvm.return %st : i32
  }}
}}
"""

LOWER = "convert-bqec-to-llvm,convert-quantum-to-llvm,convert-transport-to-llvm"
SHOTS = 4000
P = 0.002
SEED = 11


def encode(p: float, correct: bool) -> str:
    return f"encode-steane{{apply-correction={'true' if correct else 'false'}}},inject-noise{{p={p}}}"


def compile_local(p: float, correct: bool = True) -> codegen.JitProgram:
    module = pipeline.parse(GHZ.format(attributes=""))
    pipeline.run(module, f"{encode(p, correct)},{LOWER}")
    assert all(op.dialect_name() in ("builtin", "llvm") for op in module.walk())
    return codegen.JitProgram(module)


def run_shots(program: codegen.JitProgram, shots: int, seed: int = SEED) -> np.ndarray:
    out = np.full(shots, -1, dtype=np.int32)
    with QuantumDevice.open("stim", PHYSICAL_QUBITS, seed=seed) as dev:
        status = program.function("ghz", "int32", "ptr", "int64", "ptr")(dev.handle, shots, out.ctypes.data)
    assert status == 0, last_error()
    assert ((out >= 0) & (out <= 7)).all()
    return out


def logical_error_rate(out: np.ndarray) -> tuple[float, float]:
    """The fraction of shots whose three logical outcomes are not all equal, and its 95% half-width."""
    rate = float(np.mean((out != 0b000) & (out != 0b111)))
    return rate, 1.96 * math.sqrt(max(rate * (1 - rate), 1e-12) / len(out))


@pytest.fixture(scope="module")
def local_outcomes() -> np.ndarray:
    return run_shots(compile_local(P), SHOTS)


def test_noiseless_encoded_ghz_gives_000_or_111() -> None:
    for correct in (True, False):
        out = run_shots(compile_local(0.0, correct), 400)
        assert set(out.tolist()) == {0b000, 0b111}
        assert 0.35 < np.mean(out == 0b111) < 0.65


def test_correction_lowers_the_logical_error_rate(local_outcomes: np.ndarray) -> None:
    corrected, half = logical_error_rate(local_outcomes)
    baseline, half0 = logical_error_rate(run_shots(compile_local(P, correct=False), SHOTS))
    print(f"\nSteane GHZ, p={P}, {SHOTS} shots, seed {SEED}: logical error rate with correction "
          f"{corrected:.4f} +- {half:.4f}, without {baseline:.4f} +- {half0:.4f} (95%)")
    assert corrected < baseline


def test_decodes_over_the_transport_match_local_decoding(local_outcomes: np.ndarray) -> None:
    key = f"dec-{uuid.uuid4().hex[:8]}"
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn="steane",
                                                    init_args={"locality": "thread"})])
    module = pipeline.parse(GHZ.format(attributes=f"attributes {{backline.placement = {placement.to_attribute()}}}"))
    pipeline.run(module, f"{encode(P, True)},inject-transport-session{{in-bytes=1 out-bytes=1}},"
                         f"lower-decode-to-transport,{LOWER}")
    text = pipeline.print_module(module)
    assert "bqec.decode" not in text and "llvm.call @bl_fn_steane" not in text  # all over the transport
    program = codegen.JitProgram(module)
    setup = program.function("backline_setup", "int32")
    teardown = program.function("backline_teardown", "int32")
    assert setup() == 0, last_error()
    try:
        out = run_shots(program, SHOTS)
    finally:
        assert teardown() == 0, last_error()
    assert logical_error_rate(out) == logical_error_rate(local_outcomes)
    np.testing.assert_array_equal(out, local_outcomes)  # decoding is deterministic: shot by shot
