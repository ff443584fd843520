"""Flag extraction in encode-steane: every check measured with a flag, |0_L> verified, each shot
decoded once over its detectors by a decoder built from the program's own detector error model
(backline_compiler.detector_model), here over a memcpy transport on the stim device."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from backline_compiler import codegen, pipeline
from backline_compiler.detector_model import detector_error_models, gauges
from backline_compiler.dialects.transport import BacklineAttr
from xdsl.utils.exceptions import PassFailedException

from backline_core import Controller, Coprocessor, InvalidArgumentError, Placement, plugins
from backline_core._abi import last_error
from backline_core._device import QuantumDevice

pytest.importorskip("backline_device_stim")
stim = pytest.importorskip("stim")

LOWER = "convert-bqec-to-llvm,convert-quantum-to-llvm,convert-transport-to-llvm"
PHYSICAL_QUBITS = 7 * 3 + 3


def encoded(text: str, p: float, correct: bool = True, more: str = "") -> object:
    module = pipeline.parse(text)
    spec = f"encode-steane{{extraction=flag apply-correction={'true' if correct else 'false'}}},inject-noise{{p={p}}}"
    pipeline.run(module, pipeline.from_spec(spec + more))
    return module


def test_every_single_fault_is_told_apart(ghz_text) -> None:
    """Distance 3 against circuit faults: no two single-fault effects share detectors yet differ in
    the logical outcomes (beyond the GHZ state's own freedom, all three at once), and none is silent."""
    module = encoded(ghz_text(), 0.001)
    (dem,) = detector_error_models(module)
    (gauge,) = gauges(module)
    free = {tuple(row) for row in gauge.astype(int)}
    assert free == {(0, 0, 0), (1, 1, 1)}
    assert dem.num_detectors == 1 + 12 + (1 + 12 + 12) + (1 + 12 + 12) + 3 * 3 and dem.num_observables == 3
    seen: dict[frozenset[int], np.ndarray] = {}
    for inst in dem.flattened():
        if inst.type != "error":
            continue
        dets = frozenset(t.val for t in inst.targets_copy() if t.is_relative_detector_id())
        obs = np.zeros(3, int)
        for t in inst.targets_copy():
            if t.is_logical_observable_id():
                obs[t.val] ^= 1
        assert dets or tuple(obs) in free, f"an undetected fault flips {obs}"
        other = seen.setdefault(dets, obs)
        assert tuple(other ^ obs) in free, f"faults with detectors {sorted(dets)} flip {other} or {obs}"


def test_the_verification_is_what_makes_preparation_fault_tolerant(ghz_text) -> None:
    """With logical Z's own support {0,1,4} as the check, a preparation fault (X on data 5 and 6)
    looks like an X on data 4 after it, with the opposite logical effect (the reason for VERIFY)."""
    from backline_compiler.passes import encode_steane

    assert encode_steane.VERIFY != encode_steane.LOGICAL
    original = encode_steane.VERIFY
    encode_steane.VERIFY = encode_steane.LOGICAL
    try:
        (dem,) = detector_error_models(encoded(ghz_text(), 0.001))
    finally:
        encode_steane.VERIFY = original
    effects: dict[frozenset[int], set[tuple[int, ...]]] = {}
    for inst in dem.flattened():
        if inst.type == "error":
            dets = frozenset(t.val for t in inst.targets_copy() if t.is_relative_detector_id())
            obs = tuple(sorted(t.val for t in inst.targets_copy() if t.is_logical_observable_id()))
            effects.setdefault(dets, set()).add(obs)
    assert any(len(o) > 1 and {(), (1, 2)} <= o for o in effects.values())


def run_over_memcpy(text: str, p: float, correct: bool, decoder: str, shots: int,
                    model_p: float | None = None) -> np.ndarray:
    (dem,) = detector_error_models(encoded(text, p if model_p is None else model_p, correct))
    fn = plugins.get("decoder", decoder).build_from_dem(dem)
    key = f"flag-{uuid.uuid4().hex[:8]}"
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn=fn, runs_in="thread")])
    attr = BacklineAttr.from_placement(placement)
    module = encoded(text.replace("builtin.module ", f"builtin.module attributes {{backline.placement = {attr}}} ", 1),
                     p, correct, f",inject-transport-session{{in-bytes={fn.payload_bytes} out-bytes=1}},"
                                 f"lower-decode-to-transport,{LOWER}")
    program = codegen.JitProgram(module)
    setup, teardown = program.function("backline_setup", "int32"), program.function("backline_teardown", "int32")
    assert setup() == 0, last_error()
    out = np.full(shots, -1, dtype=np.int32)
    try:
        with QuantumDevice.open("stim", PHYSICAL_QUBITS, seed=7) as dev:
            status = program.function("ghz", "int32", "ptr", "int64", "ptr")(dev.handle, shots, out.ctypes.data)
    finally:
        assert teardown() == 0, last_error()
    assert status == 0, last_error()
    assert ((out >= 0) & (out <= 7)).all()
    return out


def test_noiseless_flag_ghz_gives_000_or_111(ghz_text) -> None:
    out = run_over_memcpy(ghz_text(), 0.0, True, "lut", 300, model_p=0.001)  # no noise: no model of its own
    assert set(out.tolist()) == {0b000, 0b111}


def test_decoding_the_shot_over_its_model_cuts_the_logical_error_rate(ghz_text) -> None:
    pytest.importorskip("backline_decoder_bpod")
    corrected = [run_over_memcpy(ghz_text(), 0.002, c, "bposd", 1500) for c in (True, False)]
    fixed, raw = (float(np.mean((o != 0) & (o != 7))) for o in corrected)
    print(f"\nflag extraction, p = 0.002, 1500 shots: corrected {fixed:.4f}, uncorrected {raw:.4f}")
    # measured 0.0175 and 0.093 at 4,000 shots: the bar leaves more than 5 sigma either side
    assert fixed < 0.5 * raw


def test_bad_input_is_refused(ghz_text) -> None:
    with pytest.raises(PassFailedException, match="unknown extraction 'steane'.*verified ancilla block is not built"):
        pipeline.from_spec("encode-steane{extraction=steane}")
    # an outcome stored before the shot's last logical measurement cannot wait for the shot's decode (a pure
    # use, the zext, moves after it)
    early = ghz_text().replace("%m1 = bquantum.measure %d, %q1 : !bquantum.device -> i1",
                               "%early = llvm.zext %m0 : i1 to i32\n    llvm.store %early, %out : i32, !llvm.ptr\n"
                               "    %m1 = bquantum.measure %d, %q1 : !bquantum.device -> i1")
    with pytest.raises(PassFailedException, match="'llvm.store' uses a logical outcome before that"):
        encoded(early, 0.001)
    pure = ghz_text().replace("%m1 = bquantum.measure %d, %q1 : !bquantum.device -> i1",
                              "%early = llvm.zext %m0 : i1 to i32\n    %m1 = bquantum.measure %d, %q1 : "
                              "!bquantum.device -> i1")
    encoded(pure, 0.001).verify()
    module = pipeline.parse(ghz_text())
    pipeline.run(module, pipeline.from_spec("encode-steane,inject-noise{p=0.001}"))
    with pytest.raises(InvalidArgumentError, match="applies corrections in real time"):
        detector_error_models(module)


def test_checks_are_carried_through_every_logical_gate(ghz_text) -> None:
    """H, S, X, Z, I and CNOT both ways between rounds: the detectors stay deterministic (the model checks)
    and every single fault is still told apart."""
    gates = "\n    ".join(f"bquantum.gate {g} : !bquantum.device" for g in (
        '"H" %d, %q0', '"S" %d, %q0', '"CNOT" %d, %q0, %q1', '"H" %d, %q1', '"S" %d, %q1', '"X" %d, %q2',
        '"CNOT" %d, %q1, %q0', '"Z" %d, %q0', '"I" %d, %q2', '"CNOT" %d, %q2, %q1', '"H" %d, %q2'))
    text = ghz_text()
    start = text.index('bquantum.gate "H" %d, %q0')
    end = text.index("%m0 = bquantum.measure")
    text = text[:start] + gates + "\n    " + text[end:]
    (dem,) = detector_error_models(encoded(text, 0.001))
    (gauge,) = gauges(encoded(text, 0.001))
    free = {tuple(row) for row in gauge.astype(int)}
    seen: dict[frozenset[int], np.ndarray] = {}
    for inst in dem.flattened():
        if inst.type == "error":
            dets = frozenset(t.val for t in inst.targets_copy() if t.is_relative_detector_id())
            obs = np.zeros(3, int)
            for t in inst.targets_copy():
                if t.is_logical_observable_id():
                    obs[t.val] ^= 1
            other = seen.setdefault(dets, obs)
            assert (dets and tuple(other ^ obs) in free) or (not dets and tuple(obs) in free)
