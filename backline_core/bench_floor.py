"""The kit of a networked transport's bench floor: a bare native ping-pong with nothing of the
framework in the path, run between this process and a responder child, and a reference tool
(perftest, ucx_perftest) run beside it.

A transport's floor library (C, built with the transport's own set-up code and
``backline/pingpong.h``'s clock) exports, for one prefix ``P``:

* responder: ``P_port(h)``, ``P_serve(h, wait_ms)`` (serve one initiator), ``P_stop(h)``
  (async-signal-safe), ``P_free(h)``, ``P_error(h)``;
* initiator: ``P_rounds(h, first, rounds, rtt_ns, res)``, ``P_cadence(h, cadence, lfsr,
  gap_base_ns, gap_span_mask)``, ``P_describe(h, text, n)``, ``P_close(h)``, ``P_error(h)``;
* ``P_ns_per_tick()``: its calibrated clock.

Its listen and open calls take the transport's own arguments; the transport wraps them in a
:class:`NativeFloor` subclass (the initiator, what ``Transport.bench_floor`` returns) and a
responder program that calls :func:`serve_responder`. Nothing here imports the transport.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_TIMEOUT_MS = 1000  # BL_DEFAULT_TIMEOUT_MS, the framework's round deadline
READY_TIMEOUT_S = 120.0  # a responder's start (Python is slow under emulation)
STOP_TIMEOUT_S = 10.0
#: a bench peer's floor responder listens on the peer's port plus this (`backline rdma bench-peer`)
FLOOR_PORT_OFFSET = 1
ERROR_BYTES = 512  # room for any error text of a floor library


class FloorLibrary:
    """A floor library's functions under one prefix (``lib.P_rounds`` is ``self.fn("rounds")``),
    declared to cffi from its header: bench.h's ``bl_bench_result``, then the header's lines
    between ``/* cdef-begin */`` and ``/* cdef-end */`` (plain C: no #include, no macros but
    integer #defines). ``name`` begins its responder's error lines. Loaded on first use."""

    def __init__(self, header: str, library: Callable[[], str], prefix: str, name: str) -> None:
        self.header, self._library, self.prefix, self.name = header, library, prefix, name
        self._ffi: Any = None
        self._lib: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        import cffi

        with self._lock:
            if self._lib is not None:
                return
            from .native import get_include

            with open(os.path.join(get_include(), "backline", "bench.h")) as fh:
                bench_h = fh.read()
            with open(self.header) as fh:
                floor_h = fh.read()
            result = re.search(r"typedef struct bl_bench_result \{.*?\} bl_bench_result;", bench_h, re.S)
            region = re.search(r"/\* cdef-begin \*/(.*)/\* cdef-end \*/", floor_h, re.S)
            if result is None or region is None:
                raise ImportError(f"{self.header} or bench.h lacks the declarations a floor reads; reinstall {self.name}")
            ffi = cffi.FFI()
            ffi.cdef(result.group(0) + "\n" + region.group(1).replace("BL_API ", ""))
            self._lib = ffi.dlopen(self._library())
            self._ffi = ffi

    @property
    def ffi(self) -> Any:
        if self._lib is None:
            self._load()
        return self._ffi

    @property
    def lib(self) -> Any:
        if self._lib is None:
            self._load()
        return self._lib

    def fn(self, what: str) -> Any:
        return getattr(self.lib, f"{self.prefix}_{what}")

    def err_buffer(self) -> Any:
        return self.ffi.new("char[]", ERROR_BYTES)

    def text(self, buf: Any) -> str:
        return str(self.ffi.string(buf).decode(errors="replace"))


# -- the responder process ----------------------------------------------------------------------

class StopWatch:
    """SIGTERM, SIGINT, SIGHUP (an orphaned stopped child gets SIGHUP and SIGCONT), or the
    parent's exit (a pidfd; the parent pid polled where there is none)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self, parent_pid: int | None) -> None:
        self.parent_pid = parent_pid
        self.reason: str | None = None
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_fd = signal.set_wakeup_fd(self._w)
        self._old = {sig: signal.signal(sig, self._on_signal) for sig in self.SIGNALS}
        self._pidfd: int | None = None
        if parent_pid is not None:
            try:
                self._pidfd = os.pidfd_open(parent_pid)
            except ProcessLookupError:
                self.reason = f"parent process {parent_pid} had exited"
            except (AttributeError, OSError):
                pass

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.reason = self.reason or f"signal {signal.Signals(signum).name}"

    def wait(self, seconds: float) -> bool:
        """Whether a stop came (waiting at most ``seconds`` for one)."""
        if self.reason is None:
            fds = [self._r] + ([self._pidfd] if self._pidfd is not None else [])
            ready, _, _ = select.select(fds, [], [], seconds)
            if self._pidfd in ready:
                self.reason = f"parent process {self.parent_pid} exited"
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                self.reason = self.reason or f"parent process {self.parent_pid} exited"
        return self.reason is not None

    def close(self) -> None:
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        for fd in (self._r, self._w, self._pidfd):
            if fd is not None:
                os.close(fd)


def say_error(name: str, text: str, status: int) -> None:
    """A responder's one error line, which :class:`Responder` turns back into an exception."""
    print(f"{name} floor: error: {' '.join(text.split())} [status {status}]", file=sys.stderr, flush=True)


def responder_parser(module: str, description: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """A responder program's parser (``python -m MODULE serve ...``) with the options every floor
    responder has; (the parser, its ``serve`` subparser, for the transport's own options)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve one initiator's ping-pong")
    s.add_argument("--host", required=True, help="address to listen on")
    s.add_argument("--port", type=int, required=True, help="TCP port (0: any free port, printed in the ready line)")
    s.add_argument("--cpu", type=int, default=-1, help="pin the responder to this CPU (default: not pinned)")
    s.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, help="deadline of a blocked send")
    s.add_argument("--wait-ms", type=int, default=0, help="how long to wait for the initiator (default 0: the "
                   "connect timeout, the larger of --timeout-ms and 10 s)")
    s.add_argument("--parent-pid", type=int, default=None, help="exit when this process exits")
    return parser, s


def parse_responder_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The responder's arguments (usage errors exit 2 with one line, as argparse's)."""
    args = parser.parse_args(argv)
    if args.wait_ms < 0:
        parser.error(f"--wait-ms {args.wait_ms}: give a number of milliseconds >= 0")
    return args


def serve_responder(library: FloorLibrary, listen: Callable[[Any, Any, int], int], *, wait_ms: int = 0,
                    parent_pid: int | None = None) -> int:
    """A responder program's body: ``listen(out, err, n)`` (the library's listen with its own
    arguments, filling ``out[0]``), print ``ready port=P pid=N``, serve one initiator on a
    thread; 0 when it is done or a stop came (:class:`StopWatch`), 1 on failure, 2 if it
    could not listen."""
    stop = StopWatch(parent_pid)  # armed first: a SIGTERM during set-up ends it cleanly
    try:
        if stop.reason is not None:
            return 0
        err = library.err_buffer()
        out = library.ffi.new(f"{library.prefix} **")
        rc = listen(out, err, len(err))
        if rc:
            say_error(library.name, library.text(err), rc)
            return 2
        handle = out[0]
        result: list[int] = []
        serve = library.fn("serve")
        worker = threading.Thread(target=lambda: result.append(serve(handle, wait_ms)), name="floor-responder",
                                  daemon=True)
        worker.start()
        try:
            print(f"ready port={library.fn('port')(handle)} pid={os.getpid()}", flush=True)
        except BrokenPipeError:  # whoever started this has gone
            stop.reason = "stdout closed"
        while worker.is_alive():
            if stop.wait(0.2):
                library.fn("stop")(handle)
                break
        worker.join(STOP_TIMEOUT_S)
        if worker.is_alive():  # it checks the stop flag every few microseconds: it cannot be here
            say_error(library.name, "the responder thread did not stop", -8)
            os._exit(1)
        rc = result[0] if result else 0
        if rc:
            say_error(library.name, library.text(library.fn("error")(handle)), rc)
        library.fn("free")(handle)
        return 1 if rc else 0
    finally:
        stop.close()


class Responder:
    """A floor responder child process (``python -P -m MODULE serve ARGS --parent-pid PID``),
    started and stopped cleanly.

    The program prints ``ready port=P`` once it listens (:attr:`port`), exits when this process
    does, and reports failure as :func:`say_error`'s line; :meth:`close` leaves nothing running.
    """

    def __init__(self, module: str, args: Sequence[str], name: str, *,
                 ready_timeout: float = READY_TIMEOUT_S) -> None:
        from .deployment import child_environment
        from .errors import TransportError

        self.name = name
        cmd = [sys.executable, "-P", "-m", module, "serve", *args, "--parent-pid", str(os.getpid())]
        self.paused = False
        try:
            # Its own process group: a terminal's Ctrl-C goes to the bench, which stops it.
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=child_environment(), process_group=0)
        except OSError as exc:
            raise TransportError(f"cannot start the floor responder ({sys.executable}): {exc}") from None
        try:
            self.port = self._await_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, ready_timeout: float) -> int:
        from .errors import DeadlineError

        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + ready_timeout
        line = b""
        fd = self.proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineError(f"the floor responder (pid {self.proc.pid}) was not ready within "
                                    f"{ready_timeout:g} s")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                line += chunk
        match = re.match(rb"ready port=(\d+)", line)
        if match:
            return int(match.group(1))
        self.proc.wait(STOP_TIMEOUT_S)
        raise self._error(f"exited with status {self.proc.returncode} before it was ready")

    def _error(self, how: str) -> Exception:
        """The error the responder's last line of stderr reports, as the exception its status names."""
        from .errors import from_status

        assert self.proc is not None
        said = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()
        last = said.splitlines()[-1] if said else ""
        status = re.search(r"\[status (-?\d+)\]\s*$", last)
        text = re.sub(rf"^{re.escape(self.name)} floor: error: |\s*\[status -?\d+\]\s*$", "", last)
        return from_status(int(status.group(1)) if status else -8,
                           f"the floor responder {how}: {text or 'it said nothing'}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it has exited (waiting at most ``timeout`` s), else None."""
        if self.proc is None:
            return 0
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def pause(self) -> None:
        """SIGSTOP it and wait until it is stopped (its CPU is then free)."""
        if self.proc is not None and not self.paused:
            from .bench import pause_process

            pause_process(self.proc.pid)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT it."""
        if self.proc is not None and self.paused:
            from .bench import resume_process

            resume_process(self.proc.pid)
            self.paused = False

    def close(self) -> None:
        """Stop it (SIGCONT, SIGTERM, then SIGKILL) and wait for it (idempotent)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)  # a stopped process takes no SIGTERM
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(STOP_TIMEOUT_S)
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


# -- the bench's side ---------------------------------------------------------------------------

class NativeFloor:
    """The initiator of a transport's floor, timed in this process, against a :class:`Responder`
    started here or a bench peer's on another host.

    A subclass gives :attr:`label`, :meth:`library`, :meth:`check` (what must be here before a
    responder starts), :meth:`start_responder` and :meth:`open` (the library's open call).
    Use it as a context manager: it starts on enter and leaves nothing behind on exit, on
    every path. :meth:`run` times rounds; :meth:`pause` / :meth:`resume` stop and continue the
    responder (SIGSTOP / SIGCONT), so that it and a spinning coprocessor never share a CPU;
    :meth:`reference` (optional) runs another tool's measurement of the same path.
    """

    label = "floor"

    def __init__(self, host: str, payload_bytes: int, *, cpu: int | None = None,
                 controller_cpu: int | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 reference_rounds: int = 100_000, cadence: str = "b2b", gap_ns: int = 0, gap_span: int = 0,
                 seed: int = 1, ready_timeout: float = READY_TIMEOUT_S, peer: tuple[str, int] | None = None) -> None:
        self.host, self.payload_bytes, self.peer = host, payload_bytes, peer
        self.cpu, self.controller_cpu = cpu, controller_cpu
        self.timeout_ms, self.reference_rounds = timeout_ms, reference_rounds
        self.cadence, self.gap_ns, self.gap_span, self.seed = cadence, gap_ns, gap_span, seed
        self.ready_timeout = ready_timeout
        self.responder: Responder | None = None
        self.port = 0
        self.description = ""
        #: why :meth:`reference` gave None (or what it ran), for the report
        self.reference_note: str | None = None
        self._handle: Any = None

    # -- what a subclass gives --

    def library(self) -> FloorLibrary:
        raise NotImplementedError

    def check(self) -> None:
        """Raise a BacklineError unless what the floor needs is here (before a responder starts)."""

    def start_responder(self) -> Responder:
        raise NotImplementedError

    def open(self, out: Any, err: Any, n: int) -> int:
        """The library's open call toward ``self.host:self.port``, filling ``out[0]``; its status."""
        raise NotImplementedError

    # -- bring-up and teardown --

    def __enter__(self) -> NativeFloor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Check, start the responder (unless it is a peer's), connect to it."""
        self.check()
        try:
            if self.peer is not None:
                self.port = self.peer[1]
            else:
                self.responder = self.start_responder()
                self.port = self.responder.port
            self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        from .errors import from_status

        lib = self.library()
        err = lib.err_buffer()
        out = lib.ffi.new(f"{lib.prefix} **")
        rc = self.open(out, err, len(err))
        if rc:
            raise from_status(rc, f"the floor could not connect to its responder: {lib.text(err)}")
        self._handle = out[0]
        if self.cadence == "random-delayed":
            rc = lib.fn("cadence")(self._handle, 1, self.seed, self.gap_ns, self.gap_span)
            if rc:
                raise from_status(rc, lib.text(lib.fn("error")(self._handle)))
        text = lib.ffi.new("char[]", 256)
        lib.fn("describe")(self._handle, text, len(text))
        self.description = lib.text(text)

    def close(self) -> None:
        """Disconnect, stop the responder and wait for it (idempotent)."""
        if self._handle is not None:
            self.library().fn("close")(self._handle)  # its closing ends the responder's serve
            self._handle = None
        responder, self.responder = self.responder, None
        if responder is not None:
            responder.close()

    @property
    def pid(self) -> int | None:
        return self.responder.pid if self.responder is not None else None

    # -- what the bench calls --

    def run(self, first: int, out: Any) -> None:
        """``len(out)`` rounds into ``out`` (numpy uint64, ns each); raises if a round is lost or a reply differs."""
        from .errors import BacklineError, from_status

        if self._handle is None:
            raise BacklineError("the floor is not started (use it as a context manager)")
        lib = self.library()
        res = lib.ffi.new("bl_bench_result *")
        rc = lib.fn("rounds")(self._handle, first, len(out), lib.ffi.from_buffer("uint64_t[]", out), res)
        if rc or res.lost:
            raise from_status(rc or res.first_error,
                              f"the floor ping-pong lost round {first + res.done}: "
                              f"{lib.text(lib.fn('error')(self._handle))}")
        if res.mismatched:
            raise BacklineError(f"the floor ping-pong got {res.mismatched} of {len(out)} replies back with other bytes "
                                "than it sent: the path or the responder corrupts them")

    def pause(self) -> None:
        """SIGSTOP the responder and wait until it is stopped (a peer's runs on a CPU of its own)."""
        if self.responder is not None:
            self.responder.pause()

    def resume(self) -> None:
        """SIGCONT the responder (the next block's warm-up rounds absorb its wake-up)."""
        if self.responder is not None:
            self.responder.resume()


def floor_settings(cfg: Any, init_args: dict[str, Any]) -> dict[str, Any]:
    """The :class:`NativeFloor` keyword arguments a bench configuration and the coprocessor's
    ``init_args`` give (host and peer, CPUs, deadline, cadence); a transport adds its own."""
    cpu = init_args.get("cpu")
    host, peer = getattr(cfg, "host", "127.0.0.1"), None
    if getattr(cfg, "peer", None):
        host, port = cfg.peer_address()
        peer = (host, port + FLOOR_PORT_OFFSET)
    return dict(host=host, payload_bytes=int(cfg.payload_bytes), peer=peer,
                cpu=None if cpu is None else as_int("cpu", cpu, -1),
                controller_cpu=getattr(cfg, "controller_cpu", None),
                timeout_ms=as_int("timeout_ms", init_args.get("timeout_ms"), DEFAULT_TIMEOUT_MS),
                reference_rounds=int(cfg.rounds), cadence=getattr(cfg, "cadence", "b2b"),
                gap_ns=int(getattr(cfg, "gap_ns", 0)), gap_span=int(getattr(cfg, "gap_span", 0)),
                seed=int(getattr(cfg, "seed", 1)))


def as_int(key: str, value: Any, default: int) -> int:
    """An init_args value as an integer (``default`` when absent), or a BacklineError naming it."""
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        from .errors import BacklineError

        raise BacklineError(f"init_args {key}={value!r}: must be an integer") from None


# -- a reference tool: a server and a client run here -------------------------------------------

def listening(port: int) -> bool:
    """Whether something listens on TCP ``port`` here (/proc/net/tcp and tcp6, state 0A)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for row in fh:
                    fields = row.split()
                    if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


def _pin(proc: subprocess.Popen[str], cpu: int | None) -> None:
    if cpu is not None and cpu >= 0:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(proc.pid, {cpu})  # the tools measure after their handshake


def run_tool_pair(server: Sequence[str], client: Sequence[str], port: int, *, server_cpu: int | None = None,
                  client_cpu: int | None = None, timeout: float = 60.0,
                  env: dict[str, str] | None = None) -> tuple[str | None, int, str]:
    """Run a server/client measuring tool here (perftest, ucx_perftest): the server first, the
    client once the server listens on ``port``; each pinned, both killed at the deadline.
    (client output or None, client status, a note: why not, or ``""``)."""
    shown = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(server))
    deadline = time.monotonic() + timeout
    procs: list[subprocess.Popen[str]] = []
    try:
        srv = subprocess.Popen(list(server), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, process_group=0, env=env)
        procs.append(srv)
        _pin(srv, server_cpu)
        while not listening(port):
            if srv.poll() is not None or time.monotonic() > deadline:
                said = (srv.communicate(timeout=STOP_TIMEOUT_S)[0] if srv.poll() is not None else "").strip()
                last = said.splitlines()[-1] if said else "no output"
                return None, -1, f"`{shown}` did not listen ({last})"
            time.sleep(0.01)
        cli = subprocess.Popen(list(client), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, process_group=0, env=env)
        procs.append(cli)
        _pin(cli, client_cpu)
        out, _ = cli.communicate(timeout=max(1.0, deadline - time.monotonic()))
        srv.communicate(timeout=max(1.0, deadline - time.monotonic()))
        return out, cli.returncode, ""
    except subprocess.TimeoutExpired:
        return None, -1, f"`{shown}` did not finish within {timeout:.0f} s"
    except OSError as exc:
        return None, -1, f"cannot run {server[0]}: {exc}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(STOP_TIMEOUT_S)
