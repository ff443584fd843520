"""Rounds from a circuit's detectors, the window plan and each window's detector error model."""

from __future__ import annotations

import numpy as np
import pytest
import stim

from backline_core import InvalidArgumentError, dem_matrices, plugins
from backline_qec import RoundError, SlidingWindowDecoder, detector_rounds, plan_windows, window_model
from backline_qec.windows import Window

DEM_DECODERS = [n for n in plugins.names("decoder") if plugins.get("decoder", n).from_dem is not None]


def surface(d: int = 3, rounds: int | None = None, p: float = 0.003) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds or d,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p)


def test_rounds_are_the_last_detector_coordinate() -> None:
    rounds = detector_rounds(surface(3, 4))
    assert rounds.min() == 0 and rounds.max() == 4  # 4 rounds of stabilizers and the data qubits' round
    assert (np.diff(rounds) >= 0).all()
    assert np.bincount(rounds).tolist() == [4, 8, 8, 8, 4]


@pytest.mark.parametrize("text, says", [
    ("X_ERROR(0.1) 0\nM 0\nDETECTOR rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-1]", "detector 0 has no coordinates"),
    ("M 0\nDETECTOR(0, 0.5) rec[-1]", "0.5, not a whole round number"),
    ("M 0\nOBSERVABLE_INCLUDE(0) rec[-1]", "no detectors"),
])
def test_a_circuit_that_does_not_say_its_rounds_is_refused(text: str, says: str) -> None:
    with pytest.raises(RoundError, match=says):
        detector_rounds(stim.Circuit(text))


def test_the_plan_advances_by_the_commit_and_the_last_window_commits_everything() -> None:
    assert plan_windows(7) == (Window(0, 7, 7),)
    assert plan_windows(7, 4, 2) == (Window(0, 4, 2), Window(2, 6, 4), Window(4, 7, 7))
    assert plan_windows(3, 4, 2) == (Window(0, 3, 3),)


@pytest.mark.parametrize("window, commit, says", [
    (4, None, "together"), (None, 2, "together"), (0, 1, "window=0"), (3, 5, "commit=5 is more than window=3"),
    (3, 3, "needs buffer rounds"), (3, 0, "commit=0"),
])
def test_an_inconsistent_window_is_one_clear_error(window, commit, says) -> None:  # noqa: ANN001
    with pytest.raises(InvalidArgumentError, match=says):
        plan_windows(7, window, commit)


def test_the_whole_shot_window_is_the_circuits_dem() -> None:
    circuit = surface(3)
    dem = circuit.detector_error_model(decompose_errors=True)
    model = window_model(dem, detector_rounds(circuit), Window(0, 4, 4))
    a, b = dem_matrices(dem), dem_matrices(model.dem)
    assert (a.h == b.h).all() and (a.o == b.o).all() and np.allclose(a.priors, b.priors)
    assert model.handed_on.size == 0 and (model.detectors == np.arange(dem.num_detectors)).all()


def test_a_window_commits_its_first_rounds_and_hands_on_their_flips() -> None:
    circuit = surface(3, 6)
    dem = circuit.detector_error_model(decompose_errors=True)
    rounds = detector_rounds(circuit)
    model = window_model(dem, rounds, Window(0, 4, 2))
    assert set(rounds[model.detectors]) == {0, 1, 2, 3}
    assert set(rounds[model.handed_on]) == {2, 3}
    m = dem_matrices(model.dem)
    assert m.num_detectors == len(model.detectors)
    assert m.num_observables == dem.num_observables + len(model.handed_on)
    # a column that reaches the buffer rounds is committed only if it starts in the commit region
    first = np.array([rounds[model.detectors[np.flatnonzero(col)]].min() for col in m.h.T])
    hands = m.o[dem.num_observables:].any(axis=0)
    assert not hands[first >= 2].any() and hands[first < 2].any()


def test_windowed_decoding_of_the_whole_shot_equals_the_decoder_offline() -> None:
    name = "lut" if "lut" in DEM_DECODERS else DEM_DECODERS[0]
    circuit = surface(3)
    dets, _ = circuit.compile_detector_sampler(seed=4).sample(3000, separate_observables=True)
    record = plugins.get("decoder", name)
    offline = record.build_from_dem(circuit.detector_error_model(decompose_errors=record.decomposed_dem))
    assert (SlidingWindowDecoder(circuit, name).decode_batch(dets) == offline.decode_batch(dets)).all()


@pytest.mark.parametrize("name", [n for n in ("pymatching", "bposd") if n in DEM_DECODERS] or ["lut"])
def test_sliding_windows_keep_the_logical_error_rate_within_noise(name: str) -> None:
    circuit = surface(3, 6, p=0.004)
    dets, obs = circuit.compile_detector_sampler(seed=5).sample(20000, separate_observables=True)
    whole = (SlidingWindowDecoder(circuit, name).decode_batch(dets) != obs).any(axis=1)
    windowed = (SlidingWindowDecoder(circuit, name, window=6, commit=3).decode_batch(dets) != obs).any(axis=1)
    n = len(dets)
    sigma = np.sqrt(whole.mean() * (1 - whole.mean()) / n + windowed.mean() * (1 - windowed.mean()) / n)
    assert abs(windowed.mean() - whole.mean()) < 4 * sigma + 1e-3, (whole.mean(), windowed.mean())
    assert windowed.mean() < obs.any(axis=1).mean()  # and it decodes at all


def test_one_decoder_per_distinct_window() -> None:
    sw = SlidingWindowDecoder(surface(3, 12), "lut", window=4, commit=2)
    assert len(sw.windows) == 6 and len(sw.decoders) < len(sw.windows)
    assert sw.shape[1] == sw.shape[2] == sw.shape[3]  # the bulk windows share one decoder


def test_bad_input_to_the_window_decoder() -> None:
    with pytest.raises(InvalidArgumentError, match="no observables"):
        SlidingWindowDecoder(stim.Circuit("X_ERROR(0.1) 0\nM 0\nDETECTOR(0, 0) rec[-1]"), "lut")
    sw = SlidingWindowDecoder(surface(3), "lut")
    with pytest.raises(InvalidArgumentError, match="shape"):
        sw.decode_batch(np.zeros((2, 5), np.uint8))
    with pytest.raises(InvalidArgumentError, match="does not build from a detector error model"):
        SlidingWindowDecoder(surface(3), "steane")


def test_a_colour_code_which_stim_cannot_decompose_streams_with_a_matrix_decoder() -> None:
    circuit = stim.Circuit.generated("color_code:memory_xyz", distance=5, rounds=5, after_clifford_depolarization=0.002,
                                     before_measure_flip_probability=0.002, after_reset_flip_probability=0.002)
    name = "bposd" if "bposd" in DEM_DECODERS else "lut"
    dets, obs = circuit.compile_detector_sampler(seed=6).sample(2000, separate_observables=True)
    windowed = SlidingWindowDecoder(circuit, name, window=4, commit=2).decode_batch(dets)
    assert (windowed != obs).any(axis=1).mean() < obs.any(axis=1).mean()
    if "pymatching" in DEM_DECODERS:
        with pytest.raises(InvalidArgumentError, match="cannot decompose this circuit"):
            SlidingWindowDecoder(circuit, "pymatching")
