"""The process kit (backline_core._process): real children, each stopped and reaped by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backline_core import DeadlineError, TransportError
from backline_core._process import (
    ChildProcess, StopWatch, children, gone, pause, proc_state, resume, started_after, zombie,
)

#: how long a child may take to do what a test waits for (a deadline, not a timing)
GRACE_S = 30.0


def python(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def wait_until(condition: Callable[[], object], what: str, timeout: float = GRACE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} (waited {timeout} s)"
        time.sleep(0.01)


@pytest.fixture
def child() -> Iterator[Callable[..., ChildProcess]]:
    """child(body, **options) -> a ChildProcess running python -c BODY; stopped at the end."""
    started: list[ChildProcess] = []

    def start(body: str, **options: object) -> ChildProcess:
        options.setdefault("name", "the test child")
        started.append(ChildProcess(python(body), **options))  # type: ignore[arg-type]
        return started[-1]

    yield start
    for c in started:
        c.terminate(5.0)


def test_ready_line_is_matched_and_what_came_before_is_kept(child) -> None:
    c = child("""
        import os, sys, time
        print("warming up", file=sys.stderr, flush=True)
        print(f"ready port=4242 pid={os.getpid()}", flush=True)
        time.sleep(60)
    """, ready=r"^ready port=(\d+) pid=(\d+)")
    match = c.wait_ready(GRACE_S)
    assert match.groups() == ("4242", str(c.pid))
    # stderr has a reader of its own: its line may land a moment after stdout's ready line
    deadline = time.monotonic() + GRACE_S
    while not c.output_tail() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.output_tail() == ["warming up"] and c.last_line() == "warming up"
    assert c.returncode is None
    assert c.terminate(5.0) == -signal.SIGTERM
    assert gone(c.pid)


def test_child_that_exits_first_says_how_and_its_last_words(child) -> None:
    c = child("""
        import sys
        print("first", file=sys.stderr)
        print("no such decoder: foo", file=sys.stderr)
        sys.exit(3)
    """)
    with pytest.raises(TransportError, match=r"^the test child exited with status 3 before it was ready: "
                                             r"no such decoder: foo$") as info:
        c.wait_ready(GRACE_S)
    assert not isinstance(info.value, DeadlineError)


def test_child_killed_before_ready_says_it_printed_nothing(child) -> None:
    c = child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(TransportError, match=r"was killed by SIGKILL before it was ready \(it printed nothing"):
        c.wait_ready(GRACE_S)


def test_child_never_ready_meets_the_deadline(child) -> None:
    c = child("""
        import sys, time
        print("still loading", file=sys.stderr, flush=True)
        time.sleep(60)
    """)
    wait_until(lambda: c.last_line() == "still loading", "the child did not say it was loading")
    with pytest.raises(DeadlineError, match=r"^the test child \(pid \d+\) was not ready within 0.2 s "
                                            r"\(it said: still loading\)$"):
        c.wait_ready(0.2)
    assert c.returncode is None  # the deadline stops the wait, not the child
    c.terminate(5.0)
    assert gone(c.pid)


def test_terminate_kills_a_child_that_ignores_sigterm(child) -> None:
    c = child("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """)
    c.wait_ready(GRACE_S)
    assert c.terminate(0.2) == -signal.SIGKILL


def test_a_stopped_child_is_terminated_too(child) -> None:
    c = child("import time; print('ready', flush=True); time.sleep(60)")
    c.wait_ready(GRACE_S)
    pause(c.pid)
    assert proc_state(c.pid) in ("T", "t")
    resume(c.pid)
    pause(c.pid)  # stopped again: terminate must continue it for SIGTERM to act
    assert c.terminate(GRACE_S) == -signal.SIGTERM


def test_terminate_stops_what_the_child_left_in_its_group(child) -> None:
    c = child("""
        import os, signal, subprocess, sys
        # in the child's process group, deaf to SIGTERM (SIG_IGN survives exec)
        grandchild = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
        print(f"ready {grandchild.pid}", flush=True)
        sys.stdin.readline()
        os._exit(0)  # the leader goes; the grandchild stays in its group
    """, ready=r"^ready (\d+)", stdin_pipe=True)
    grandchild = int(c.wait_ready(GRACE_S).group(1))
    c.proc.stdin.write(b"go\n")
    c.proc.stdin.flush()
    wait_until(lambda: zombie(c.pid), "the child did not exit")  # unreaped: its group id is still its own
    assert not gone(grandchild)
    assert c.terminate(5.0) == 0
    wait_until(lambda: gone(grandchild), f"the grandchild {grandchild} outlived the child's terminate")


def test_stdin_pipe_stderr_file_and_log(child, tmp_path: Path) -> None:
    log, err = tmp_path / "child.log", tmp_path / "child.err"
    with open(err, "wb") as err_file:
        c = child("""
            import sys
            print("to the file", file=sys.stderr, flush=True)
            print("through a terminal\\r", flush=True)
            print("ready " + sys.stdin.readline().strip(), flush=True)
            sys.stdin.read()  # until the pipe closes
        """, stdin_pipe=True, stderr=err_file, log=log, ready=r"^ready (\w+)")
    assert c.proc.stdin is not None
    c.proc.stdin.write(b"hello\n")
    c.proc.stdin.flush()
    assert c.wait_ready(GRACE_S).group(1) == "hello"
    assert c.output_tail() == ["through a terminal"]
    assert c.returncode is None  # its stdin is still open
    assert c.terminate(GRACE_S) == -signal.SIGTERM
    assert err.read_text() == "to the file\n"
    assert log.read_text() == "through a terminal\nready hello\n"


def test_die_with_parent(tmp_path: Path) -> None:
    """A child started with die_with_parent gets SIGTERM when the process that started it dies."""
    parent = subprocess.run(python("""
        import os
        from backline_core._process import ChildProcess
        c = ChildProcess(["sleep", "60"], name="sleep", ready=None, die_with_parent=True)
        print(c.pid, flush=True)
        os._exit(0)
    """), capture_output=True, text=True, timeout=GRACE_S, check=False)
    assert parent.returncode == 0, parent.stderr
    orphan = int(parent.stdout)
    try:
        wait_until(lambda: gone(orphan), f"sleep {orphan} outlived the process that started it")
    finally:
        if not gone(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_children_and_zombies(child) -> None:
    c = child("import time; print('ready', flush=True); time.sleep(60)")
    c.wait_ready(GRACE_S)
    assert c.pid in children() and children(pgid=c.pid) == [c.pid]
    assert not zombie(c.pid)
    os.kill(c.pid, signal.SIGKILL)  # no wait: it stays a zombie
    wait_until(lambda: zombie(c.pid), "the killed child did not become a zombie")
    assert gone(c.pid)
    assert c.pid not in children() and c.pid in children(zombies=True)
    assert c.kill(5.0) == -signal.SIGKILL
    assert c.pid not in children(zombies=True)


def test_pid_reuse_is_seen_by_start_time() -> None:
    newer = subprocess.Popen(["sleep", "60"])
    try:
        assert started_after(newer.pid) and not started_after(os.getppid())
        with StopWatch(parent_pid=newer.pid) as stop:  # a "parent" that started after this process
            assert stop.triggered()
            assert stop.reason == f"process {newer.pid} exited (its pid now names a newer process)"
    finally:
        newer.kill()
        newer.wait()


def test_stop_watch_sees_its_parent_exit() -> None:
    older = os.getppid()  # a watched process must have started before the watcher
    with StopWatch(parent_pid=older) as stop:
        assert not stop.triggered() and stop.reason is None
        assert not stop.wait(0.05)
    gone_pid = subprocess.Popen(["true"])
    gone_pid.wait()
    with StopWatch(parent_pid=gone_pid.pid) as stop:
        assert stop.triggered() and "had exited before it could be watched" in (stop.reason or "")


WATCHER = """
import os, sys
from backline_core._process import StopWatch
with StopWatch(parent_pid=os.getppid()) as stop:
    print("ready", flush=True)
    stopped = stop.wait(60)
    with open(sys.argv[1], "w") as fh:
        fh.write(stop.reason if stopped else "no stop")
"""


def test_stop_watch_sees_a_parent_that_exits_later(tmp_path: Path) -> None:
    """The watcher is a child of the watched process, as a serve is; the parent then exits."""
    said = tmp_path / "reason"
    parent = ChildProcess(python(f"""
        import subprocess, sys
        watcher = subprocess.Popen([sys.executable, "-c", {WATCHER!r}, {str(said)!r}], stdout=subprocess.PIPE,
                                   text=True)
        print(watcher.stdout.readline().strip(), watcher.pid, flush=True)
    """), name="the watched parent", ready=r"^ready (\d+)")
    watcher = int(parent.wait_ready(GRACE_S).group(1))
    try:
        assert parent.wait(GRACE_S) == 0  # the parent has gone
        wait_until(lambda: gone(watcher), f"the watcher {watcher} did not stop when its parent exited")
        assert said.read_text() == f"parent process {parent.pid} exited"
    finally:
        parent.terminate(5.0)
        if not gone(watcher):
            os.kill(watcher, signal.SIGKILL)


def test_stop_watch_signals() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopWatch() as stop:
        old = signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # handled by the caller: wakes, no stop
        try:
            signal.raise_signal(signal.SIGUSR1)
            assert not stop.triggered() and stop.reason is None
            signal.raise_signal(signal.SIGTERM)
            assert stop.wait(GRACE_S) and stop.reason == "signal SIGTERM"
        finally:
            signal.signal(signal.SIGUSR1, old)
    assert signal.getsignal(signal.SIGTERM) is before  # close() put back what it replaced
