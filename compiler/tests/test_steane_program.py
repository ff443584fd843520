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
from backline_compiler.dialects.transport import BacklineAttr

from backline_core import Controller, Coprocessor, Placement
from backline_core._device import QuantumDevice
from backline_core._abi import last_error

pytest.importorskip("backline_device_stim")

LOGICAL_QUBITS = 3
PHYSICAL_QUBITS = 7 * LOGICAL_QUBITS + 3  # 7 data wires per logical qubit, 3 ancillas

LOWER = "convert-bqec-to-llvm,convert-quantum-to-llvm,convert-transport-to-llvm"
SHOTS = 4000
P = 0.002
SEED = 11


def encode(p: float, correct: bool) -> str:
    return f"encode-steane{{apply-correction={'true' if correct else 'false'}}},inject-noise{{p={p}}}"


def compile_local(text: str, p: float, correct: bool = True) -> codegen.JitProgram:
    module = pipeline.parse(text)
    pipeline.run(module, pipeline.from_spec(f"{encode(p, correct)},{LOWER}"))
    assert all(op.dialect_name() in ("builtin", "llvm") for op in module.walk())
    return codegen.JitProgram(module)


@pytest.fixture(scope="module")
def run_shots(ghz_shots):
    """Run @ghz on a fresh stim device of the encoded size (the conftest's runner)."""

    def run(program: codegen.JitProgram, shots: int, seed: int = SEED) -> np.ndarray:
        with QuantumDevice.open("stim", PHYSICAL_QUBITS, seed=seed) as dev:
            out = ghz_shots(program, dev, shots)
        assert ((out >= 0) & (out <= 7)).all()
        return out

    return run


def logical_error_rate(out: np.ndarray) -> tuple[float, float]:
    """The fraction of shots whose three logical outcomes are not all equal, and its 95% half-width."""
    rate = float(np.mean((out != 0b000) & (out != 0b111)))
    return rate, 1.96 * math.sqrt(max(rate * (1 - rate), 1e-12) / len(out))


@pytest.fixture(scope="module")
def local_outcomes(ghz_text, run_shots) -> np.ndarray:
    return run_shots(compile_local(ghz_text(), P), SHOTS)


def test_noiseless_encoded_ghz_gives_000_or_111(ghz_text, run_shots) -> None:
    for correct in (True, False):
        out = run_shots(compile_local(ghz_text(), 0.0, correct), 400)
        assert set(out.tolist()) == {0b000, 0b111}
        assert 0.35 < np.mean(out == 0b111) < 0.65


def test_correction_lowers_the_logical_error_rate(local_outcomes: np.ndarray, ghz_text, run_shots) -> None:
    corrected, half = logical_error_rate(local_outcomes)
    baseline, half0 = logical_error_rate(run_shots(compile_local(ghz_text(), P, correct=False), SHOTS))
    print(f"\nSteane GHZ, p={P}, {SHOTS} shots, seed {SEED}: logical error rate with correction "
          f"{corrected:.4f} +- {half:.4f}, without {baseline:.4f} +- {half0:.4f} (95%)")
    assert corrected < baseline


def test_decodes_over_the_transport_match_local_decoding(local_outcomes: np.ndarray, ghz_text, run_shots) -> None:
    key = f"dec-{uuid.uuid4().hex[:8]}"
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn="steane", runs_in="thread")])
    attr = BacklineAttr.from_placement(placement)
    module = pipeline.parse(ghz_text(attributes=f"attributes {{backline.placement = {attr}}}"))
    pipeline.run(module, pipeline.from_spec(f"{encode(P, True)},inject-transport-session{{in-bytes=1 out-bytes=1}},"
                                            f"lower-decode-to-transport,{LOWER}"))
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
