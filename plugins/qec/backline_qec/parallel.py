"""Parallel windows on several coprocessors (docs/streaming.md, "Parallel windows").

Each worker is a coprocessor of one placement, its own session, running :func:`window_function`:
a round is one window's detection events, the reply its committed observable flips and the
detector flips it hands on. The dispatcher here keeps every worker busy: one thread per worker
issues ``session.round`` for the earliest ready window (lowest shot, then earliest window); this
thread applies each reply, and a layer-B window becomes ready once both neighbours committed.

A worker whose round fails (killed: ``PeerError``; stalled past the session's ``timeout_ms``:
``DeadlineError``, also counted as a deadline miss) is retired and its window goes to the others;
each window is committed exactly once, so the predictions are those of a run without the fault.

:class:`WorkerPool` is that machinery (worker threads, the shared queue, retire-and-resend) for any
job order; the decoder pool with deadlines (``backline_qec.pool``) uses it too.
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

from .report import LogicalErrorRate, quantiles
from .windows import ParallelWindowDecoder

#: extra seconds past a round's deadline before the dispatcher gives up on hearing from any worker
GRACE_S = 5.0


@dataclass
class ParallelStreamResult(LogicalErrorRate):
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
    def windows_per_s(self) -> float:
        return float(self.window_latency_ns.size / self.dispatch_s) if self.dispatch_s > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        counts = np.bincount(self.window_worker.ravel(), minlength=len(self.workers))
        out = {
            "shots": self.shots, "rounds": self.rounds, "windows_per_shot": self.windows_per_shot,
            **self.ler_json(),
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
    """Jobs waiting for a worker, lowest key first; every wait has a deadline.

    A job is ``(key, tag, decoder_id, payload)``: ``key`` orders the jobs (parallel windows: (shot,
    window); the pool: (lane, deadline, ...)), ``tag`` says which window it is."""

    def __init__(self) -> None:
        self.heap: list[tuple[Any, Any, int, bytes]] = []
        self.cond = threading.Condition()
        self.closed = False

    def push(self, key: Any, tag: Any, decoder_id: int, payload: bytes) -> None:
        with self.cond:
            heapq.heappush(self.heap, (key, tag, decoder_id, payload))
            self.cond.notify()

    def pop(self, wait_s: float) -> tuple[Any, Any, int, bytes] | None:
        with self.cond:
            if not self.heap and not self.closed:
                self.cond.wait(wait_s)
            return heapq.heappop(self.heap) if self.heap and not self.closed else None

    def count(self, keep: Callable[[Any], bool]) -> int:
        """How many waiting jobs' keys ``keep`` accepts."""
        with self.cond:
            return sum(1 for job in self.heap if keep(job[0]))

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _worker(index: int, session: Any, jobs: _Jobs, results: queue.Queue[Any], busy: list[int | None]) -> None:
    while True:
        job = jobs.pop(0.05)
        if job is None:
            if jobs.closed:
                return
            continue
        key, tag, decoder_id, payload = job
        t0 = time.perf_counter_ns()
        busy[index] = t0
        try:
            reply = session.round(payload, decoder_id=decoder_id)
        except Exception as exc:  # noqa: BLE001 -- any failure retires this worker; the window goes elsewhere
            results.put((index, job, exc, t0, 0))
            return
        finally:
            busy[index] = None
        t1 = time.perf_counter_ns()
        results.put((index, job, reply, t0, t1))


@dataclass
class Done:
    """A window a worker answered: ``started_ns``/``done_ns`` on ``time.perf_counter_ns``."""

    worker: int
    key: Any
    tag: Any
    reply: bytes
    started_ns: int
    done_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.done_ns - self.started_ns


class WorkerPool:
    """One thread per worker session taking the lowest-key job from a shared queue (the dispatch
    machinery of parallel windows and of the decoder pool, ``backline_qec.pool``).

    :meth:`next_done` returns the next answered window; a worker whose round fails is retired (its
    failure recorded, a ``DeadlineError`` counted in :attr:`misses`) and its job goes back to the
    queue for the others. Use as a context manager: leaving it stops the threads and kills a
    retired worker's process (a stalled one ignores SIGTERM)."""

    def __init__(self, deployment: Deployment, workers: list[str], *, round_timeout_s: float) -> None:
        self.deployment, self.workers, self.round_timeout_s = deployment, workers, round_timeout_s
        self.jobs, self.results = _Jobs(), queue.Queue()
        self.sessions = [deployment.session(name) for name in workers]
        #: each worker's round in progress: its start (``time.perf_counter_ns``), ``None`` when idle
        self.busy_since: list[int | None] = [None] * len(workers)
        self.threads = [threading.Thread(target=_worker, args=(i, self.sessions[i], self.jobs, self.results,
                                                               self.busy_since),
                                         daemon=True, name=f"backline-qec-{name}") for i, name in enumerate(workers)]
        self.failures: list[dict[str, Any]] = []
        self.retired: list[int] = []
        self.misses = 0

    def __enter__(self) -> WorkerPool:
        for t in self.threads:
            t.start()
        return self

    def push(self, key: Any, tag: Any, decoder_id: int, payload: bytes) -> None:
        self.jobs.push(key, tag, decoder_id, payload)

    def next_done(self, wait_s: float | None = None) -> Done | None:
        """The next answered window; ``None`` if none within ``wait_s`` (given). With no ``wait_s``, a
        worker must answer within the round deadline and a grace, or this raises."""
        limit = self.round_timeout_s + GRACE_S
        while True:
            try:
                index, job, reply, t0, t1 = self.results.get(timeout=limit if wait_s is None else min(wait_s, limit))
            except queue.Empty:
                if wait_s is not None and wait_s <= limit:
                    return None
                raise BacklineError(f"no worker answered within {limit:.1f} s") from None
            if not isinstance(reply, BaseException):
                return Done(index, job[0], job[1], reply, t0, t1)
            missed = isinstance(reply, DeadlineError)
            self.misses += missed
            self.retired.append(index)
            where = job[1]
            self.failures.append({"worker": self.workers[index], "error": f"{type(reply).__name__}: {reply}",
                                  **{name: int(v) for name, v in zip(("shot", "window"), where[-2:])},
                                  **({"patch": int(where[0])} if len(where) == 3 else {}),
                                  "deadline_miss": missed})
            alive = len(self.workers) - len(self.retired)
            lead = f"patch {where[0]} " if len(where) == 3 else ""
            print(f"backline qec stream: worker {self.workers[index]} failed on {lead}shot {where[-2]} window "
                  f"{where[-1]} ({type(reply).__name__}: {str(reply).splitlines()[0] if str(reply) else ''}); "
                  f"its window goes to the {alive} other worker(s)", file=sys.stderr)
            if alive == 0:
                raise BacklineError(f"every worker failed; the last: {self.failures[-1]['error']}")
            self.jobs.push(*job)

    def __exit__(self, *exc: Any) -> None:
        self.jobs.close()
        for t in self.threads:  # a worker's round has its deadline (timeout_ms), so each thread ends by then
            t.join(self.round_timeout_s + GRACE_S)
        for index in self.retired:  # a stalled helper process ignores SIGTERM until continued: end it now
            proc = self.deployment.processes.get(self.workers[index])
            if proc is not None and proc.proc is not None and proc.proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.proc.wait(self.round_timeout_s + GRACE_S)


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
    pool = WorkerPool(deployment, workers, round_timeout_s=round_timeout_s)
    for k, model in enumerate(pw.models):
        if not pw.after[k]:  # layer A reads the raw events: ready at once (cycle 0)
            packed = np.packbits(raw[:, model.detectors], axis=1, bitorder="little")
            for s in range(shots):
                pool.push((s, k), (s, k), pw.shape[k], packed[s].tobytes())
    done = 0
    t0 = time.perf_counter()
    with pool:
        while done < shots * num_windows:
            try:
                got = pool.next_done()
            except BacklineError as exc:
                raise BacklineError(f"{exc}; {done} of {shots * num_windows} windows decoded") from None
            assert got is not None
            shot, k = got.tag
            if by[shot, k] >= 0:  # a window is committed once; a second reply would be a dispatcher bug
                raise BacklineError(f"window {k} of shot {shot} was answered twice")
            bits = np.unpackbits(np.frombuffer(got.reply, dtype=np.uint8), count=widths[k], bitorder="little")
            pred[shot] ^= bits[:num_obs]
            work[shot, pw.models[k].handed_on] ^= bits[num_obs:]
            by[shot, k], latency[shot, k] = got.worker, got.rtt_ns
            done += 1
            for j in dependents[k]:
                waiting[shot, j] -= 1
                if waiting[shot, j] == 0:
                    model = pw.models[j]
                    pool.push((shot, j), (shot, j), pw.shape[j],
                              np.packbits(work[shot, model.detectors], bitorder="little").tobytes())
            if on_progress is not None:
                on_progress(done, deployment)
        elapsed = time.perf_counter() - t0
    return {"predictions": pred, "latency": latency, "by": by, "failures": pool.failures, "misses": pool.misses,
            "elapsed": elapsed}
