"""Parallel windows on several coprocessors (docs/streaming.md, "Parallel windows").

Each worker is a coprocessor of one placement, its own session, running :func:`window_function`:
a round is one window's detection events, the reply its committed observable flips and the
detector flips it hands on. The dispatcher here keeps every worker busy: one thread per worker
issues ``session.round`` for the earliest ready window (lowest shot, then earliest window); this
thread applies each reply, and a layer-B window becomes ready once both neighbours committed.

A worker whose round fails (killed: ``PeerError``; stalled past the session's ``timeout_ms``:
``DeadlineError``, also counted as a deadline miss) is retired and its window goes to the others;
each window is committed exactly once, so the predictions are those of a run without the fault.
"""

from __future__ import annotations

import heapq
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backline_core import BacklineError, DeadlineError, Deployment

from .windows import ParallelWindowDecoder

#: extra seconds past a round's deadline before the dispatcher gives up on hearing from any worker
GRACE_S = 5.0


@dataclass
class ParallelStreamResult:
    """What a parallel-windows stream measured; :meth:`to_json` gives the report."""

    shots: int
    rounds: int
    windows_per_shot: int
    predictions: np.ndarray  # (shots, observables) 0/1
    logical_errors: int | None
    window_latency_ns: np.ndarray  # (shots, windows): each window's round trip, as its worker saw it
    window_worker: np.ndarray  # (shots, windows): index of the worker that committed it
    workers: list[str]
    worker_failures: list[dict[str, Any]]
    deadline_misses: int
    dispatch_s: float
    placement: dict[str, Any]
    decoder: dict[str, Any]
    layers: list[dict[str, Any]]
    wall_s: float = 0.0
    reference_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ler(self) -> float | None:
        return None if self.logical_errors is None else self.logical_errors / self.shots

    @property
    def windows_per_s(self) -> float:
        return float(self.window_latency_ns.size / self.dispatch_s) if self.dispatch_s > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        from .stream import _wilson, quantiles

        counts = np.bincount(self.window_worker.ravel(), minlength=len(self.workers))
        out = {
            "shots": self.shots, "rounds": self.rounds, "windows_per_shot": self.windows_per_shot,
            "logical_errors": self.logical_errors, "ler": self.ler, "ler_ci95": _wilson(self.logical_errors, self.shots),
            "latency_ns": quantiles(self.window_latency_ns, "p50", "p90", "p99", "p999", "max"),
            "workers": len(self.workers),
            "windows_per_worker": {name: int(n) for name, n in zip(self.workers, counts)},
            "windows_per_s": self.windows_per_s,
            "worker_failures": self.worker_failures,
            "deadline_misses": self.deadline_misses,
            "parallel_windows": self.layers,
            "placement": self.placement, "decoder": self.decoder, "wall_s": self.wall_s, "dispatch_s": self.dispatch_s,
        }
        if self.reference_s is not None:
            out["reference_windows_per_s"] = float(self.window_latency_ns.size / self.reference_s)
        out.update(self.extra)
        return out


class _Jobs:
    """Ready windows, earliest (shot, window) first; every wait has a deadline."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, bytes]] = []
        self.cond = threading.Condition()
        self.closed = False

    def push(self, shot: int, k: int, payload: bytes) -> None:
        with self.cond:
            heapq.heappush(self.heap, (shot, k, payload))
            self.cond.notify()

    def pop(self, wait_s: float) -> tuple[int, int, bytes] | None:
        with self.cond:
            if not self.heap and not self.closed:
                self.cond.wait(wait_s)
            return heapq.heappop(self.heap) if self.heap and not self.closed else None

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _worker(index: int, session: Any, pw: ParallelWindowDecoder, jobs: _Jobs, results: queue.Queue[Any]) -> None:
    while True:
        job = jobs.pop(0.05)
        if job is None:
            if jobs.closed:
                return
            continue
        shot, k, payload = job
        t0 = time.perf_counter_ns()
        try:
            reply = session.round(payload, decoder_id=pw.shape[k])
        except Exception as exc:  # noqa: BLE001 -- any failure retires this worker; the window goes elsewhere
            results.put((index, shot, k, payload, exc, 0))
            return
        results.put((index, shot, k, payload, reply, time.perf_counter_ns() - t0))


def dispatch(pw: ParallelWindowDecoder, dets: np.ndarray, deployment: Deployment, workers: list[str], *,
             round_timeout_s: float,
             on_progress: Callable[[int, Deployment], None] | None = None) -> dict[str, Any]:
    """Decode every shot of ``dets`` in ``pw``'s windows over the named workers' sessions."""
    shots, num_windows, num_obs = len(dets), len(pw.models), pw.num_observables
    raw = np.ascontiguousarray(dets, dtype=np.uint8)
    work = raw.copy()  # the events with every commit so far applied: what a layer-B window reads
    pred = np.zeros((shots, num_obs), dtype=np.uint8)
    latency = np.zeros((shots, num_windows), dtype=np.uint64)
    by = np.full((shots, num_windows), -1, dtype=np.int64)
    waiting = np.array([[len(a) for a in pw.after]] * shots, dtype=np.int64)
    dependents = [[j for j, a in enumerate(pw.after) if k in a] for k in range(num_windows)]
    widths = [num_obs + len(m.handed_on) for m in pw.models]
    jobs, results = _Jobs(), queue.Queue()
    for k, model in enumerate(pw.models):
        if not pw.after[k]:  # layer A reads the raw events: ready at once (cycle 0)
            packed = np.packbits(raw[:, model.detectors], axis=1, bitorder="little")
            for s in range(shots):
                jobs.push(s, k, packed[s].tobytes())
    sessions = [deployment.session(name) for name in workers]
    threads = [threading.Thread(target=_worker, args=(i, sessions[i], pw, jobs, results), daemon=True,
                                name=f"backline-qec-{name}") for i, name in enumerate(workers)]
    failures: list[dict[str, Any]] = []
    retired: list[int] = []
    misses = done = 0
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    try:
        while done < shots * num_windows:
            try:
                index, shot, k, payload, reply, rtt = results.get(timeout=round_timeout_s + GRACE_S)
            except queue.Empty:
                raise BacklineError(f"no worker answered within {round_timeout_s + GRACE_S:.1f} s; "
                                    f"{done} of {shots * num_windows} windows decoded") from None
            if isinstance(reply, BaseException):
                missed = isinstance(reply, DeadlineError)
                misses += missed
                retired.append(index)
                failures.append({"worker": workers[index], "error": f"{type(reply).__name__}: {reply}",
                                 "shot": int(shot), "window": int(k), "deadline_miss": missed})
                alive = len(workers) - len(retired)
                print(f"backline qec stream: worker {workers[index]} failed on shot {shot} window {k} "
                      f"({type(reply).__name__}: {str(reply).splitlines()[0] if str(reply) else ''}); "
                      f"its window goes to the {alive} other worker(s)", file=sys.stderr)
                if alive == 0:
                    raise BacklineError(f"every worker failed; the last: {failures[-1]['error']}")
                jobs.push(shot, k, payload)
                continue
            if by[shot, k] >= 0:  # a window is committed once; a second reply would be a dispatcher bug
                raise BacklineError(f"window {k} of shot {shot} was answered twice")
            bits = np.unpackbits(np.frombuffer(reply, dtype=np.uint8), count=widths[k], bitorder="little")
            pred[shot] ^= bits[:num_obs]
            work[shot, pw.models[k].handed_on] ^= bits[num_obs:]
            by[shot, k], latency[shot, k] = index, rtt
            done += 1
            for j in dependents[k]:
                waiting[shot, j] -= 1
                if waiting[shot, j] == 0:
                    model = pw.models[j]
                    jobs.push(shot, j, np.packbits(work[shot, model.detectors], bitorder="little").tobytes())
            if on_progress is not None:
                on_progress(done, deployment)
    finally:
        elapsed = time.perf_counter() - t0
        jobs.close()
        for t in threads:  # a worker's round has its deadline (timeout_ms), so each thread ends by then
            t.join(round_timeout_s + GRACE_S)
        for index in retired:  # a stalled helper process ignores SIGTERM until continued: end it now
            proc = deployment.processes.get(workers[index])
            if proc is not None and proc.proc is not None and proc.proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.proc.wait(round_timeout_s + GRACE_S)
    return {"predictions": pred, "latency": latency, "by": by, "failures": failures, "misses": misses,
            "elapsed": elapsed}
