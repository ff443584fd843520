"""The kit of a networked transport's bench floor: a bare native ping-pong with nothing of the
framework in the path, run between this process and a responder child, and a reference tool
(perftest, ucx_perftest) run beside it.

A transport's floor library (C, built with the transport's own set-up code and
``backline/sdk/pingpong.h``'s clock) exports, for one prefix ``P``:

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
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _cli
from ._process import ChildProcess, StopWatch, describe_exit, pause, resume

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
            from ._abi import get_include

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
    s.add_argument("--parent-pid", type=_cli.parent_pid, default=None, help="exit when this process exits")
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


class Responder(ChildProcess):
    """A floor responder child process (``python -P -m MODULE serve ARGS --parent-pid PID``),
    started and stopped cleanly.

    The program prints ``ready port=P`` once it listens (:attr:`port`), exits when this process
    does, and reports failure as :func:`say_error`'s line; :meth:`close` leaves nothing running.
    """

    def __init__(self, module: str, args: Sequence[str], name: str, *,
                 ready_timeout: float = READY_TIMEOUT_S) -> None:
        from ._deployment import child_environment, interpreter

        super().__init__([*interpreter(), "-m", module, "serve", *args, "--parent-pid", str(os.getpid())],
                         name="the floor responder", env=child_environment(), ready=r"^ready port=(\d+)")
        self.floor = name
        self.paused = False
        self._closed = False
        try:
            self.port = int(self.wait_ready(ready_timeout).group(1))
        except BaseException:
            self.close()
            raise

    def start_error(self) -> Exception:
        """The error the responder's last line of stderr reports, as the exception its status names."""
        from ._errors import from_status

        last = self.last_line()
        status = re.search(r"\[status (-?\d+)\]\s*$", last)
        text = re.sub(rf"^{re.escape(self.floor)} floor: error: |\s*\[status -?\d+\]\s*$", "", last)
        how = f"{describe_exit(self.proc.returncode)} before it was ready"
        return from_status(int(status.group(1)) if status else -8,
                           f"{self.name} {how}: {text or 'it said nothing'}")

    def pause(self) -> None:
        """SIGSTOP it and wait until it is stopped (its CPU is then free)."""
        if not self._closed and not self.paused:
            pause(self.pid)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT it."""
        if not self._closed and self.paused:
            resume(self.pid)
            self.paused = False

    def close(self) -> None:
        """Stop it (SIGCONT, SIGTERM, then SIGKILL) and wait for it (idempotent)."""
        if not self._closed:
            self._closed = True
            self.terminate(STOP_TIMEOUT_S)


# -- the bench's side ---------------------------------------------------------------------------

class NativeFloor:
    """The initiator of a transport's floor, timed in this process, against a :class:`Responder`
    started here or a bench peer's on another host.

    A subclass gives :attr:`label`, :meth:`library`, :meth:`check` (what must be here before a
    responder starts), :meth:`start_responder` and :meth:`open` (the library's open call).
    Use it as a context manager: it starts on enter and leaves nothing behind on exit, on
    every path. :meth:`run` times rounds; :meth:`pause` / :meth:`resume` stop and continue the
    responder (SIGSTOP / SIGCONT), so that it and a spinning coprocessor never share a CPU;
    :meth:`reference` runs another tool's measurement of the same path (a subclass's; None here).
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
        from ._errors import from_status

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
        from ._errors import BacklineError, from_status

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

    def reference(self) -> dict[str, Any] | None:
        """Another tool's figures for the same path; None here (a subclass may run one, saying
        what it ran or why not in :attr:`reference_note`)."""
        return None

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
        from ._errors import BacklineError

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
