"""The process kit: start a child and wait for its ready line, watch for what should stop this
process, read a process's state from /proc. One implementation for the core and every plugin
(through :mod:`backline_core.sdk`): the coprocessor serve, floor responders, the FPGA engine
model, the executor's servers and the tests all use these.

>>> describe_exit(0), describe_exit(3), describe_exit(-9)
('exited with status 0', 'exited with status 3', 'was killed by SIGKILL')
>>> proc_state(os.getpid())
'R'
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import BacklineError, DeadlineError, TransportError

__all__ = ["ChildProcess", "StopWatch", "children", "describe_exit", "free_port", "proc_stat", "proc_state"]

#: this process's parent when the kit was first imported (a child imports it early), so a
#: parent that died while the child started is still seen
_STARTUP_PPID = os.getppid()

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then ppid, pgrp, ...),
    None when there is no such process. The command name may hold spaces and parentheses, so
    the fields start after its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def proc_state(pid: int | str) -> str | None:
    """The state letter of a process (R, S, D, T, t, Z, X, ...), None once it is gone."""
    fields = proc_stat(pid)
    return fields[0] if fields else None


def gone(pid: int | None) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended; None: there was none)."""
    return pid is None or proc_state(pid) in (None, "Z", "X")


def children(pid: int | None = None, *, pgid: int | None = None) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid`` (default: this process), or,
    with ``pgid``, every live process of that process group."""
    want = os.getpid() if pid is None else pid
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = proc_stat(entry)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        try:
            if (int(fields[2]) == pgid) if pgid is not None else (int(fields[1]) == want):
                found.append(int(entry))
        except (IndexError, ValueError):
            continue
    return found


def started_after(pid: int, than: int | str = "self") -> bool:
    """Whether process ``pid`` started after ``than`` did: a watched process started first, so
    a later start means its pid was reused."""
    theirs, mine = proc_stat(pid), proc_stat(than)
    try:
        return theirs is not None and mine is not None and int(theirs[19]) > int(mine[19])
    except (IndexError, ValueError):
        return False


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal 99`` for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(rc: int | None) -> str:
    """How a child ended, from its ``Popen.returncode`` (negative: the signal that killed it)."""
    if rc is None:
        return "is still running"
    if rc < 0:
        return f"was killed by {signal_name(-rc)}"
    return f"exited with status {rc}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` a moment ago (bound to port 0, read, closed). Another program
    may take it before the caller does; on a test machine that is rare.

    >>> 0 < free_port("127.0.0.1") < 65536
    True
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.bind(address)
            return int(s.getsockname()[1])
    except OSError as exc:
        raise BacklineError(f"{host}: cannot listen there ({exc.strerror or exc}); give an address of this "
                            "machine, e.g. 127.0.0.1") from None


def pause(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped (or gone)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while proc_state(pid) not in ("T", "t", "Z", "X", None):
        if time.monotonic() > deadline:
            raise BacklineError(f"process {pid} did not stop within {timeout:g} s of SIGSTOP")
        time.sleep(0.0005)


def resume(pid: int) -> None:
    """SIGCONT ``pid`` (nothing if it is gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


class StopWatch:
    """What should stop this process: SIGTERM, SIGINT or SIGHUP (an orphaned stopped child gets
    SIGHUP and SIGCONT), or the exit of ``parent_pid`` however it died (a pidfd; where the kernel
    has none, the pid is polled). A watched pid that names a process newer than this one was
    reused: its process had already gone.

    Signals arrive through :func:`signal.set_wakeup_fd`, so a wait in :func:`select.select`
    wakes at once; :meth:`fds` are the descriptors to add to a caller's own selector. Must be
    made in the main thread; :meth:`close` restores the handlers it replaced.
    """

    def __init__(self, parent_pid: int | None = None, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.parent_pid = parent_pid
        self.reason: str | None = None
        self._pidfd: int | None = None
        self._poll_parent = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_fd = signal.set_wakeup_fd(self._w)
        self._old = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        if parent_pid is not None:
            self._watch(parent_pid)

    def _on_signal(self, signum: int, _frame: Any) -> None:  # the wakeup fd does the waking
        self.reason = self.reason or f"signal {signal_name(signum)}"

    def _watch(self, pid: int) -> None:
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.reason = f"parent process {pid} had exited before it could be watched"
            return
        except (AttributeError, OSError):
            self._poll_parent = True
        if _STARTUP_PPID == pid and os.getppid() != pid:
            self.reason = f"parent process {pid} exited"  # it died while this process started
        elif started_after(pid):
            self.reason = f"process {pid} exited (its pid now names a newer process)"

    def fds(self) -> list[int]:
        """The descriptors that become readable when a stop comes."""
        return [self._r] + ([self._pidfd] if self._pidfd is not None else [])

    def _parent_gone(self) -> bool:
        pid = self.parent_pid
        if pid is None:
            return False
        if self._pidfd is not None:
            gone_now = bool(select.select([self._pidfd], [], [], 0)[0])
        else:
            gone_now = gone(pid) or (_STARTUP_PPID == pid and os.getppid() != pid)
        if gone_now and self.reason is None:
            self.reason = f"parent process {pid} exited"
        return gone_now

    def triggered(self) -> bool:
        """Whether a stop has come (without waiting)."""
        if self.reason is not None:
            return True
        if select.select([self._r], [], [], 0)[0]:
            self.reason = self.reason or "a signal"
            return True
        return self._parent_gone()

    def wait(self, seconds: float | None) -> bool:
        """Wait at most ``seconds`` (None: for ever) for a stop; whether one came."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.triggered():
            step = 3600.0 if deadline is None else deadline - time.monotonic()
            if step <= 0:
                return False
            if self._poll_parent:
                step = min(step, 0.25)
            select.select(self.fds(), [], [], min(step, 3600.0))
        return True

    def close(self) -> None:
        if self._r < 0:
            return
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        for fd in (self._r, self._w, self._pidfd):
            if fd is not None:
                os.close(fd)
        self._r = self._w = -1
        self._pidfd = None

    def __enter__(self) -> StopWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChildProcess:
    """A child process that says it is ready with a line on stdout, and is stopped cleanly.

    ``argv`` runs with stdin from /dev/null, in its own process group by default (a terminal's
    Ctrl-C goes to this process, which stops the child). Both pipes are read on threads all
    along, so a child that prints never blocks; :meth:`output_tail` has their last lines.
    :meth:`wait_ready` waits for the first stdout line matching ``ready`` (a regex) and returns
    its match; a child that exits first, or a deadline, is a :class:`TransportError` (a
    :class:`DeadlineError`) that says how it ended and its last line of stderr.
    :meth:`terminate` sends SIGCONT and SIGTERM, then SIGKILL past its deadline, and reaps;
    leaving the context does the same, so nothing is left running however the caller ends.
    """

    TAIL_LINES = 50

    def __init__(self, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None,
                 ready: str | None = r"^ready\b", process_group: bool = True, cwd: str | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self._ready_re = re.compile(ready) if ready is not None else None
        self._ready = threading.Event()
        self.ready_match: re.Match[str] | None = None
        self._tail: collections.deque[tuple[str, str]] = collections.deque(maxlen=self.TAIL_LINES)
        self._readers: list[threading.Thread] = []
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None, cwd=cwd,
                process_group=0 if process_group else None)
        except OSError as exc:
            raise TransportError(f"cannot start {name} ({self.argv[0]}): {exc.strerror or exc}") from None
        self._read(self.proc.stdout, "stdout")
        self._read(self.proc.stderr, "stderr")

    def _read(self, stream: Any, which: str) -> None:
        def run() -> None:
            with contextlib.suppress(OSError, ValueError):
                for raw in iter(stream.readline, b""):
                    line = raw.decode(errors="replace").rstrip("\n")
                    if which == "stdout" and self._ready_re is not None and not self._ready.is_set():
                        match = self._ready_re.search(line)
                        if match:
                            self.ready_match = match
                            self._ready.set()
                            continue
                    self._tail.append((which, line))

        thread = threading.Thread(target=run, name=f"backline-child-{self.proc.pid}-{which}", daemon=True)
        thread.start()
        self._readers.append(thread)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait_ready(self, timeout: float) -> re.Match[str]:
        """The match of the ready line, waiting at most ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._join_readers(2.0)  # it has exited: its last lines (or the ready line) are a moment behind
                break
            if time.monotonic() >= deadline:
                said = self.last_line()
                raise DeadlineError(f"{self.name} (pid {self.proc.pid}) was not ready within {timeout:g} s"
                                    + (f" (it said: {said})" if said else ""))
        if self.ready_match is None:
            raise self.start_error()
        return self.ready_match

    def start_error(self) -> TransportError:
        """The error for a child that ended before it was ready (a subclass may read its status)."""
        said = self.last_line()
        return TransportError(f"{self.name} {describe_exit(self.proc.returncode)} before it was ready"
                              + (f": {said}" if said else " (it printed nothing on stderr)"))

    def last_line(self, stream: str = "stderr") -> str:
        """The last non-blank line the child wrote on ``stream``."""
        return next((line.strip() for which, line in reversed(self._tail) if which == stream and line.strip()), "")

    def output_tail(self) -> list[str]:
        """The child's last lines of output (stdout and stderr as they came), oldest first."""
        return [line for _, line in self._tail]

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it has exited (waiting at most ``timeout`` s), else None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child (nothing if it has exited)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def terminate(self, timeout: float = 10.0) -> int:
        """Stop the child (SIGCONT, SIGTERM; SIGKILL if it is still there after ``timeout``), reap it."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process takes no SIGTERM
            self.signal(signal.SIGTERM)
            if self.wait(timeout) is None:
                return self.kill(timeout)
        self._finish()
        return self.proc.returncode

    def kill(self, timeout: float = 10.0) -> int:
        """SIGKILL the child (as a crash would) and reap it."""
        self.signal(signal.SIGKILL)
        if self.wait(timeout) is None:
            raise DeadlineError(f"{self.name} (pid {self.proc.pid}) is still there {timeout:g} s after SIGKILL")
        self._finish()
        return self.proc.returncode

    def _join_readers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._readers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _finish(self) -> None:
        """After the child has exited: let the readers reach the end of its output, close the pipes."""
        self._join_readers(2.0)
        if not any(t.is_alive() for t in self._readers):
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()
