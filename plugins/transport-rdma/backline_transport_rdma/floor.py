"""The bare verbs floor of ``backline bench --transport rdma`` (native/floor.c), and its responder process.

The bench gets a :class:`Floor` from :func:`bench_floor`: a responder child process echoes
RDMA WRITEs on the coprocessor's CPU, this process initiates and times them, and
:meth:`Floor.reference` runs perftest's ``ib_write_lat`` on the same device and GID. The
responder is this module run as a program::

    python -P -m backline_transport_rdma.floor serve --host H --port P [--device D --ib-port N
        --gid-index G --cpu C --timeout-ms T --wait-ms W --parent-pid PID]

It prints one ``ready port=P pid=N`` line once it listens (port 0: any free port, the one
it took), waits for one initiator (``--wait-ms``; by default the connect timeout), serves it
until it disconnects, and exits on SIGTERM, SIGINT or SIGHUP or when ``--parent-pid`` exits. It imports nothing of backline_core: it starts in a fraction
of the time.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from typing import Any

import cffi

from . import get_library

LABEL = "floor (bare RDMA WRITE ping-pong)"
REFERENCE_LABEL = "perftest ib_write_lat (2 x one-way)"
#: perftest runs at most this many iterations (its own array of timestamps grows with them)
PERFTEST_MAX_ROUNDS = 100_000
#: machines where perftest's cycles (-C) are the counter the floor's clock reads (rdtsc, cntvct_el0)
_COUNTER_MACHINES = ("x86_64", "AMD64", "i686", "aarch64", "arm64")
DEFAULT_TIMEOUT_MS = 1000  # BL_DEFAULT_TIMEOUT_MS, the framework's round deadline
READY_TIMEOUT_S = 120.0  # the responder's start (Python is slow under emulation)
STOP_TIMEOUT_S = 10.0

_HERE = os.path.dirname(os.path.abspath(__file__))
_FFI = cffi.FFI()
_LIB: Any = None
_LIB_LOCK = threading.Lock()


def _core_include() -> str:
    """backline_core's include directory, found without importing backline_core."""
    spec = find_spec("backline_core")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("backline_core is not installed: pip install backline-core")
    return os.path.join(list(spec.submodule_search_locations)[0], "native", "include")


def _cdef() -> str:
    """bench.h's bl_bench_result, then floor.h's declarations between its cdef markers."""
    with open(os.path.join(_core_include(), "backline", "bench.h")) as fh:
        bench_h = fh.read()
    with open(os.path.join(_HERE, "native", "floor.h")) as fh:
        floor_h = fh.read()
    result = re.search(r"typedef struct bl_bench_result \{.*?\} bl_bench_result;", bench_h, re.S)
    region = re.search(r"/\* cdef-begin \*/(.*)/\* cdef-end \*/", floor_h, re.S)
    if result is None or region is None:
        raise ImportError("floor.h or bench.h lacks the declarations floor.py reads; reinstall backline-transport-rdma")
    return result.group(0) + "\n" + region.group(1).replace("BL_API ", "")


def native() -> tuple[cffi.FFI, Any]:
    """(ffi, lib) of the floor's functions in the rdma plugin's library (loaded once)."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            _FFI.cdef(_cdef())
            _LIB = _FFI.dlopen(get_library())
    return _FFI, _LIB


class NativeError(Exception):
    """A floor function's failure: its status (a bl_status) and its text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _err_buffer() -> Any:
    ffi, lib = native()
    return ffi.new("char[]", lib.BL_RDMA_FLOOR_ERROR_BYTES)


def _text(buf: Any) -> str:
    return _FFI.string(buf).decode(errors="replace")


def check_device(device: str = "", ib_port: int = 0, gid_index: int = -1) -> None:
    """Raise :class:`NativeError` unless the device, port and GID the floor would use are there."""
    _, lib = native()
    err = _err_buffer()
    rc = lib.bl_rdma_floor_check(device.encode(), ib_port, gid_index, err, len(err))
    if rc:
        raise NativeError(rc, _text(err))


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


def _say_error(text: str, status: int) -> None:
    print(f"backline-transport-rdma floor: error: {' '.join(text.split())} [status {status}]", file=sys.stderr,
          flush=True)


def serve(host: str, port: int, device: str = "", ib_port: int = 0, gid_index: int = -1, cpu: int = -1,
          timeout_ms: int = DEFAULT_TIMEOUT_MS, parent_pid: int | None = None, wait_ms: int = 0) -> int:
    """The responder: listen, print ``ready``, serve one initiator; 0 when it is done or a stop came."""
    ffi, lib = native()
    stop = StopWatch(parent_pid)  # armed first: a SIGTERM during set-up ends it cleanly
    try:
        if stop.reason is not None:
            return 0
        err = _err_buffer()
        out = ffi.new("bl_rdma_floor **")
        rc = lib.bl_rdma_floor_listen(host.encode(), port, device.encode(), ib_port, gid_index, cpu, timeout_ms, out,
                                      err, len(err))
        if rc:
            _say_error(_text(err), rc)
            return 2
        handle = out[0]
        result: list[int] = []
        worker = threading.Thread(target=lambda: result.append(lib.bl_rdma_floor_serve(handle, wait_ms)),
                                  name="floor-responder", daemon=True)
        worker.start()
        try:
            print(f"ready port={lib.bl_rdma_floor_port(handle)} pid={os.getpid()}", flush=True)
        except BrokenPipeError:  # whoever started this has gone
            stop.reason = "stdout closed"
        while worker.is_alive():
            if stop.wait(0.2):
                lib.bl_rdma_floor_stop(handle)
                break
        worker.join(STOP_TIMEOUT_S)
        if worker.is_alive():  # it checks the stop flag every few microseconds: it cannot be here
            _say_error("the responder thread did not stop", -8)
            os._exit(1)
        rc = result[0] if result else 0
        if rc:
            _say_error(_text(lib.bl_rdma_floor_error(handle)), rc)
        lib.bl_rdma_floor_free(handle)
        return 1 if rc else 0
    finally:
        stop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backline_transport_rdma.floor",
                                     description="The bench floor's RDMA WRITE responder.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve one initiator's ping-pong")
    s.add_argument("--host", required=True, help="address to listen on")
    s.add_argument("--port", type=int, required=True, help="TCP port (0: any free port, printed in the ready line)")
    s.add_argument("--device", default="", help="RDMA device (default: the first with an active port)")
    s.add_argument("--ib-port", type=int, default=0, help="port of the device (default: its first active port)")
    s.add_argument("--gid-index", type=int, default=-1, help="GID index (default: the first RoCE v2 GID, "
                   "IPv4-mapped preferred)")
    s.add_argument("--cpu", type=int, default=-1, help="pin the responder to this CPU (default: not pinned)")
    s.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, help="deadline of a blocked WRITE")
    s.add_argument("--wait-ms", type=int, default=0, help="how long to wait for the initiator (default 0: the "
                   "connect timeout, the larger of --timeout-ms and 10 s)")
    s.add_argument("--parent-pid", type=int, default=None, help="exit when this process exits")
    args = parser.parse_args(argv)
    if args.wait_ms < 0:
        parser.error(f"--wait-ms {args.wait_ms}: give a number of milliseconds >= 0")
    return serve(args.host, args.port, args.device, args.ib_port, args.gid_index, args.cpu, args.timeout_ms,
                 args.parent_pid, args.wait_ms)


# -- the bench's side ---------------------------------------------------------------------------

def _child_environment() -> dict[str, str]:
    """This environment, less what would import from the child's working directory (as the
    core's coprocessor processes: absolute PYTHONPATH entries only, PYTHONSAFEPATH)."""
    env = dict(os.environ)
    kept = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and os.path.isabs(entry)]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    env["PYTHONSAFEPATH"] = "1"
    for name in ("PYTHONSTARTUP", "PYTHONINSPECT"):
        env.pop(name, None)
    return env


def _as_int(key: str, value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        from backline_core.errors import BacklineError

        raise BacklineError(f"init_args {key}={value!r}: must be an integer") from None


#: a bench peer's floor responder listens on the peer's port plus this (`backline rdma bench-peer`)
FLOOR_PORT_OFFSET = 1


class Responder:
    """A floor responder child process (this module's ``serve``), started and stopped cleanly.

    It listens on ``host:port`` (0: a free port, :attr:`port` says which) on ``cpu``, waits
    ``wait_ms`` for its initiator (0: the connect timeout), exits when this process does
    (``--parent-pid``), and :meth:`close` leaves nothing running.
    """

    def __init__(self, host: str, port: int = 0, *, device: str = "", ib_port: int = 0, gid_index: int = -1,
                 cpu: int | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS, wait_ms: int = 0,
                 ready_timeout: float = READY_TIMEOUT_S) -> None:
        from backline_core.errors import TransportError

        cmd = [sys.executable, "-P", "-m", "backline_transport_rdma.floor", "serve", "--host", host,
               "--port", str(port), "--ib-port", str(ib_port), "--gid-index", str(gid_index),
               "--cpu", str(-1 if cpu is None else cpu), "--timeout-ms", str(timeout_ms),
               "--wait-ms", str(wait_ms), "--parent-pid", str(os.getpid())]
        if device:
            cmd += ["--device", device]
        self.paused = False
        try:
            # Its own process group: a terminal's Ctrl-C goes to the bench, which stops it.
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=_child_environment(), process_group=0)
        except OSError as exc:
            raise TransportError(f"cannot start the floor responder ({sys.executable}): {exc}") from None
        try:
            self.port = self._await_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, ready_timeout: float) -> int:
        from backline_core.errors import DeadlineError

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
        from backline_core.errors import from_status

        assert self.proc is not None
        said = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()
        last = said.splitlines()[-1] if said else ""
        status = re.search(r"\[status (-?\d+)\]\s*$", last)
        text = re.sub(r"^backline-transport-rdma floor: error: |\s*\[status -?\d+\]\s*$", "", last)
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
            from backline_core.bench import pause_process

            pause_process(self.proc.pid)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT it."""
        if self.proc is not None and self.paused:
            from backline_core.bench import resume_process

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
                    with contextlib.suppress(OSError):
                        stream.close()
            self.paused = False


class Floor:
    """The bench's RDMA floor: a responder process on the coprocessor's CPU and an initiator here.

    Use it as a context manager (it starts on enter and leaves nothing behind on exit, on
    every path). :meth:`run` times rounds; :meth:`pause` / :meth:`resume` stop and continue
    the responder (SIGSTOP / SIGCONT), so that it and a spinning coprocessor never share a
    CPU; :meth:`reference` runs perftest's ``ib_write_lat`` for comparison. With ``peer``
    (host, port) the responder is a bench peer's on another host: nothing is started here.
    """

    label = LABEL

    def __init__(self, host: str, payload_bytes: int, *, device: str = "", ib_port: int = 0, gid_index: int = -1,
                 cpu: int | None = None, controller_cpu: int | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 reference_rounds: int = PERFTEST_MAX_ROUNDS, cadence: str = "b2b", gap_ns: int = 0,
                 gap_span: int = 0, seed: int = 1, ready_timeout: float = READY_TIMEOUT_S,
                 peer: tuple[str, int] | None = None) -> None:
        self.host, self.payload_bytes, self.peer = host, payload_bytes, peer
        self.device, self.ib_port, self.gid_index = device, ib_port, gid_index
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

    # -- bring-up and teardown --

    def __enter__(self) -> Floor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Check the device, start the responder (unless it is a peer's), connect to it."""
        from backline_core.errors import from_status

        try:
            check_device(self.device, self.ib_port, self.gid_index)
        except NativeError as exc:
            text = exc.text
            if self.device and f"'{self.device}'" not in text:  # "no RDMA device: ..." alone would not name it
                text = f"the floor's RDMA device '{self.device}' is not there: {text}"
            raise from_status(exc.status, text) from None
        try:
            if self.peer is not None:
                self.port = self.peer[1]
            else:
                self.responder = Responder(self.host, device=self.device, ib_port=self.ib_port,
                                           gid_index=self.gid_index, cpu=self.cpu, timeout_ms=self.timeout_ms,
                                           ready_timeout=self.ready_timeout)
                self.port = self.responder.port
            self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        from backline_core.errors import from_status

        ffi, lib = native()
        err = _err_buffer()
        out = ffi.new("bl_rdma_floor **")
        rc = lib.bl_rdma_floor_open(self.host.encode(), self.port, self.device.encode(), self.ib_port, self.gid_index,
                                    self.payload_bytes, self.timeout_ms, out, err, len(err))
        if rc:
            raise from_status(rc, f"the floor could not connect to its responder: {_text(err)}")
        self._handle = out[0]
        if self.cadence == "random-delayed":
            rc = lib.bl_rdma_floor_cadence(self._handle, 1, self.seed, self.gap_ns, self.gap_span)
            if rc:
                raise from_status(rc, _text(lib.bl_rdma_floor_error(self._handle)))
        text = ffi.new("char[]", 256)
        lib.bl_rdma_floor_describe(self._handle, text, len(text))
        self.description = _text(text)

    def close(self) -> None:
        """Disconnect, stop the responder and wait for it (idempotent)."""
        if self._handle is not None:
            native()[1].bl_rdma_floor_close(self._handle)  # its closing ends the responder's serve
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
        from backline_core.errors import BacklineError, from_status

        if self._handle is None:
            raise BacklineError("the floor is not started (use it as a context manager)")
        ffi, lib = native()
        res = ffi.new("bl_bench_result *")
        rc = lib.bl_rdma_floor_rounds(self._handle, first, len(out), ffi.from_buffer("uint64_t[]", out), res)
        if rc or res.lost:
            raise from_status(rc or res.first_error,
                              f"the floor ping-pong lost round {first + res.done}: "
                              f"{_text(lib.bl_rdma_floor_error(self._handle))}")
        if res.mismatched:
            raise BacklineError(f"the floor ping-pong got {res.mismatched} of {len(out)} replies back with other bytes "
                                "than it sent: the device or the responder corrupts writes")

    def pause(self) -> None:
        """SIGSTOP the responder and wait until it is stopped (a peer's runs on a CPU of its own)."""
        if self.responder is not None:
            self.responder.pause()

    def resume(self) -> None:
        """SIGCONT the responder (the next block's warm-up rounds absorb its wake-up)."""
        if self.responder is not None:
            self.responder.resume()

    def reference(self) -> dict[str, Any] | None:
        """perftest's ``ib_write_lat`` on this floor's device, port and GID with its payload: round trips
        in ns (2 x its one-way figures), or None (:attr:`reference_note` says why)."""
        if self._handle is None:
            self.reference_note = "perftest not run: the floor is not started"
            return None
        if self.peer is not None:
            self.reference_note = ("perftest not run: its server would have to run on the peer's host; run "
                                   "`ib_write_lat` there and `ib_write_lat HOST` here to compare")
            return None
        ffi, lib = native()
        name = ffi.new("char[]", 64)
        ib_port, gid_index = ffi.new("int32_t *"), ffi.new("int32_t *")
        lib.bl_rdma_floor_device(self._handle, name, len(name), ib_port, gid_index)
        rounds = max(1, min(self.reference_rounds, PERFTEST_MAX_ROUNDS))
        figures, note = perftest_write_lat(_text(name), ib_port[0], gid_index[0], self.payload_bytes, rounds,
                                           self.host, server_cpu=self.cpu, client_cpu=self.controller_cpu)
        self.reference_note = note
        return figures


def bench_floor(cfg: Any, init_args: dict[str, Any]) -> Floor:
    """The Transport record's ``bench_floor``: a :class:`Floor` for the bench's configuration, on the
    device, port, GID and CPU of the coprocessor's ``init_args``; with ``--peer``, the peer's responder."""
    cpu = init_args.get("cpu")
    host, peer = getattr(cfg, "host", "127.0.0.1"), None
    if getattr(cfg, "peer", None):
        host, port = cfg.peer_address()
        peer = (host, port + FLOOR_PORT_OFFSET)
    return Floor(host, int(cfg.payload_bytes), peer=peer,
                 device=str(init_args.get("device") or ""),
                 ib_port=_as_int("ib_port", init_args.get("ib_port"), 0),
                 gid_index=_as_int("gid_index", init_args.get("gid_index"), -1),
                 cpu=None if cpu is None else _as_int("cpu", cpu, -1),
                 controller_cpu=getattr(cfg, "controller_cpu", None),
                 timeout_ms=_as_int("timeout_ms", init_args.get("timeout_ms"), DEFAULT_TIMEOUT_MS),
                 reference_rounds=int(cfg.rounds), cadence=getattr(cfg, "cadence", "b2b"),
                 gap_ns=int(getattr(cfg, "gap_ns", 0)), gap_span=int(getattr(cfg, "gap_span", 0)),
                 seed=int(getattr(cfg, "seed", 1)))


# -- perftest -----------------------------------------------------------------------------------

def parse_write_lat(text: str) -> tuple[dict[str, float], str] | None:
    """perftest's result row as ({column: one-way figure}, the unit its header names: usec, or cycles). The
    columns: t_min, t_max, t_typical, t_avg, t_stdev, p99, p99.9, #bytes, #iterations. None without a table."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if "t_typical" not in line:
            continue
        unit = re.search(r"t_typical\[(\w+)\]", line)
        names = [re.sub(r"\[\w+\]$", "", name) for name in
                 re.sub(r"(\d+(?:\.\d+)?)%\s+percentile", r"p\1", line).split()]
        for row in lines[k + 1:]:
            values = row.split()
            if values and re.match(r"^\d", values[0]):
                try:
                    return {name: float(value) for name, value in zip(names, values)}, unit.group(1) if unit else "usec"
                except ValueError:
                    return None
    return None


def _listening(port: int) -> bool:
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


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _pin(proc: subprocess.Popen[str], cpu: int | None) -> None:
    if cpu is not None and cpu >= 0:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(proc.pid, {cpu})  # perftest has one thread; it measures after its handshake


def perftest_write_lat(device: str, ib_port: int, gid_index: int, payload_bytes: int, rounds: int, host: str, *,
                       server_cpu: int | None = None, client_cpu: int | None = None,
                       timeout_s: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """Run ``ib_write_lat`` server and client here; (round-trip figures in ns, a note saying what ran or why not)."""
    exe = shutil.which("ib_write_lat")
    if exe is None:
        return None, "perftest not run: ib_write_lat is not on PATH (Debian: apt-get install perftest)"
    try:
        port = _free_port(host)
    except OSError as exc:
        return None, f"perftest not run: no free TCP port on {host} ({exc.strerror or exc})"
    args = [exe, "-d", device, "-i", str(ib_port), "-x", str(gid_index), "-s", str(payload_bytes), "-n", str(rounds),
            "-p", str(port)]
    # In cycles of the counter the floor's clock reads, converted with the floor's calibration:
    # perftest's own MHz estimate fails now and then under emulation (its figures come out inf).
    ns_per_cycle = native()[1].bl_rdma_floor_ns_per_tick() if platform.machine() in _COUNTER_MACHINES else None
    if ns_per_cycle:
        args.append("-C")
    shown = " ".join(os.path.basename(a) if a == exe else a for a in args)
    timeout = timeout_s if timeout_s is not None else 60.0 + rounds * 0.002
    deadline = time.monotonic() + timeout
    procs: list[subprocess.Popen[str]] = []
    try:
        server = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, process_group=0)
        procs.append(server)
        _pin(server, server_cpu)
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                said = (server.communicate(timeout=STOP_TIMEOUT_S)[0] if server.poll() is not None else "").strip()
                last = said.splitlines()[-1] if said else "no output"
                return None, f"perftest failed: `{shown}` did not listen ({last})"
            time.sleep(0.01)
        client = subprocess.Popen([*args, host], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, process_group=0)
        procs.append(client)
        _pin(client, client_cpu)
        out, _ = client.communicate(timeout=max(1.0, deadline - time.monotonic()))
        server.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None, f"perftest failed: `{shown}` did not finish within {timeout:.0f} s"
    except OSError as exc:
        return None, f"perftest failed: cannot run {exe}: {exc}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(STOP_TIMEOUT_S)
    parsed = parse_write_lat(out)
    if client.returncode != 0 or parsed is None or "t_typical" not in parsed[0]:
        last = [line for line in out.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return None, f"perftest failed: `{shown} {host}` exited with status {client.returncode} ({last[0].strip()})"
    row, unit = parsed
    if ns_per_cycle:
        unit = "cycles"  # what -C reports, whatever its header says (perftest 4.5 still prints [usec])
    per_unit = {"usec": 1000.0, "cycles": ns_per_cycle}.get(unit)
    if not per_unit:
        return None, f"perftest's figures are in {unit}, which this bench cannot convert: `{shown} {host}`"
    figures: dict[str, Any] = {"name": REFERENCE_LABEL, "command": f"{shown} {host}",
                               "rounds": int(row.get("#iterations", rounds))}
    for key, column in (("median_ns", "t_typical"), ("mean_ns", "t_avg"), ("p99_ns", "p99"), ("p999_ns", "p99.9"),
                        ("min_ns", "t_min"), ("max_ns", "t_max")):
        if column in row:
            figures[key] = 2 * per_unit * row[column]  # one-way -> round trip, in ns
    if not all(math.isfinite(figures[k]) and figures[k] > 0 for k in ("median_ns", "p99_ns", "p999_ns") if k in figures):
        return None, f"perftest's figures are not finite or not positive ({row}): `{shown} {host}`"
    how = f", its cycles at the floor's {ns_per_cycle:.4f} ns each" if unit == "cycles" else ""
    return figures, f"perftest ran after the last block, the bench's nodes stopped{how}: `{shown} {host}`"


if __name__ == "__main__":
    sys.exit(main())
