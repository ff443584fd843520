"""The sweep: batches out to the workers, results back as they come, sinter's stopping rules and CSV."""

from __future__ import annotations

import math
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from backline_core import BacklineError

from .batches import Batch, BatchResult, BatchSizer, batch_seed, max_batch_shots, run_batch
from .cluster import Cluster
from .progress import SweepProgress
from .tasks import TaskSpec

#: batches in flight per worker thread: one running, one queued, so a worker never waits on the round trip
IN_FLIGHT_PER_SLOT = 2
#: seconds between CSV rows of one task (sinter also writes a task's results in periodic rows)
FLUSH_PERIOD_S = 2.0
#: seconds between re-reading how many workers the scheduler has
SLOTS_PERIOD_S = 2.0


@dataclass
class TaskState:
    """One task's totals: from the resume file, counted, unflushed and in flight."""

    spec: TaskSpec
    shots_before: int = 0  # rows already in the resume file
    errors_before: int = 0
    shots: int = 0  # counted this run
    errors: int = 0
    discards: int = 0
    seconds: float = 0.0
    unassigned: int = 0
    in_flight: int = 0
    sizer: BatchSizer = field(default_factory=BatchSizer)
    unflushed: list[BatchResult] = field(default_factory=list)
    last_flush: float = field(default_factory=time.monotonic)

    @property
    def total_shots(self) -> int:
        return self.shots_before + self.shots

    @property
    def total_errors(self) -> int:
        return self.errors_before + self.errors

    def wants_more(self, max_errors: int) -> bool:
        return self.unassigned > 0 and self.total_errors < max_errors

    def done(self, max_errors: int) -> bool:
        return self.in_flight == 0 and not self.wants_more(max_errors)


def existing_rows(path: str | None) -> dict[str, Any]:
    """The resume file's totals by strong_id (sinter's reader; a missing file has none)."""
    if path is None or not os.path.exists(path):
        return {}
    import sinter

    try:
        stats = sinter.read_stats_from_csv_files(path)
    except Exception as exc:  # sinter raises plain Exceptions of several kinds for a malformed file
        raise BacklineError(f"--save-resume-filepath {path}: not sinter's CSV: {str(exc).splitlines()[0]}") from None
    return {s.strong_id: s for s in stats}


class CsvOut:
    """Rows in sinter's CSV, appended as they come and flushed (a resume file, or stdout)."""

    def __init__(self, path: str | None) -> None:
        import sinter

        self.path = path
        if path is None:
            self.fh: TextIO = sys.stdout
            print(sinter.CSV_HEADER, file=self.fh, flush=True)
        else:
            new = not os.path.exists(path) or os.path.getsize(path) == 0
            self.fh = open(path, "a")
            if new:
                print(sinter.CSV_HEADER, file=self.fh, flush=True)
        self.rows = 0

    def write(self, stat: Any) -> None:
        print(stat.to_csv_line(), file=self.fh, flush=True)
        self.rows += 1

    def close(self) -> None:
        if self.path is not None:
            self.fh.close()


def _row(state: TaskState) -> Any:
    import sinter

    results, state.unflushed = state.unflushed, []
    state.last_flush = time.monotonic()
    return sinter.TaskStats(strong_id=state.spec.strong_id, decoder=state.spec.decoder,
                            json_metadata=state.spec.json_metadata, shots=sum(r.shots for r in results),
                            errors=sum(r.errors for r in results), discards=sum(r.discards for r in results),
                            seconds=sum(r.seconds for r in results))


def collect(tasks: Sequence[TaskSpec], cluster: Cluster, *, max_shots: int, max_errors: int,
            save_path: str | None = None, placement_json: str | None = None, seed: int | None = None,
            progress: SweepProgress | None = None, on_result: Any = None) -> list[Any]:
    """Run every task to ``max_shots`` or ``max_errors`` (counting the rows already in ``save_path``),
    appending sinter's CSV rows as results come in; returns each task's totals as ``sinter.TaskStats``.

    On KeyboardInterrupt the rows gathered so far are written before it propagates."""
    from distributed import as_completed

    before = existing_rows(save_path)
    states: dict[str, TaskState] = {}
    for spec in tasks:
        st = TaskState(spec=spec, sizer=BatchSizer(max_shots=max_batch_shots(spec.num_detectors)))
        if spec.strong_id in before:
            st.shots_before, st.errors_before = before[spec.strong_id].shots, before[spec.strong_id].errors
        st.unassigned = max(0, max_shots - st.shots_before)
        states[spec.strong_id] = st
    run_seed = secrets.randbits(63) if seed is None else int(seed)
    out = CsvOut(save_path)
    seen: set[int] = set()  # batch ids counted: a batch rerun after a worker died counts once
    next_id = 0
    futures: dict[Any, Batch] = {}
    slots, slots_read = max(cluster.slots(), 1), time.monotonic()

    def submit_more(pending: Any) -> None:
        nonlocal next_id
        while len(futures) < slots * IN_FLIGHT_PER_SLOT:
            open_tasks = [s for s in states.values() if s.wants_more(max_errors)]
            if not open_tasks:
                return
            st = min(open_tasks, key=lambda s: s.in_flight)  # sinter: the task with the fewest workers
            # the tail of a task is split over the workers rather than left to one, but into no
            # batch under a quarter of the ramp's size (halving it down to 1 shot cost a round trip each)
            shots = min(st.sizer.shots, st.unassigned,
                        max(math.ceil(st.unassigned / slots), st.sizer.shots // 4, 1))
            batch = Batch(batch_id=next_id, strong_id=st.spec.strong_id, shots=shots, seed=batch_seed(run_seed, next_id))
            next_id += 1
            st.unassigned -= shots
            st.in_flight += 1
            # the spec travels with each batch (a few kB): data scattered to one worker would die with it
            fut = cluster.client.submit(run_batch, st.spec, batch, placement_json,
                                        key=f"backline-batch-{run_seed:x}-{batch.batch_id}", pure=False)
            futures[fut] = batch
            pending.add(fut)

    def flush(force: bool) -> None:
        now = time.monotonic()
        for st in states.values():
            if st.unflushed and (force or now - st.last_flush >= FLUSH_PERIOD_S or st.done(max_errors)):
                out.write(_row(st))

    pending = as_completed(loop=cluster.client.loop)
    if progress is not None:
        progress.start(states.values(), max_shots, max_errors)
    try:
        submit_more(pending)
        for fut in pending:
            batch = futures.pop(fut)
            st = states[batch.strong_id]
            st.in_flight -= 1
            try:
                result: BatchResult = fut.result()
            except Exception as exc:
                raise BacklineError(f"task {st.spec.label()}: {type(exc).__name__}: "
                                    f"{(str(exc) or 'failed').splitlines()[0]}") from None
            if result.batch_id in seen:
                continue
            seen.add(result.batch_id)
            st.shots += result.shots
            st.errors += result.errors
            st.discards += result.discards
            st.seconds += result.seconds
            st.sizer.update(result.shots, result.seconds)
            st.unflushed.append(result)
            if on_result is not None:
                on_result(result)
            flush(force=False)
            if time.monotonic() - slots_read > SLOTS_PERIOD_S:
                now_slots, slots_read = cluster.slots(), time.monotonic()
                if progress is not None and now_slots != slots:
                    progress.note(f"backline collect: worker threads {slots} -> {now_slots}"
                                  + ("; the batches of those that left run again elsewhere" if now_slots < slots
                                     else ""))
                slots = max(now_slots, 1)
            submit_more(pending)
            if progress is not None:
                progress.update(states.values())
    finally:
        # rows gathered so far are saved however the loop ended (Ctrl-C, a failed batch)
        for fut in futures:
            fut.cancel()
        flush(force=True)
        out.close()
        if progress is not None:
            progress.close(states.values())
    return [_total(st) for st in states.values()]


def _total(st: TaskState) -> Any:
    import sinter

    return sinter.TaskStats(strong_id=st.spec.strong_id, decoder=st.spec.decoder, json_metadata=st.spec.json_metadata,
                            shots=st.total_shots, errors=st.total_errors, discards=st.discards, seconds=st.seconds)
