"""The stream over rdma (the coprocessor in a process, as rdma places it), in the Soft-RoCE guest: the same predictions as the window decoder offline.

Skips without a verbs device; fails instead under BACKLINE_REQUIRE_RDMA=1 (CI's guest stage runs this
folder so). Run here with ``plugins/transport-rdma/guest/run-in-guest '.venv/bin/python -m pytest
plugins/qec/tests/guest'``.
"""

from __future__ import annotations

import numpy as np
import pytest
import stim

from backline_core import plugins

HERE = "plugins/qec/tests/guest"


@pytest.fixture(scope="module")
def rdma_device() -> str:
    testing = pytest.importorskip("backline_transport_rdma.testing",
                                  reason="the rdma transport plugin (plugins/transport-rdma) is not installed")
    return testing.require_device(HERE)


def _surface() -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=6,
                                  after_clifford_depolarization=0.003, before_measure_flip_probability=0.003,
                                  after_reset_flip_probability=0.003)


@pytest.mark.parametrize("name", [n for n in ("lut", "bposd", "pymatching") if n in plugins.names("decoder")])
def test_the_stream_over_rdma_predicts_what_the_window_decoder_does_offline(rdma_device: str, name: str) -> None:
    from backline_qec import SlidingWindowDecoder
    from backline_qec.stream import stream

    dets, obs = _surface().compile_detector_sampler(seed=8).sample(300, separate_observables=True)
    dets, obs = dets.astype(np.uint8), obs.astype(np.uint8)
    offline = SlidingWindowDecoder(_surface(), name, window=4, commit=2).decode_batch(dets)
    # Soft-RoCE works in the guest's kernel, whose softirqs compete with the spinning ends for the
    # guest's emulated CPUs: a round may stall past the default deadline there
    result = stream(_surface(), name, detectors=dets, observables=obs, transport="rdma", runs_in="process",
                    transport_args={"device": rdma_device, "timeout_ms": 10000}, window=4, commit=2)
    assert (result.predictions == offline).all()
    assert result.logical_errors == int((offline != obs).any(axis=1).sum())
    assert result.to_json()["placement"]["transport"] == "rdma"


def test_parallel_windows_on_two_workers_over_rdma_predict_what_they_do_in_process(rdma_device: str) -> None:
    # each worker is its own coprocessor process and rdma session (issue 27: workers "over ucx or rdma")
    from backline_qec import ParallelWindowDecoder
    from backline_qec.stream import stream

    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=12,
                                     after_clifford_depolarization=0.003, before_measure_flip_probability=0.003,
                                     after_reset_flip_probability=0.003)
    dets, obs = circuit.compile_detector_sampler(seed=9).sample(60, separate_observables=True)
    dets = dets.astype(np.uint8)
    name = "bposd" if "bposd" in plugins.names("decoder") else "lut"
    offline = ParallelWindowDecoder(circuit, name, window=7, commit=3).decode_batch(dets)
    result = stream(circuit, name, detectors=dets, observables=obs, window=7, commit=3, parallel_windows=True,
                    workers=2, transport="rdma", runs_in="process",
                    transport_args={"device": rdma_device, "timeout_ms": 10000}, round_timeout_ms=10000)
    assert (result.predictions == offline).all()
    report = result.to_json()
    assert report["placement"]["transport"] == "rdma" and report["worker_failures"] == []
    assert sum(report["windows_per_worker"].values()) == len(dets) * report["windows_per_shot"]
