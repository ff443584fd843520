"""bposd in sinter (backline_core.sinter): the core's DEM -> (H, O, priors) equals ldpc's, predictions
against ldpc's sinter decoder, sinter.collect from Python and the command line."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import numpy as np
import pytest

sinter = pytest.importorskip("sinter")
stim = pytest.importorskip("stim")
pytest.importorskip("ldpc")

from backline_core import dem_matrices
from backline_core.sinter import decoder, sinter_decoders
from ldpc.ckt_noise.dem_matrices import detector_error_model_to_check_matrices
from ldpc.sinter_decoders import SinterBpOsdDecoder as LdpcSinter

NOISE = {"after_clifford_depolarization": 0.02, "before_measure_flip_probability": 0.01,
         "after_reset_flip_probability": 0.01}
CIRCUITS = {
    "rep-d5": ("repetition_code:memory", 5),
    "surface-x-d3": ("surface_code:rotated_memory_x", 3),
}
#: (ours, ldpc's) settings, the same decoder spelled in each package's words
SETTINGS = {
    "ms-osd0": ({"bp_method": "min_sum", "max_iter": 10, "ms_scaling_factor": 0.625, "osd_method": "osd0"},
                {"bp_method": "minimum_sum", "max_iter": 10, "ms_scaling_factor": 0.625, "osd_method": "osd0"}),
    "ps-osdcs4": ({"bp_method": "product_sum", "max_iter": 10, "osd_method": "osd_cs", "osd_order": 4},
                  {"bp_method": "product_sum", "max_iter": 10, "osd_method": "osd_cs", "osd_order": 4}),
}


def circuit(name: str) -> stim.Circuit:
    task, d = CIRCUITS[name]
    return stim.Circuit.generated(task, distance=d, rounds=d, **NOISE)


def write_b8(path, packed: np.ndarray, num_dets: int) -> None:
    stim.write_shot_data_file(data=packed, path=str(path), format="b8", num_detectors=num_dets)


def read_b8_obs(path, num_obs: int) -> np.ndarray:
    return stim.read_shot_data_file(path=str(path), format="b8", num_observables=num_obs, bit_packed=True)


def via_files(dec, dem, dets: np.ndarray, tmp_path, tag: str) -> np.ndarray:
    """Predictions (bit-packed) from ``dec.decode_via_files`` (ldpc's sinter decoder) on files in tmp_path."""
    dem_path, dets_path, out_path = tmp_path / f"{tag}.dem", tmp_path / f"{tag}.b8", tmp_path / f"{tag}.out.b8"
    dem.to_file(dem_path)
    write_b8(dets_path, dets, dem.num_detectors)
    dec.decode_via_files(num_shots=dets.shape[0], num_dets=dem.num_detectors, num_obs=dem.num_observables,
                         dem_path=dem_path, dets_b8_in_path=dets_path, obs_predictions_b8_out_path=out_path,
                         tmp_dir=tmp_path)
    return read_b8_obs(out_path, dem.num_observables)


# ---- the matrices --------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*CIRCUITS, "surface-z-d5"])
def test_matrices_equal_ldpc(name):
    c = (stim.Circuit.generated("surface_code:rotated_memory_z", distance=5, rounds=5, **NOISE)
         if name == "surface-z-d5" else circuit(name))
    for decompose in (False, True):
        dem = c.detector_error_model(decompose_errors=decompose)
        ours = dem_matrices(dem)
        ref = detector_error_model_to_check_matrices(dem, allow_undecomposed_hyperedges=True)
        assert ours.h.shape == (dem.num_detectors, ref.check_matrix.shape[1])
        assert np.array_equal(ours.h, ref.check_matrix.toarray())
        assert np.array_equal(ours.o, ref.observables_matrix.toarray())
        assert np.allclose(ours.priors, ref.priors, rtol=0, atol=1e-15)
        assert ours.observable_conflicts == 0


def test_padding_bits_are_ignored():
    dem = stim.Circuit.generated("repetition_code:memory", distance=4, rounds=4, **NOISE).detector_error_model()
    assert dem.num_detectors % 8  # 15 detectors: the last byte has padding
    compiled = decoder("bposd").compile_decoder_for_dem(dem=dem)
    dets = dem.compile_sampler(seed=3).sample(200, bit_packed=True)[0]
    dirty = dets.copy()
    dirty[:, -1] |= np.uint8((0xFF << (dem.num_detectors % 8)) & 0xFF)
    a = compiled.decode_shots_bit_packed(bit_packed_detection_event_data=dets)
    b = compiled.decode_shots_bit_packed(bit_packed_detection_event_data=dirty)
    assert np.array_equal(a, b)


# ---- the decoder object --------------------------------------------------------------------


def test_settings_are_checked_and_the_decoder_pickles():
    dec = decoder("backline:bposd", bp_method="ps", max_iter="7", osd_method="osd_cs", osd_order=3)
    assert (dec.params["bp_method"], dec.params["max_iter"], dec.params["osd_method"]) == ("ps", 7, "osd_cs")
    clone = pickle.loads(pickle.dumps(dec))
    assert clone == dec and repr(clone) == repr(dec)
    for bad in ({"bp_method": "nope"}, {"osd_method": "osd9"}, {"max_iter": -1}, {"osd_order": 61}):
        with pytest.raises(ValueError):
            decoder("bposd", **bad)
    decoders = sinter_decoders()
    assert "backline:bposd" in decoders and isinstance(decoders["backline:bposd"], sinter.Decoder)


# ---- predictions against ldpc -------------------------------------------------------------


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(CIRCUITS))
def test_predictions_agree_with_ldpc(name, setting, tmp_path, numbers):
    ours_kw, ldpc_kw = SETTINGS[setting]
    c = circuit(name)
    dem = c.detector_error_model(decompose_errors=False)
    shots = 3000
    dets, obs = c.compile_detector_sampler(seed=11).sample(shots, separate_observables=True, bit_packed=True)
    compiled = decoder("bposd", **ours_kw).compile_decoder_for_dem(dem=dem).decode_shots_bit_packed(
        bit_packed_detection_event_data=dets)
    assert compiled.dtype == np.uint8 and compiled.shape == (shots, (dem.num_observables + 7) // 8)
    theirs = via_files(LdpcSinter(**ldpc_kw), dem, dets, tmp_path, "ldpc")
    agree = float((compiled == theirs).all(axis=1).mean())
    fail_ours = (compiled != obs).any(axis=1)
    fail_ldpc = (theirs != obs).any(axis=1)
    ler_o, ler_l = fail_ours.mean(), fail_ldpc.mean()
    se = math.sqrt(ler_o * (1 - ler_o) / shots + ler_l * (1 - ler_l) / shots)
    numbers.record("sinter_same_shots", f"{name}/{setting}", {"shots": shots, "agreement": agree, "ler_ours": ler_o,
                                                       "ler_ldpc": ler_l, "se": se})
    print(f"\nsinter same shots {name} {setting}: agreement {agree:.4%}, LER ours {ler_o:.4f} ldpc {ler_l:.4f}")
    assert abs(ler_o - ler_l) <= 3 * se + 1e-12
    # Same H and priors, and (see test_bposd) min-sum + OSD-0 matches ldpc bit for bit.
    assert agree >= (0.999 if setting == "ms-osd0" else 0.99)


# ---- sinter.collect ------------------------------------------------------------------------


def test_sinter_collect_against_ldpc(numbers):
    tasks = [sinter.Task(circuit=circuit(name), json_metadata={"c": name}) for name in CIRCUITS]
    ms, ldpc_ms = SETTINGS["ms-osd0"]
    stats = sinter.collect(
        num_workers=2, tasks=tasks, decoders=["backline_bposd", "ldpc_bposd"], max_shots=4000, max_errors=10**6,
        custom_decoders={"backline_bposd": decoder("bposd", **ms), "ldpc_bposd": LdpcSinter(**ldpc_ms)},
    )
    by = {(s.json_metadata["c"], s.decoder): s for s in stats}
    assert len(by) == 4
    for name in CIRCUITS:
        a, b = by[name, "backline_bposd"], by[name, "ldpc_bposd"]
        assert a.shots >= 4000 and b.shots >= 4000 and a.discards == b.discards == 0
        pa, pb = a.errors / a.shots, b.errors / b.shots
        se = math.sqrt(pa * (1 - pa) / a.shots + pb * (1 - pb) / b.shots)
        numbers.record("sinter_collect", name, {"shots_ours": a.shots, "ler_ours": pa, "shots_ldpc": b.shots,
                                        "ler_ldpc": pb, "se": se})
        print(f"\nsinter.collect {name}: ours {a.errors}/{a.shots} = {pa:.4f}, ldpc {b.errors}/{b.shots} = {pb:.4f}")
        assert 0 < a.errors < a.shots
        assert abs(pa - pb) <= 3 * se


def test_sinter_collect_command_line(tmp_path):
    path = tmp_path / "rep.stim"
    circuit("rep-d5").to_file(path)
    out = tmp_path / "stats.csv"
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from sinter._command._main import main; sys.exit(main())",
         "collect", "--circuits", str(path), "--decoders", "backline:bposd",
         "--custom_decoders_module_function", "backline_core.sinter:sinter_decoders",
         "--max_shots", "1000", "--max_errors", "100000", "--processes", "1", "--quiet",
         "--save_resume_filepath", str(out)],
        check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    stats = sinter.read_stats_from_csv_files(out)
    assert len(stats) == 1 and stats[0].decoder == "backline:bposd" and stats[0].shots >= 1000
