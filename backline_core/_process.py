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
import ctypes
import os
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import BacklineError, DeadlineError, TransportError

__all__ = ["ChildProcess", "StopWatch", "children", "describe_exit", "exit_on_stop_signals", "free_port",
           "private_tempdir", "proc_stat", "proc_state", "stop_process", "zombie"]

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


def zombie(pid: int) -> bool:
    """Whether process ``pid`` has exited and waits to be reaped: a zombie none of whose
    threads is still on its way out (the main thread of a process turns Z first)."""
    fields = proc_stat(pid)
    try:
        return fields is not None and fields[0] == "Z" and int(fields[17]) == 1
    except (IndexError, ValueError):
        return False


def children(pid: int | None = None, *, pgid: int | None = None, zombies: bool = False) -> list[int]:
    """The live processes whose parent is ``pid`` (default: this process), or, with ``pgid``,
    every live process of that process group; ``zombies=True`` counts the unreaped too."""
    want = os.getpid() if pid is None else pid
    found = []
    # This process's folder reaper lives as long as it does: it is the kit's, not a child left behind.
    reaper = _REAPER.pid if want == os.getpid() else None
    for entry in filter(str.isdigit, os.listdir("/proc")):
        if reaper is not None and int(entry) == reaper:
            continue
        fields = proc_stat(entry)
        if fields is None or fields[0] == "X" or (fields[0] == "Z" and not zombies):
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


def host_local_name(base: str, *parts: object) -> str:
    """``BASE-PID[-PART...]``: a coprocessor name no other process on this host uses, since a host-local
    transport (memcpy) finds a coprocessor by its name on the host and two programs may run at once.

    >>> host_local_name("decoder", 2) == f"decoder-{os.getpid()}-2"
    True
    """
    return "-".join([base, str(os.getpid()), *map(str, parts)])


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


#: the signal that :func:`exit_on_stop_signals` turned into SystemExit, once one has come
_STOPPING: list[int] = []


def _exit_on_signal(signum: int, _frame: Any) -> None:
    if _STOPPING:  # the first one's clean-up is running (each step has its deadline): let it finish
        return
    _STOPPING.append(signum)
    raise SystemExit(128 + signum)


def exit_on_stop_signals() -> bool:
    """Make SIGTERM and SIGHUP end this process the way Ctrl-C (SIGINT: KeyboardInterrupt) does:
    as an exception in the main thread, ``SystemExit(128 + signal)``, so ``finally`` blocks,
    context managers, atexit and ``weakref.finalize`` run and what the process holds (children,
    shared-memory segments, temp folders) is released. Their default action ends Python at once,
    with none of that. A signal with a handler of the program's own (or ignored) is left alone; a
    stop signal that comes while the first one's clean-up runs is ignored (SIGKILL still ends
    it). Idempotent; from another thread it does nothing. Whether both are now handled so.

    ``deploy`` (for a deployment with helper processes or executors), ``backline bench`` and
    ``backline executor bench`` call it.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    handled = True
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is signal.SIG_DFL:
            signal.signal(signum, _exit_on_signal)
        elif current is not _exit_on_signal:
            handled = False
    return handled


#: an owned temp folder's name: PREFIX, its owner's pid and start time (clock ticks after boot),
#: mkdtemp's eight random characters
_OWNED = re.compile(r"^(backline-.*)-(\d+)\.(\d+)-[a-z0-9_]{8}$")


def _start_time(pid: int | str) -> int | None:
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


class _Reaper:
    """One ``sh`` per process that removes the folders it is told of (a line each on its stdin)
    once this process has ended, however it ended: the kernel closes the pipe's write end when
    the last process holding it is gone, even after SIGKILL, and sh's ``read`` ends. It has a
    process group of its own and ignores SIGINT and SIGHUP, so a terminal's Ctrl-C or hang-up
    does not end it before this process has cleaned up (or died)."""

    SCRIPT = ('trap "" INT HUP; while IFS= read -r d; do set -- "$@" "$d"; done; '
              '[ $# -eq 0 ] || rm -rf -- "$@"')

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The reaper's pid while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def register(self, path: str) -> bool:
        """Whether the reaper will remove ``path`` (False: no sh here, or a name sh cannot read back)."""
        if "\n" in path:
            return False
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = subprocess.Popen(["/bin/sh", "-c", self.SCRIPT, "sh"], stdin=subprocess.PIPE,
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                  process_group=0, close_fds=True)
                assert self._proc.stdin is not None
                self._proc.stdin.write(os.fsencode(path) + b"\n")
                self._proc.stdin.flush()
            except OSError:
                return False
        return True


_REAPER = _Reaper()


def sweep_orphaned_tempdirs(parent: str | None = None) -> list[str]:
    """Remove the folders :func:`private_tempdir` made in ``parent`` (default: the temp dir) whose
    owner is gone, pid and start time alike (its reaper died with it); the paths removed. Only
    this user's folders, never a symlink."""
    parent = tempfile.gettempdir() if parent is None else parent
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    uid = os.geteuid()
    for name in names:
        match = _OWNED.match(name)
        if match is None or _start_time(match.group(2)) == int(match.group(3)):
            continue  # not such a folder, or its owner still runs
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == uid and (st.st_mode & 0o170000) == 0o040000:  # a directory of ours, not a symlink
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def private_tempdir(prefix: str) -> str:
    """A fresh folder only this user can enter (0700), in the temp dir, that does not outlive this
    process: the caller removes it when done (``shutil.rmtree``); if this process ends first,
    however it ends (SIGKILL too, when no ``finally`` runs), its reaper child removes it. Its name
    carries this process's pid and start time, so should the reaper have died too, the next
    call (in any process) removes it (:func:`sweep_orphaned_tempdirs`). ``prefix`` starts with
    ``backline-``.
    """
    if not prefix.startswith("backline-") or "/" in prefix:
        raise ValueError(f"prefix={prefix!r} must start with 'backline-' and name no folder")
    sweep_orphaned_tempdirs()
    path = tempfile.mkdtemp(prefix=f"{prefix.rstrip('-')}-{os.getpid()}.{_start_time('self')}-")
    _REAPER.register(path)
    return path


class StopWatch:
    """What should stop this process: SIGTERM, SIGINT or SIGHUP (an orphaned stopped child gets
    SIGHUP and SIGCONT), or the exit of ``parent_pid`` however it died (a pidfd; where the kernel
    has none, the pid is polled). A watched pid that names a process newer than this one was
    reused: its process had already gone.

    Signals arrive through :func:`signal.set_wakeup_fd`, so a wait in :func:`select.select`
    wakes at once; :meth:`fds` are the descriptors to add to a caller's own selector (a signal
    the caller handles itself, such as SIGCHLD, wakes it too, and is no stop: call
    :meth:`triggered` when one is readable). Must be made in the main thread; :meth:`close`
    restores the handlers it replaced.
    """

    def __init__(self, parent_pid: int | None = None, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.parent_pid = parent_pid
        self.reason: str | None = None
        self._pidfd: int | None = None
        self._poll_parent = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        # a full pipe already holds a wakeup: nothing is lost, so no warning
        self._old_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
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
        """The descriptors that become readable when a stop (or another handled signal) comes."""
        return [self._r] + ([self._pidfd] if self._pidfd is not None else [])

    @property
    def poll_interval(self) -> float | None:
        """How often a caller's own wait must call :meth:`triggered` (seconds): the parent is
        polled where the kernel has no pidfd; None when :meth:`fds` wake it."""
        return 0.25 if self._poll_parent else None

    def _drain(self) -> None:
        """Empty the wakeup pipe; a byte that names a watched signal is a stop (its handler
        notes it too, but runs only between bytecodes of the main thread)."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while data := os.read(self._r, 512):
                for signum in data:
                    if signum in self._old and self.reason is None:
                        self.reason = f"signal {signal_name(signum)}"

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
        """Whether a stop has come (without waiting); empties the wakeup pipe."""
        if self._r >= 0:
            self._drain()
        if self.reason is not None:
            return True
        return self._parent_gone()

    def wait(self, seconds: float | None) -> bool:
        """Wait at most ``seconds`` (None: for ever) for a stop; whether one came."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.triggered():
            step = 3600.0 if deadline is None else deadline - time.monotonic()
            if step <= 0:
                return False
            if self.poll_interval is not None:
                step = min(step, self.poll_interval)
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


def _send(proc: subprocess.Popen[Any], signum: int, group: bool) -> None:
    """``signum`` to ``proc``, or to the process group it leads. Only while it is unreaped: until
    then neither its pid nor its group id can name another process."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)


def _exited(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for child ``pid`` to exit, leaving it unreaped (see :func:`_send`)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            return bool(select.select([fd], [], [], timeout)[0])
        finally:
            os.close(fd)
    deadline = time.monotonic() + timeout  # no pidfd on this kernel
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True  # reaped elsewhere
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _reap(proc: subprocess.Popen[Any], timeout: float, name: str | None) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise DeadlineError(f"{name or 'process'} (pid {proc.pid}) is still there {timeout:g} s after SIGKILL") from None


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0, *, group: bool = False,
                 name: str | None = None) -> int:
    """Stop ``proc`` and reap it: SIGCONT and SIGTERM, SIGKILL if it is still there after
    ``timeout`` s; its exit status. ``group``: it leads its own process group, which gets the
    signals, and a SIGKILL once the leader has exited, for whatever the leader left there.

    For a ``Popen`` of the caller's own (a :class:`ChildProcess` does this itself).
    """
    if proc.returncode is None:
        _send(proc, signal.SIGCONT, group)  # a stopped process takes no SIGTERM
        _send(proc, signal.SIGTERM, group)
        if not _exited(proc.pid, timeout) or group:
            _send(proc, signal.SIGKILL, group)
    return _reap(proc, timeout, name)


class _Spawner:
    """Starts children from one thread that lives as long as this process, with
    PR_SET_PDEATHSIG: such a child gets SIGTERM when this process ends however it ends (even
    SIGKILL), and not when the thread that asked for it ends (the death signal follows the
    thread that forked)."""

    PR_SET_PDEATHSIG = 1

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[list[str], dict[str, Any], queue.Queue[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        try:
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            self._prctl = None

    def _die_with_parent(self) -> None:  # runs in the child between fork and exec
        if self._prctl is not None:
            self._prctl(self.PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    def _run(self) -> None:
        while True:
            argv, kwargs, reply = self._jobs.get()
            try:
                # preexec_fn only calls prctl, which takes no lock a thread could hold at fork
                reply.put(subprocess.Popen(argv, preexec_fn=self._die_with_parent, **kwargs))  # noqa: PLW1509
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                reply.put(exc)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="backline-spawner", daemon=True)
                self._thread.start()
        reply: queue.Queue[Any] = queue.Queue()
        self._jobs.put((argv, kwargs, reply))
        result = reply.get(timeout=60)  # a fork+exec; the deadline only guards against a wedged thread
        if isinstance(result, BaseException):
            raise result
        return result


_SPAWNER = _Spawner()


class ChildProcess:
    """A child process that says it is ready with a line on stdout, and is stopped cleanly.

    ``argv`` runs with stdin from /dev/null (``stdin_pipe``: a pipe, :attr:`proc` ``.stdin``,
    held open until the child is stopped: ``ssh -tt`` ends its session when it closes), in its
    own process group by default (a terminal's Ctrl-C goes to this process, which stops the
    child). Its pipes are read on threads all along, so a child that prints never blocks;
    :meth:`output_tail` has their last lines (a trailing ``\\r`` dropped: output through a
    terminal), and ``log`` (a file) gets every line as it comes. ``stderr``: a file that the
    child's stderr goes to instead of a pipe. ``die_with_parent``: the child gets SIGTERM
    when this process ends, however (for a program that cannot watch it, such as ssh).

    :meth:`wait_ready` waits for the first stdout line matching ``ready`` (a regex) and returns
    its match; a child that exits first is :meth:`start_error` (a :class:`TransportError` that
    says how it ended and its last line of stderr), a deadline :meth:`deadline_error`.
    :meth:`terminate` sends SIGCONT and SIGTERM, then SIGKILL past its deadline, and reaps; a
    child with its own process group gets them as a group, and what is left in the group
    once it has exited gets SIGKILL. Leaving the context does the same, so nothing is left
    running however the caller ends.
    """

    TAIL_LINES = 50

    def __init__(self, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None,
                 ready: str | None = r"^ready\b", process_group: bool = True, cwd: str | None = None,
                 stdin_pipe: bool = False, stderr: Any = None, log: str | os.PathLike[str] | None = None,
                 die_with_parent: bool = False) -> None:
        self.name = name
        self.argv = list(argv)
        self._ready_re = re.compile(ready) if ready is not None else None
        self._ready = threading.Event()
        self.ready_match: re.Match[str] | None = None
        self._tail: collections.deque[tuple[str, str]] = collections.deque(maxlen=self.TAIL_LINES)
        self._readers: list[threading.Thread] = []
        self._group = process_group
        self._log = os.fspath(log) if log is not None else None
        options: dict[str, Any] = {
            "stdin": subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE if stderr is None else stderr, "env": dict(env) if env is not None else None,
            "cwd": cwd, "process_group": 0 if process_group else None}
        try:
            self.proc: subprocess.Popen[bytes] = (_SPAWNER.popen(self.argv, **options) if die_with_parent
                                                  else subprocess.Popen(self.argv, **options))
        except OSError as exc:
            raise TransportError(f"cannot start {name} ({self.argv[0]}): {exc.strerror or exc}") from None
        self._read(self.proc.stdout, "stdout")
        if stderr is None:
            self._read(self.proc.stderr, "stderr")

    def _read(self, stream: Any, which: str) -> None:
        def run() -> None:
            log = open(self._log, "a", encoding="utf-8", errors="replace") if self._log else None  # noqa: SIM115
            try:
                with contextlib.suppress(OSError, ValueError):
                    for raw in iter(stream.readline, b""):
                        line = raw.decode(errors="replace").rstrip("\n").rstrip("\r")
                        if log is not None:
                            log.write(line + "\n")
                            log.flush()
                        if which == "stdout" and self._ready_re is not None and not self._ready.is_set():
                            match = self._ready_re.search(line)
                            if match:
                                self.ready_match = match
                                self._ready.set()
                                continue
                        self._tail.append((which, line))
            finally:
                if log is not None:
                    log.close()

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
                raise self.deadline_error(timeout)
        if self.ready_match is None:
            raise self.start_error()
        return self.ready_match

    def start_error(self) -> Exception:
        """The error for a child that ended before it was ready (a subclass may read its status)."""
        said = self.last_line()
        return TransportError(f"{self.name} {describe_exit(self.proc.returncode)} before it was ready"
                              + (f": {said}" if said else " (it printed nothing on stderr)"))

    def deadline_error(self, timeout: float) -> DeadlineError:
        """The error for a child still not ready after ``timeout`` seconds."""
        said = self.last_line()
        return DeadlineError(f"{self.name} (pid {self.proc.pid}) was not ready within {timeout:g} s"
                             + (f" (it said: {said})" if said else ""))

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
        """Stop the child (SIGCONT, SIGTERM; SIGKILL if it is still there after ``timeout``), reap it
        (:func:`stop_process`)."""
        rc = stop_process(self.proc, timeout, group=self._group, name=self.name)
        self._finish()
        return rc

    def kill(self, timeout: float = 10.0) -> int:
        """SIGKILL the child (and its group), as a crash would, and reap it."""
        _send(self.proc, signal.SIGKILL, self._group)
        rc = _reap(self.proc, timeout, self.name)
        self._finish()
        return rc

    def _join_readers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._readers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _finish(self) -> None:
        """After the child has exited: let the readers reach the end of its output, close the pipes."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
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
