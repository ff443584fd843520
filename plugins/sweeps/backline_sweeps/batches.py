"""Batches: how many shots each carries (sinter's ramp), and what a worker does with one.

A batch is (task, batch id, shots, seed). Its result carries the batch id, so a batch that Dask
runs again after a worker died is counted once. The seed comes from the run's seed and the
batch id: a rerun samples the same shots, and two batches never share a seed.
"""

from __future__ import annotations

import atexit
import itertools

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .tasks import BACKLINE_PREFIX, TaskSpec, sinter_dem

#: sinter's ramp aims each batch at this many seconds of sampling and decoding
TARGET_BATCH_SECONDS = 1.0
#: the most shots in a batch. sinter caps at 1024 shots because its batches stay in the worker;
#: each of ours is a Dask task (about 5 ms of the client's, the scheduler's and the worker's time
#: here), so a batch grows to sinter's 1 s target: at 65,536 shots a d=3 batch took 0.03 s and the
#: per-batch overhead was a third of the run.
MAX_BATCH_SHOTS = 1 << 20
#: and at most this many detector bits (a decoder may unpack them a byte each: 64 MB)
MAX_BATCH_DETECTOR_BITS = 1 << 26
#: a worker samples and decodes a batch this many shots at a time (one stim sampler, so the shots are
#: the batch seed's either way): decoding 2**20 shots at once ran 20-30 % slower here than 2**14 at a time
CHUNK_SHOTS = 1 << 14
#: compiled decoders a worker process keeps (one per task it has seen lately)
CACHED_DECODERS = 8


@dataclass(frozen=True)
class Batch:
    """``shots`` shots of task ``strong_id``, sampled with ``seed``."""

    batch_id: int
    strong_id: str
    shots: int
    seed: int


@dataclass(frozen=True)
class BatchResult:
    """What a worker measured for one batch; ``seconds`` is its sampling and decoding time (sinter's)."""

    batch_id: int
    strong_id: str
    shots: int
    errors: int
    discards: int
    seconds: float
    worker: str = ""
    custom_counts: dict[str, int] = field(default_factory=dict)


class BatchSizer:
    """sinter's ramp (``CompiledRampThrottledSampler``): start small; double the shots up to four
    times while a batch takes under 30 % of the target time, halve them when one takes over 130 %."""

    def __init__(self, start: int = 1, target_seconds: float = TARGET_BATCH_SECONDS,
                 max_shots: int = MAX_BATCH_SHOTS) -> None:
        self.shots = max(1, min(start, max_shots))
        self.target, self.max_shots = target_seconds, max_shots

    def update(self, shots: int, seconds: float) -> None:
        """A batch of ``shots`` took ``seconds`` to sample and decode."""
        dt = seconds
        if shots > 1 and dt > self.target * 1.3:
            self.shots = max(1, min(self.shots, shots) // 2)
            return
        if shots * 2 >= self.shots:  # only a batch as large as asked for says the size is too small
            for _ in range(4):
                if self.shots * 2 > self.max_shots or dt > self.target * 0.3:
                    break
                self.shots *= 2
                dt *= 2


def max_batch_shots(num_detectors: int) -> int:
    """The most shots a batch of a task with ``num_detectors`` detectors carries."""
    return max(1024, min(MAX_BATCH_SHOTS, MAX_BATCH_DETECTOR_BITS // max(num_detectors, 1)))


def batch_seed(run_seed: int, batch_id: int) -> int:
    """A 64-bit stim seed for one batch of one run."""
    return int(np.random.SeedSequence([run_seed, batch_id]).generate_state(1, dtype=np.uint64)[0])


# -- the worker side --------------------------------------------------------------------------

# per worker process: task strong_id -> (stim sampler factory inputs, compiled decoder)
_compiled: OrderedDict[tuple[str, str | None], Any] = OrderedDict()


class _Prepared:
    """A task made ready on this worker: its circuit, and sinter's compiled decoder or, with a placement,
    the stream deployed on it (kept while the task is cached, closed when it leaves the cache)."""

    def __init__(self, task: TaskSpec, placement_json: str | None) -> None:
        import stim

        self.circuit = stim.Circuit(task.circuit_text)
        self.placed = None
        self.decoder = None
        if placement_json is not None:
            from backline_qec.stream import PlacedStream

            self.placed = PlacedStream(self.circuit, task.decoder.removeprefix(BACKLINE_PREFIX),
                                       worker_placement(placement_json))
        else:
            self.decoder = _sinter_decoder(task.decoder).compile_decoder_for_dem(dem=sinter_dem(self.circuit))

    def close(self) -> None:
        if self.placed is not None:
            self.placed.close()


_deployments = itertools.count()


def worker_placement(placement_json: str) -> Any:
    """The sweep's placement as this worker process deploys it for one task: a coprocessor without an
    endpoint is found by its name on this host (memcpy's shared-memory key), and several workers of one
    host, each with several tasks deployed, stream at once, so it is named NAME-PID-N. One with an
    endpoint keeps it: two deployments on one endpoint are refused by the transport (give each host
    one worker, or no endpoint)."""
    import dataclasses

    from backline_core import Placement
    from backline_core.sdk import host_local_name

    placement = Placement.from_json(placement_json)
    n_ = next(_deployments)
    nodes = [n if n.endpoint is not None else dataclasses.replace(n, name=host_local_name(n.name, n_))
             for n in placement.coprocessors]
    return dataclasses.replace(placement, coprocessors=nodes)


def _sinter_decoder(name: str) -> Any:
    if name.startswith(BACKLINE_PREFIX):
        from backline_core.sdk import sinter_decoders

        return sinter_decoders([name])[name]
    import sinter

    return sinter.BUILT_IN_DECODERS[name]


def _prepared(task: TaskSpec, placement_json: str | None) -> _Prepared:
    key = (task.strong_id, placement_json)
    if key in _compiled:
        _compiled.move_to_end(key)
        return _compiled[key]
    if placement_json is not None:
        # one deployment at a time on a worker: a placement's endpoint serves one stream
        for other in [k for k in _compiled if k[1] is not None]:
            _compiled.pop(other).close()
    prep = _Prepared(task, placement_json)
    _compiled[key] = prep
    while len(_compiled) > CACHED_DECODERS:
        _compiled.popitem(last=False)[1].close()
    return prep


@atexit.register
def _close_prepared() -> None:
    # a worker that exits stops the coprocessors its tasks deployed (their --parent-pid watch is the backstop)
    while _compiled:
        _compiled.popitem()[1].close()


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):  # not in a Dask worker (a test calling it directly)
        return "local"


def _chunks(sampler: Any, shots: int) -> Any:
    """``shots`` shots from ``sampler`` (bit-packed detectors, observables), ``CHUNK_SHOTS`` at a time."""
    done = 0
    while done < shots:
        n = min(CHUNK_SHOTS, shots - done)
        done += n
        yield sampler.sample(n, separate_observables=True, bit_packed=True)


def run_batch(task: TaskSpec, batch: Batch, placement_json: str | None = None) -> BatchResult:
    """Sample ``batch.shots`` shots of ``task`` with stim and decode them: in process with sinter's
    decoder, or, given a placement, streamed round by round to its coprocessor (backline_qec.stream)."""
    prep = _prepared(task, placement_json)  # compiling is not part of a batch's time, as in sinter
    t0 = time.monotonic()
    sampler = prep.circuit.compile_detector_sampler(seed=batch.seed)
    discards = errors = 0
    if prep.placed is None:
        for dets, obs in _chunks(sampler, batch.shots):
            predictions = np.asarray(prep.decoder.decode_shots_bit_packed(bit_packed_detection_event_data=dets))
            obs_bytes = obs.shape[1]
            if predictions.shape[1] == obs_bytes + 1:  # sinter's convention: a last byte that is not 0 discards
                keep = predictions[:, -1] == 0
                discards += int(np.count_nonzero(~keep))
                predictions, obs = predictions[keep, :-1], obs[keep]
            errors += int(np.count_nonzero(np.any(predictions != obs, axis=1)))
    else:
        # the same shots as the offline path: sampled in the same chunks
        for dets, obs in _chunks(sampler, batch.shots):
            det_bits = np.unpackbits(dets, axis=1, count=task.num_detectors, bitorder="little")
            obs_bits = np.unpackbits(obs, axis=1, count=task.num_observables, bitorder="little")
            errors += int(np.count_nonzero(np.any(prep.placed.run(det_bits) != obs_bits, axis=1)))
    return BatchResult(batch_id=batch.batch_id, strong_id=batch.strong_id, shots=batch.shots, errors=errors,
                       discards=discards, seconds=time.monotonic() - t0, worker=_worker_name())
