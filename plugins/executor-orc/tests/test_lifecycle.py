"""Nothing is left behind when a process holding an executor coprocessor is stopped by a signal:
no shared-memory segment in /dev/shm, no workspace in the temp dir (the child's TMPDIR is a
fresh tmp_path, so everything it leaves there is its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("backline_compiler", reason="building an executor's code needs backline-compiler on this host")

from backline_core.sdk import ChildProcess, gone  # noqa: E402

STOPS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


def tree(root: Path) -> set[str]:
    """Every path under ``root``; an entry removed while it is walked is simply not listed
    (os.walk skips what vanishes, where Path.rglob raises FileNotFoundError)."""
    found: set[str] = set()
    for top, dirs, files in os.walk(root):
        found.update(os.path.join(top, name) for name in dirs + files)
    return found


def shm() -> set[str]:
    """Every path under /dev/shm (segments live in /dev/shm/backline-<euid>/)."""
    return tree(Path("/dev/shm"))


def left(tmp: Path, shm_before: set[str], tag: str) -> list[str]:
    """What the child left: anything in its temp dir, and new /dev/shm entries naming ``tag``
    (other processes on this machine may add their own meanwhile)."""
    return sorted(tree(tmp) | {p for p in shm() - shm_before if tag in p})


def wait_clean(tmp: Path, shm_before: set[str], tag: str, timeout: float = 30.0) -> list[str]:
    """What is still left once ``timeout`` s have passed (the executor cleans up after itself a moment later)."""
    deadline = time.monotonic() + timeout
    while (found := left(tmp, shm_before, tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def until(condition, timeout: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (waited {timeout} s)")
        time.sleep(0.05)
    return value


def env_with_tmpdir(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}


HOLD = """
import os, sys, time
from backline_core import Controller, Coprocessor, Placement, deploy
from backline_executor_orc.handle import Executor
ex = Executor.local()
key = f"hold-{os.getpid()}"
d = deploy(Placement(controller=Controller(), transport="memcpy",
                     coprocessors=[Coprocessor(name=key, coprocessor_fn="steane", executor=ex)]), in_bytes=1, out_bytes=1)
assert d.session().round(bytes([1])) == bytes([1])
print("ready", key, ex.pid, flush=True)
time.sleep(600)
"""


def _holder(tmp: Path) -> tuple[ChildProcess, str, int]:
    child = ChildProcess([sys.executable, "-c", HOLD], name="a process holding deploy()", env=env_with_tmpdir(tmp),
                         ready=r"^ready (\S+) (\d+)$", process_group=False)
    key, pid = child.wait_ready(120).groups()
    assert list(tmp.iterdir()), "the executor's workspace is not in the TMPDIR given"
    return child, key, int(pid)


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: signal.Signals(s).name)
def test_a_stop_signal_to_a_deploy_holder_leaves_no_segment_and_no_workspace(tmp_path: Path, signum: int) -> None:
    before = shm()
    child, key, executor_pid = _holder(tmp_path)
    try:
        assert any(key in p for p in shm() - before), "the coprocessor's segment was not where the test looks"
        child.signal(signum)
        assert child.wait(60) is not None, f"the holder did not end on {signal.Signals(signum).name}"
        assert not wait_clean(tmp_path, before, key), "left behind"
        assert until(lambda: gone(executor_pid), 30, "the executor outlived its controller")
    finally:
        child.kill()


def test_sigkill_of_a_deploy_holder_leaves_no_workspace(tmp_path: Path) -> None:
    """The parent cannot clean up after SIGKILL: its reaper removes the object's workspace, the
    executor its own folder. (The segment is the executor's to remove.)"""
    child, _, executor_pid = _holder(tmp_path)
    try:
        child.kill()
        assert not wait_clean(tmp_path, set(), "-no-shm-check-"), "left behind in the temp dir"
        assert until(lambda: gone(executor_pid), 30, "the executor outlived its controller")
    finally:
        child.kill()


def _backline(args: list[str], tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "backline_core", *args], env=env_with_tmpdir(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"it did not end on {signal.Signals(signum).name}: {err}") from None
    return out, err


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: signal.Signals(s).name)
def test_a_stop_signal_to_bench_runs_in_executor_leaves_nothing(tmp_path: Path, signum: int) -> None:
    before = shm()
    proc = _backline(["bench", "--runs-in", "executor", "--rounds", "100000000", "--no-progress"], tmp_path)
    try:
        key = f"bench-{proc.pid}"  # the bench names its coprocessor so
        until(lambda: any(key in p for p in shm() - before) or proc.poll() is not None, 120,
              "the bench's coprocessor segment did not appear")
        assert proc.poll() is None, proc.communicate()[1]
        _, err = _stop(proc, signum)
        assert "Traceback" not in err, err
        assert not wait_clean(tmp_path, before, key), "left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: signal.Signals(s).name)
def test_a_stop_signal_to_executor_bench_leaves_nothing(tmp_path: Path, signum: int) -> None:
    before = shm()
    proc = _backline(["executor", "bench", "--rounds", "100000000"], tmp_path)
    try:
        # two of its folders: its object's and the decoder object's (measure() has begun)
        until(lambda: len(list(tmp_path.glob("backline-exec-bench-*"))) >= 2 or proc.poll() is not None, 120,
              "the executor bench did not get to its measurements")
        assert proc.poll() is None, proc.communicate()[1]
        _, err = _stop(proc, signum)
        assert "Traceback" not in err, err
        assert not wait_clean(tmp_path, before, f"-{proc.pid}"), "left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
