"""ldpc's decoders by name: the same predictions as ldpc called directly on the core's matrices,
the osd_order ldpc cannot take refused, rounds equal to batches."""

from __future__ import annotations

import numpy as np
import pytest
import stim

from backline_core import BoundFunction, InvalidArgumentError, dem_matrices, plugins


def dem() -> stim.DetectorErrorModel:
    c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3, after_clifford_depolarization=0.01,
                               before_measure_flip_probability=0.01)
    return c.detector_error_model()


@pytest.mark.parametrize("name, cls, params", [
    ("ldpc-bposd", "BpOsdDecoder", {"osd_method": "osd_cs", "osd_order": 3, "max_iter": 20}),
    ("ldpc-bplsd", "BpLsdDecoder", {"lsd_method": "lsd_cs", "lsd_order": 2, "max_iter": 20}),
])
def test_predictions_equal_ldpc_on_the_cores_matrices(name: str, cls: str, params: dict) -> None:
    import ldpc

    model = dem()
    dets, obs, _ = model.compile_sampler(seed=3).sample(1000)
    ours = plugins.get("decoder", name).build_from_dem(model, **params).decode_batch(dets)
    m = dem_matrices(model)
    ref = getattr(ldpc, cls)(m.h, error_channel=list(m.priors), **params)
    theirs = np.array([(m.o @ ref.decode(s.astype(np.uint8))) % 2 for s in dets], dtype=np.uint8)
    assert (ours == theirs).all()
    assert (ours != obs).any(axis=1).mean() < obs.any(axis=1).mean() / 2


def test_rounds_answer_as_batches() -> None:
    fn = plugins.get("decoder", "ldpc-bposd").build_from_dem(dem(), reply="observables+detectors")
    packed = np.packbits(dem().compile_sampler(seed=4).sample(100)[0], axis=1, bitorder="little")
    with BoundFunction(fn) as bound:
        assert [bound(0, r.tobytes()) for r in packed] == [r.tobytes() for r in fn.decode_batch_packed(packed)]


@pytest.mark.defect("an osd_order above n - rank(H) corrupts ldpc's heap")
def test_an_osd_order_past_the_free_columns_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"osd_order=9 is more than columns - rank\(H\) = 3 - 1 = 2"):
        plugins.get("decoder", "ldpc-bposd").build_from_matrices([[1, 1, 1]], [[1, 0, 0]], osd_order=9)


def test_named_only_with_a_source() -> None:
    with pytest.raises(InvalidArgumentError, match="builds from a detector error model"):
        plugins.get("decoder", "ldpc-bplsd").build()
    with pytest.raises(InvalidArgumentError, match="'osd_e' .*|is not one of"):
        plugins.get("decoder", "ldpc-bposd").build_from_dem(dem(), osd_method="OSD-E")


@pytest.mark.defect("an empty syndrome was answered 'no error' where ldpc's LSD answers otherwise (priors above 1/2)")
@pytest.mark.parametrize("name, cls", [("ldpc-bposd", "BpOsdDecoder"), ("ldpc-bplsd", "BpLsdDecoder")])
def test_from_matrices_replies_r_e_of_ldpcs_own_estimate(name: str, cls: str) -> None:
    import ldpc

    from backline_core import check_matrices

    rng = np.random.default_rng(5)
    h = (rng.random((12, 30)) < 0.2).astype(np.uint8)
    o = (rng.random((2, 30)) < 0.3).astype(np.uint8)
    priors = rng.uniform(0.01, 0.1, 30)
    h[:, 1] = h[:, 0]
    priors[:2] = 0.9  # two likely errors that cancel: ldpc's LSD answers an empty syndrome with both
    commit = rng.random(30) < 0.5
    commit[:2] = True, False  # so the reply shows them
    syndromes = (rng.random((400, 30)) < priors).astype(np.uint8) @ h.T % 2
    syndromes[:20] = 0
    m = check_matrices(h, o, priors)
    fn = plugins.get("decoder", name).from_matrices(m, reply="observables+detectors", commit=commit, max_iter=10)
    ref = getattr(ldpc, cls)(h, error_channel=list(priors), max_iter=10)
    r = np.vstack([o, h]) * commit  # what the committed columns flip: observables, then detectors
    want = np.array([r @ ref.decode(s) % 2 for s in syndromes], dtype=np.uint8)
    assert (fn.decode_batch(syndromes) == want).all()


def test_bad_input_is_one_clear_line() -> None:
    model = dem()
    record = plugins.get("decoder", "ldpc-bposd")
    fn = record.build_from_dem(model)
    cases = [
        (lambda: record.build_from_dem(stim.DetectorErrorModel("error(0.1) D0 D1")), "no observables"),
        (lambda: record.build_from_dem(stim.DetectorErrorModel("error(0.1) L0")), "no detectors"),
        (lambda: record.build_from_dem(model, nosuch=1), "unknown parameter 'nosuch'"),
        (lambda: record.build_from_dem(model, max_iter="x"), "max_iter='x'"),
        (lambda: record.build_from_dem(model, bp_method="min_sum"), "bp_method"),
        (lambda: fn.decode_batch(np.zeros((3, model.num_detectors + 1), np.uint8)), "shape"),
        (lambda: fn.decode_batch_packed(np.zeros((3, fn.payload_bytes - 1), np.uint8)), "shape"),
    ]
    for call, says in cases:
        with pytest.raises(InvalidArgumentError, match=says) as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.defect("ldpc's LSD combination sweep aborts the process (free(): invalid pointer) above lsd_order 24")
def test_an_lsd_order_ldpc_cannot_take_is_refused_and_the_largest_it_can_decodes() -> None:
    record = plugins.get("decoder", "ldpc-bplsd")
    with pytest.raises(InvalidArgumentError, match="lsd_order=25"):
        record.build_from_dem(dem(), lsd_method="lsd_cs", lsd_order=25)
    model = dem()  # clusters with one free column are common here: the sweep's bits past them land in the chunk
    dets = model.compile_sampler(seed=6).sample(2000)[0]
    assert record.build_from_dem(model, lsd_method="lsd_cs", lsd_order=24, max_iter=2).decode_batch(dets).shape == (2000, 1)


def test_the_same_replies_over_memcpy_in_a_thread_and_in_a_process() -> None:
    pytest.importorskip("backline_transport_memcpy", reason="the memcpy transport is not installed")
    from backline_core import Controller, Coprocessor, Placement, deploy

    model = dem()
    fn = plugins.get("decoder", "ldpc-bplsd").build_from_dem(model, reply="observables+detectors")
    packed = np.packbits(model.compile_sampler(seed=7).sample(200)[0], axis=1, bitorder="little")
    want = [r.tobytes() for r in fn.decode_batch_packed(packed)]
    for runs_in in ("thread", "process"):
        placement = Placement(controller=Controller(), transport="memcpy",
                              coprocessors=[Coprocessor(name="ldpc", coprocessor_fn=fn, runs_in=runs_in)])
        with deploy(placement, in_bytes=fn.payload_bytes, out_bytes=fn.reply_bytes) as d:
            session = d.session("ldpc")
            assert [session.round(r.tobytes()) for r in packed] == want, runs_in
