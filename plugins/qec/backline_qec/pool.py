"""A decoder pool with deadlines (docs/streaming.md, "A decoder pool with deadlines").

``K`` independent logical patches are decoded in one stream: patch ``k``'s shots are its own
detection events, and every patch's round ``r`` arrives at the same time ``t0 + r * cycle`` (the
shots of a patch follow each other, so shot ``i``'s round ``r`` is the stream's round
``i * rounds + r``). Each patch is decoded in sliding windows (:class:`SlidingWindowDecoder`'s plan,
``--window``/``--commit``), in order: a window is *ready* when its last round has arrived, *eligible*
when it is ready and the patch's previous window is committed (its handed-on flips applied), and
its *deadline* is its ready time plus the time its commit region takes to arrive (``C`` rounds).
At cycle 0 every round is there at once and there are no deadlines (no misses; the dispatch time
per round is then the shortest sustainable cycle).

Eligible windows of all patches go to the idle workers (the dispatch machinery of parallel windows,
:class:`~backline_qec.parallel.WorkerPool`) earliest deadline first. With admission control a window
whose predicted completion is after its deadline (:func:`predict_completion`: the busy workers'
remaining rounds, then the admitted windows queued ahead of it, then its own, each taking the median
of the recent window round trips) is *shed*: counted as a deadline miss at admission
(``rejected_at_admission``), sent to no worker, and committed with no correction (it hands nothing on,
so the shot's prediction lacks what that window would have corrected, and the LER shows the cost).
Shed windows cost no worker time, so the backlog stays bounded below the sustainable cycle, as in
DART-Q. Without admission control every eligible window joins the deadline queue and is decoded, and
a window is a miss when it completes after its deadline. The controller is this Python thread; pacing is virtual (each round's
arrival time is computed on ``time.perf_counter_ns``, a monotonic clock, and the controller waits
for the next arrival or a reply, whichever comes first).
"""

from __future__ import annotations

import collections
import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backline_core import BacklineError, Deployment

from .parallel import GRACE_S, WorkerPool
from .windows import SlidingWindowDecoder

#: the measured window round trips the admission estimate (their median) is taken over
ESTIMATE_WINDOWS = 256
#: warm-up rounds per worker and window shape before the stream (not counted); the last seeds the estimate
WARMUP_ROUNDS = 2


@dataclass
class PoolStreamResult:
    """What a pool stream measured; :meth:`to_json` gives the report."""

    patches: int
    shots: int  # per patch
    rounds: int
    windows_per_shot: int
    predictions: np.ndarray  # (patches, shots, observables) 0/1
    logical_errors: list[int] | None  # per patch
    window_latency_ns: np.ndarray  # (patches, shots, windows): each window's round trip on its worker
    response_ns: np.ndarray  # (patches, shots, windows): from the window's ready time to its reply
    window_worker: np.ndarray  # (patches, shots, windows): the worker that answered it
    rejected: np.ndarray  # (patches, shots, windows): rejected at admission
    missed: np.ndarray  # (patches, shots, windows): rejected at admission or answered after its deadline
    workers: list[str]
    worker_failures: list[dict[str, Any]]
    admission: bool
    cycle_ns: int
    max_queue: int
    max_backlog: int
    estimate_ns: float
    predicted_late: np.ndarray  # (patches, shots, windows): predicted at admission to complete after its deadline
    late_done: np.ndarray  # (patches, shots, windows): answered after its deadline, rejected or not
    prediction_error_ns: np.ndarray  # answer minus predicted answer time, each window not rejected
    dispatch_s: float
    placement: dict[str, Any]
    decoder: dict[str, Any]
    wall_s: float = 0.0
    reference_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def deadline_misses(self) -> int:
        return int(self.missed.sum())

    @property
    def rejected_at_admission(self) -> int:
        return int(self.rejected.sum())

    def to_json(self) -> dict[str, Any]:
        from .stream import _wilson, quantiles

        keys = ("p50", "p90", "p99", "p999", "max")
        errors = self.logical_errors
        total = None if errors is None else int(sum(errors))
        n = self.patches * self.shots
        counts = np.bincount(self.window_worker[self.window_worker >= 0], minlength=len(self.workers))  # shed: -1
        out = {
            "patches": self.patches, "shots": self.shots, "rounds": self.rounds,
            "windows_per_shot": self.windows_per_shot, "windows": int(self.window_worker.size),
            "logical_errors": total, "ler": None if total is None else total / n, "ler_ci95": _wilson(total, n),
            "per_patch": [{"patch": k, "logical_errors": None if errors is None else int(errors[k]),
                           "ler": None if errors is None else errors[k] / self.shots,
                           "deadline_misses": int(self.missed[k].sum()),
                           "rejected_at_admission": int(self.rejected[k].sum())} for k in range(self.patches)],
            # over the windows decoded: a shed window has no round trip and no reply
            "latency_ns": quantiles(self.window_latency_ns[self.window_worker >= 0], *keys),
            "response_ns": quantiles(self.response_ns[self.window_worker >= 0], *keys),
            "workers": len(self.workers),
            "windows_per_worker": {name: int(c) for name, c in zip(self.workers, counts)},
            "cycle_ns": self.cycle_ns, "admission": self.admission,
            "deadline_misses": self.deadline_misses, "rejected_at_admission": self.rejected_at_admission,
            "late_completions": self.deadline_misses - self.rejected_at_admission,
            "max_queue": self.max_queue, "max_backlog": self.max_backlog,
            "estimate_ns": self.estimate_ns,
            # the rule's record, kept with admission off too: what it would have rejected, and how many of those
            # were answered in time all the same (with admission on they are shed: none is answered)
            "predicted_late": int(self.predicted_late.sum()),
            "predicted_late_met_deadline": int((self.predicted_late & ~self.late_done).sum()),
            "prediction_error_ns": quantiles(self.prediction_error_ns, "p50", "p90") if self.prediction_error_ns.size
            else None,
            # at cycle 0 every round is there at once: the dispatch time per round is the shortest sustainable cycle
            "sustainable_cycle_ns": self.dispatch_s * 1e9 / (self.shots * self.rounds) if not self.cycle_ns else None,
            "worker_failures": self.worker_failures,
            "placement": self.placement, "decoder": self.decoder, "wall_s": self.wall_s, "dispatch_s": self.dispatch_s,
        }
        if self.reference_s is not None:
            out["reference_s"] = self.reference_s
        out.update(self.extra)
        return out


class _Estimate:
    """The median of the last :data:`ESTIMATE_WINDOWS` window round trips."""

    def __init__(self) -> None:
        self.values: collections.deque[int] = collections.deque(maxlen=ESTIMATE_WINDOWS)
        self.ns = 0.0

    def add(self, ns: int) -> None:
        self.values.append(ns)
        # the median: central (the p90 rejected windows that would have fitted) and unmoved by the odd
        # preempted round trip of a shared CPU, which would lift a mean for the next 256 windows
        self.ns = float(np.median(np.fromiter(self.values, np.float64)))


def predict_completion(now: int, service_ns: float, busy_since: Sequence[int | None], ahead: int) -> float:
    """When a window admitted at ``now`` completes if every round trip takes ``service_ns``: each live
    worker frees up when its round in progress (started at ``busy_since``, ``None`` if idle) has run
    ``service_ns``, or now if it has already; the ``ahead`` windows queued before this one go one at a
    time to the worker free first, then this one."""
    free = [float(now) if t is None else max(float(now), t + service_ns) for t in busy_since]
    heapq.heapify(free)
    for _ in range(ahead):
        heapq.heapreplace(free, free[0] + service_ns)
    return free[0] + service_ns


def dispatch_pool(sw: SlidingWindowDecoder, dets: np.ndarray, deployment: Deployment, workers: list[str], *,
                  cycle_ns: int, admission: bool, round_timeout_s: float) -> dict[str, Any]:
    """Decode ``dets`` (patches, shots, detectors) in ``sw``'s windows over the named workers (module docstring)."""
    patches, shots = dets.shape[:2]
    models, num_obs, rounds = sw.models, sw.num_observables, sw.num_rounds
    num_windows = len(models)
    work = np.ascontiguousarray(dets, dtype=np.uint8).copy()
    pred = np.zeros((patches, shots, num_obs), dtype=np.uint8)
    shape3 = (patches, shots, num_windows)
    latency, response = np.zeros(shape3, np.uint64), np.zeros(shape3, np.uint64)
    by = np.full(shape3, -1, dtype=np.int64)
    rejected, missed = np.zeros(shape3, bool), np.zeros(shape3, bool)
    # the admission rule's prediction, made with admission off too (so its false alarms can be counted)
    predicted, late_done = np.full(shape3, np.nan), np.zeros(shape3, bool)
    widths = [num_obs + len(m.handed_on) for m in models]
    # window i = shot * num_windows + j of a patch is ready at the stream's round ready_round[i]
    ready_round = np.array([s * rounds + m.window.end - 1 for s in range(shots) for m in models], dtype=np.int64)
    commit_rounds = [m.window.commit_end - m.window.start for m in models]
    total = patches * shots * num_windows
    estimate = _Estimate()
    error: list[float] = []  # completion minus predicted completion, windows not rejected (none at cycle 0)
    pool = WorkerPool(deployment, workers, round_timeout_s=round_timeout_s)
    # warm-up: each worker decodes each window shape (an empty syndrome) before the stream; the last
    # round of each seeds the admission estimate, so the first windows are judged on a measurement too
    for session in pool.sessions:
        for shape in sorted(set(sw.shape)):
            j = sw.shape.index(shape)
            payload = bytes((len(models[j].detectors) + 7) // 8)
            for _ in range(WARMUP_ROUNDS):
                t = time.perf_counter_ns()
                session.round(payload, decoder_id=shape)
                rtt = time.perf_counter_ns() - t
            estimate.add(rtt)
    next_window = [0] * patches  # each patch's next window not yet handed to the pool
    inflight = [False] * patches
    deadline = np.zeros(shape3, np.int64)
    ready_at = np.zeros(shape3, np.int64)
    limit_ns = int((round_timeout_s + GRACE_S) * 1e9)
    max_queue = max_backlog = done = 0
    t0 = time.perf_counter_ns()
    last_event = t0
    with pool:
        while done < total:
            now = time.perf_counter_ns()
            for p in range(patches):
                i = next_window[p]
                if inflight[p] or i >= shots * num_windows:
                    continue
                ready = t0 + int(ready_round[i]) * cycle_ns
                if ready > now:
                    continue
                s, j = divmod(i, num_windows)
                due = ready + commit_rounds[j] * cycle_ns
                key = (due, p)  # earliest deadline first; a lower patch first on a tie
                if cycle_ns:  # ahead: the admitted windows queued with an earlier deadline (or a lower patch, tied)
                    live = [t for w, t in enumerate(pool.busy_since) if w not in pool.retired]
                    predicted[p, s, j] = predict_completion(now, estimate.ns, live,
                                                            pool.jobs.count(lambda k, key=key: k < key))
                late = admission and bool(predicted[p, s, j] > due)
                rejected[p, s, j] = missed[p, s, j] = late
                ready_at[p, s, j], deadline[p, s, j] = ready, due
                last_event = now
                if late:
                    # shed: no worker's time goes to a window that would be late (so the backlog stays bounded);
                    # it commits no correction and hands nothing on, and the report counts it
                    next_window[p] += 1
                    done += 1
                    continue
                pool.push(key, (p, s, j), sw.shape[j],
                          np.packbits(work[p, s, models[j].detectors], bitorder="little").tobytes())
                inflight[p] = True
            if done >= total:  # the last windows were shed
                break
            max_queue = max(max_queue, pool.jobs.count(lambda key: True))
            arrived = (len(ready_round) if cycle_ns == 0
                       else int(np.searchsorted(ready_round, (now - t0) // cycle_ns, side="right")))
            max_backlog = max(max_backlog, patches * arrived - done)
            waiting = [t0 + int(ready_round[next_window[p]]) * cycle_ns for p in range(patches)
                       if not inflight[p] and next_window[p] < shots * num_windows]
            if any(inflight):
                wait_s = None if not waiting else max(0, min(waiting) - now) / 1e9
            else:
                wait_s = max(0, min(waiting) - now) / 1e9
            got = pool.next_done(None if wait_s is None else min(wait_s, limit_ns / 1e9))
            if got is None:  # a backstop: each round has its session's deadline, so a reply or an error comes
                if any(inflight) and time.perf_counter_ns() - last_event > limit_ns:
                    raise BacklineError(f"no worker answered within {limit_ns / 1e9:.1f} s; {done} of {total} "
                                        "windows decoded")
                continue
            last_event = got.done_ns
            p, s, j = got.tag
            if by[p, s, j] >= 0:  # a window is committed once; a second reply would be a dispatcher bug
                raise BacklineError(f"window {j} of shot {s} of patch {p} was answered twice")
            bits = np.unpackbits(np.frombuffer(got.reply, dtype=np.uint8), count=widths[j], bitorder="little")
            pred[p, s] ^= bits[:num_obs]
            work[p, s, models[j].handed_on] ^= bits[num_obs:]
            by[p, s, j], latency[p, s, j] = got.worker, got.rtt_ns
            response[p, s, j] = max(0, got.done_ns - ready_at[p, s, j])
            if cycle_ns and got.done_ns > deadline[p, s, j]:
                missed[p, s, j] = late_done[p, s, j] = True  # a rejected window was counted at admission already
            if cycle_ns:
                error.append(got.done_ns - predicted[p, s, j])
            estimate.add(got.rtt_ns)
            inflight[p] = False
            next_window[p] += 1
            done += 1
        elapsed = (time.perf_counter_ns() - t0) / 1e9
    return {"predictions": pred, "latency": latency, "response": response, "by": by, "rejected": rejected,
            "missed": missed, "failures": pool.failures, "max_queue": max_queue, "max_backlog": max_backlog,
            "estimate_ns": estimate.ns, "elapsed": elapsed, "predicted_late": predicted > deadline,
            "late_done": late_done, "prediction_error_ns": np.array(error)}
