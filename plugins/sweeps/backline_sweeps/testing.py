"""Test helpers for sweeps (used by plugins/sweeps/tests): tiny circuits, the command as a child, a real Dask scheduler and workers.
(Two network namespaces: ``backline_core.testing.two_namespaces``.)"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import stim

from backline_core.sdk import free_port

BIN = Path(sys.executable).parent
DASK = str(BIN / "dask")
SINTER = str(BIN / "sinter")


def write_circuits(where: Path, ps: Sequence[float] = (0.01, 0.02), d: int = 3, kind: str = "repetition") -> list[str]:
    """Circuit files named as --metadata-from-filename reads them: d=3,p=0.01.stim."""
    names = []
    for p in ps:
        if kind == "repetition":
            c = stim.Circuit.generated("repetition_code:memory", distance=d, rounds=d,
                                       after_clifford_depolarization=p, before_measure_flip_probability=p)
        else:
            c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                       after_clifford_depolarization=p, before_measure_flip_probability=p)
        name = f"d={d},p={p}.stim"
        (where / name).write_text(str(c))
        names.append(name)
    return names


def collect_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "backline_core", "collect", *args]


def run_collect(*args: str, cwd: Path, timeout: float = 300, wrapper: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrapper, *collect_argv(*args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc now)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            for k in kids:
                if k not in found:
                    found.add(k)
                    todo.append(k)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Child:
    """A process in a session of its own, its output read by a thread (so waits have deadlines)."""

    def __init__(self, argv: Sequence[str], *, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if any(text in line for line in self.seen):
                return
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(f"{text!r} not seen within {timeout} s; output:\n{''.join(self.seen)}")
            try:
                self.seen.append(self.lines.get(timeout=min(left, 0.5)))
            except queue.Empty:
                pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        """Terminate its whole session (it started none of ours elsewhere), then reap it."""
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.proc.wait(15)
        else:
            self.kill(signal.SIGKILL)  # anything it left in its session


class DaskCluster:
    """A real ``dask scheduler`` and ``dask worker`` processes (no nanny: SIGKILL ends a worker for good)."""

    def __init__(self, host: str = "127.0.0.1", wrap_scheduler: Sequence[str] = ()) -> None:
        self.host, self.port = host, free_port("127.0.0.1")
        self.address = f"tcp://{host}:{self.port}"
        self.workers: list[Child] = []
        self.scheduler = Child([*wrap_scheduler, DASK, "scheduler", "--host", host, "--port", str(self.port),
                                "--no-dashboard"])

    def start(self, timeout: float = 120) -> DaskCluster:
        self.scheduler.wait_for("Scheduler at:", timeout)
        return self

    def add_worker(self, *, wrapper: Sequence[str] = (), host: str | None = None, timeout: float = 120) -> Child:
        argv = [*wrapper, DASK, "worker", self.address, "--nthreads", "1", "--nworkers", "1", "--no-nanny",
                "--no-dashboard", "--death-timeout", "60"]
        if host:
            argv += ["--host", host]
        w = Child(argv)
        self.workers.append(w)
        w.wait_for("Registered to:", timeout)
        return w

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.scheduler.stop()


@contextlib.contextmanager
def dask_cluster(workers: int = 2) -> Iterator[DaskCluster]:
    cluster = DaskCluster()
    try:
        cluster.start()
        for _ in range(workers):
            cluster.add_worker()
        yield cluster
    finally:
        cluster.stop()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def netns_permitted() -> bool:
    if os.geteuid() != 0:
        return False
    probe = f"bl-sw-probe-{uuid.uuid4().hex[:6]}"
    try:
        ip("netns", "add", probe)
    except (OSError, subprocess.SubprocessError):
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return True
