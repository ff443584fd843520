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
