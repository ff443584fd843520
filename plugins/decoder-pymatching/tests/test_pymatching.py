"""The pymatching decoder predicts what PyMatching predicts, reports its detector flips exactly,
and refuses what matching cannot decode."""

from __future__ import annotations

import numpy as np
import pymatching
import pytest
import stim

from backline_core import BoundFunction, InvalidArgumentError, check_matrices, plugins

RECORD = plugins.get("decoder", "pymatching")


def circuit(kind: str = "surface", d: int = 5, p: float = 0.005) -> stim.Circuit:
    if kind == "repetition":
        return stim.Circuit.generated("repetition_code:memory", distance=d, rounds=d, after_clifford_depolarization=p,
                                      before_measure_flip_probability=p)
    return stim.Circuit.generated("surface_code:rotated_memory_x", distance=d, rounds=d,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p)


@pytest.mark.parametrize("kind", ["surface", "repetition"])
def test_predictions_equal_pymatchings_own(kind: str) -> None:
    c = circuit(kind)
    dem = c.detector_error_model(decompose_errors=True)
    dets, obs = c.compile_detector_sampler(seed=2).sample(20000, separate_observables=True)
    ours = RECORD.build_from_dem(dem).decode_batch(dets)
    theirs = pymatching.Matching.from_detector_error_model(dem).decode_batch(dets)
    assert (ours == theirs).all()
    assert (ours != obs).any(axis=1).mean() < obs.any(axis=1).mean() / 4


def test_correlated_matching_is_pymatchings_too() -> None:
    c = circuit("surface", d=3)
    dem = c.detector_error_model(decompose_errors=True)
    dets = c.compile_detector_sampler(seed=3).sample(5000)
    ours = RECORD.build_from_dem(dem, enable_correlations=True).decode_batch(dets)
    theirs = pymatching.Matching.from_detector_error_model(dem, enable_correlations=True).decode_batch(
        dets, enable_correlations=True)
    assert (ours == theirs).all()


def test_the_detector_flips_reply_is_the_syndrome_of_the_matching() -> None:
    c = circuit("surface", d=3)
    dem = c.detector_error_model(decompose_errors=True)
    dets = c.compile_detector_sampler(seed=4).sample(3000).astype(np.uint8)
    fn = RECORD.build_from_dem(dem, reply="observables+detectors")
    out = fn.decode_batch(dets)
    assert out.shape == (3000, dem.num_observables + dem.num_detectors)
    # a matching explains every detection event: its detector flips are the detection events
    assert (out[:, dem.num_observables:] == dets).all()
    assert (out[:, :dem.num_observables] == RECORD.build_from_dem(dem).decode_batch(dets)).all()


def test_from_matrices_equals_pymatching_from_the_check_matrix() -> None:
    rng = np.random.default_rng(5)
    n = 12  # a repetition code's checks: each column flips one or two detectors
    h = np.zeros((n - 1, n), np.uint8)
    for i in range(n - 1):
        h[i, i] = h[i, i + 1] = 1
    o = np.zeros((1, n), np.uint8)
    o[0, 0] = 1
    priors = rng.uniform(0.01, 0.1, n)
    errors = (rng.random((2000, n)) < priors).astype(np.uint8)
    syndromes = errors @ h.T % 2
    ours = RECORD.build_from_matrices(h, o, priors).decode_batch(syndromes)
    theirs = pymatching.Matching.from_check_matrix(h, weights=np.log((1 - priors) / priors),
                                                   faults_matrix=o).decode_batch(syndromes)
    assert (ours == theirs).all()


def test_rounds_answer_as_batches_and_a_wrong_width_fails_the_round() -> None:
    c = circuit("surface", d=3)
    dem = c.detector_error_model(decompose_errors=True)
    fn = RECORD.build_from_dem(dem)
    packed = np.packbits(c.compile_detector_sampler(seed=6).sample(200), axis=1, bitorder="little")
    with BoundFunction(fn) as bound:
        assert [bound(0, r.tobytes()) for r in packed] == [r.tobytes() for r in fn.decode_batch_packed(packed)]
        with pytest.raises(Exception, match="returned 1"):  # the Python path's 'raised'
            bound(0, packed[0].tobytes() + b"\0")


@pytest.mark.defect("PyMatching drops an undecomposed hyperedge silently")
def test_an_undecomposed_dem_is_refused_saying_how_to_decompose() -> None:
    c = stim.Circuit.generated("color_code:memory_xyz", distance=3, rounds=2, after_clifford_depolarization=0.01)
    with pytest.raises(InvalidArgumentError, match=r"decompose_errors=True"):
        RECORD.build_from_dem(c.detector_error_model())


def test_matrices_matching_cannot_decode_are_refused() -> None:
    m = check_matrices([[1, 1], [1, 0], [1, 1]], [[1, 0]])
    with pytest.raises(InvalidArgumentError, match="column 0 of H flips 3 detectors"):
        RECORD.build_from_matrices(m.h, m.o)
    with pytest.raises(InvalidArgumentError, match="needs a DEM"):
        RECORD.build_from_matrices([[1, 0], [0, 1]], [[1, 0]], enable_correlations=True)
    with pytest.raises(InvalidArgumentError, match="builds from a detector error model"):
        RECORD.build()
    with pytest.raises(InvalidArgumentError, match="enable_correlations='x'"):
        RECORD.build_from_dem(circuit("surface", 3).detector_error_model(decompose_errors=True),
                              enable_correlations="x")


def test_from_matrices_replies_with_the_detector_flips_of_the_committed_edges() -> None:
    n = 10  # a repetition code: each column one edge
    h = np.zeros((n - 1, n), np.uint8)
    for i in range(n - 1):
        h[i, i] = h[i, i + 1] = 1
    o = np.zeros((1, n), np.uint8)
    o[0, 0] = o[0, 7] = 1
    priors = np.linspace(0.02, 0.08, n)
    commit = np.arange(n) < 6
    syndromes = (np.random.default_rng(8).random((1000, n)) < priors).astype(np.uint8) @ h.T % 2
    m = check_matrices(h, o, priors)
    fn = RECORD.from_matrices(m, reply="observables+detectors", commit=commit)
    edges = pymatching.Matching.from_check_matrix(h, weights=np.log((1 - priors) / priors))
    e = np.array([edges.decode(s) for s in syndromes], dtype=np.uint8)  # the matched columns
    want = (e * commit) @ np.vstack([o, h]).T % 2  # what the committed edges flip: observables, then detectors
    assert (fn.decode_batch(syndromes) == want).all()


def test_bad_input_is_one_clear_line() -> None:
    dem = circuit("surface", 3).detector_error_model(decompose_errors=True)
    fn = RECORD.build_from_dem(dem)
    cases = [
        (lambda: RECORD.build_from_dem(stim.DetectorErrorModel("error(0.1) D0 D1")), "no observables"),
        (lambda: RECORD.build_from_dem(stim.DetectorErrorModel("error(0.1) L0")), "no detectors"),
        (lambda: RECORD.build_from_dem(dem, nosuch=1), "unknown parameter 'nosuch'"),
        (lambda: RECORD.build_from_dem(dem, reply="detectors"), "replies with"),
        (lambda: fn.decode_batch(np.zeros((3, dem.num_detectors - 1), np.uint8)), "shape"),
        (lambda: fn.decode_batch_packed(np.zeros((3, fn.payload_bytes + 1), np.uint8)), "shape"),
        # an event on a detector no error reaches is no syndrome of this model: PyMatching's ValueError, in one line
        (lambda: RECORD.build_from_dem(stim.DetectorErrorModel("error(0.1) D0 L0\ndetector D1")).decode_batch(
            np.array([[0, 1]], np.uint8)), "pymatching: No perfect matching"),
    ]
    for call, says in cases:
        with pytest.raises(InvalidArgumentError, match=says) as info:
            call()
        assert "\n" not in str(info.value)


def test_a_placement_naming_pymatching_says_to_build_from_a_dem() -> None:
    pytest.importorskip("backline_transport_memcpy", reason="the memcpy transport is not installed")
    from backline_core import Controller, Coprocessor, Placement, PlacementError, deploy

    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name="pm", coprocessor_fn="pymatching", runs_in="thread")])
    with pytest.raises(PlacementError, match=r"build_from_dem\(dem\)"):
        deploy(placement, in_bytes=8, out_bytes=8)


def test_the_same_replies_over_memcpy_in_a_thread_and_in_a_process() -> None:
    pytest.importorskip("backline_transport_memcpy", reason="the memcpy transport is not installed")
    from backline_core import Controller, Coprocessor, Placement, deploy

    c = circuit("surface", d=3)
    fn = RECORD.build_from_dem(c.detector_error_model(decompose_errors=True), reply="observables+detectors")
    packed = c.compile_detector_sampler(seed=9).sample(300, bit_packed=True)
    want = [r.tobytes() for r in fn.decode_batch_packed(packed)]
    for runs_in in ("thread", "process"):
        placement = Placement(controller=Controller(), transport="memcpy",
                              coprocessors=[Coprocessor(name="pm", coprocessor_fn=fn, runs_in=runs_in)])
        with deploy(placement, in_bytes=fn.payload_bytes, out_bytes=fn.reply_bytes) as d:
            session = d.session("pm")
            assert [session.round(r.tobytes()) for r in packed] == want, runs_in
