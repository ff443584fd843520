"""The bare verbs floor of ``backline bench --transport rdma`` (native/floor.c), and its responder process.

The bench gets a :class:`Floor` from :func:`bench_floor`: a responder child process echoes
RDMA WRITEs on the coprocessor's CPU, this process initiates and times them, and
:meth:`Floor.reference` runs perftest's ``ib_write_lat`` on the same device and GID. The
responder is this module run as a program::

    python -P -m backline_transport_rdma.floor serve --host H --port P [--device D --ib-port N
        --gid-index G --cpu C --timeout-ms T --wait-ms W --parent-pid PID]

It prints one ``ready port=P pid=N`` line once it listens (port 0: any free port, the one
it took), waits for one initiator (``--wait-ms``; by default the connect timeout), serves it
until it disconnects, and exits on SIGTERM, SIGINT or SIGHUP or when ``--parent-pid`` exits.
The responder process, the initiator's Python side and the tool runner are the core's floor
kit (:mod:`backline_core.sdk`); this module gives what is rdma's: the device, the
verbs library and perftest.
"""

from __future__ import annotations

import math
import os
import platform
import re
import shutil
import sys
from typing import Any

from backline_core.sdk import (
    DEFAULT_TIMEOUT_MS,
    FLOOR_PORT_OFFSET,
    READY_TIMEOUT_S,
    FloorLibrary,
    NativeFloor,
    Responder,
    StopWatch,
    as_int,
    floor_settings,
    parse_responder_args,
    responder_parser,
    run_tool_pair,
    serve_responder,
)

from . import get_library

__all__ = ["DEFAULT_TIMEOUT_MS", "FLOOR_PORT_OFFSET", "LABEL", "READY_TIMEOUT_S", "REFERENCE_LABEL", "Floor",
           "NativeError", "StopWatch", "bench_floor", "check_device", "native", "parse_write_lat",
           "perftest_write_lat", "responder", "serve"]

LABEL = "floor (bare RDMA WRITE ping-pong)"
REFERENCE_LABEL = "perftest ib_write_lat (2 x one-way)"
#: perftest runs at most this many iterations (its own array of timestamps grows with them)
PERFTEST_MAX_ROUNDS = 100_000
#: machines where perftest's cycles (-C) are the counter the floor's clock reads (rdtsc, cntvct_el0)
_COUNTER_MACHINES = ("x86_64", "AMD64", "i686", "aarch64", "arm64")
NAME = "backline-transport-rdma"

LIBRARY = FloorLibrary(os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "floor.h"), get_library,
                       "bl_rdma_floor", NAME)


def native() -> tuple[Any, Any]:
    """(ffi, lib) of the floor's functions in the rdma plugin's library (loaded once)."""
    return LIBRARY.ffi, LIBRARY.lib


class NativeError(Exception):
    """A floor function's failure: its status (a bl_status) and its text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def check_device(device: str = "", ib_port: int = 0, gid_index: int = -1) -> None:
    """Raise :class:`NativeError` unless the device, port and GID the floor would use are there."""
    err = LIBRARY.err_buffer()
    rc = LIBRARY.lib.bl_rdma_floor_check(device.encode(), ib_port, gid_index, err, len(err))
    if rc:
        raise NativeError(rc, LIBRARY.text(err))


# -- the responder process ----------------------------------------------------------------------

def serve(host: str, port: int, device: str = "", ib_port: int = 0, gid_index: int = -1, cpu: int = -1,
          timeout_ms: int = DEFAULT_TIMEOUT_MS, parent_pid: int | None = None, wait_ms: int = 0) -> int:
    """The responder: listen, print ``ready``, serve one initiator; 0 when it is done or a stop came."""
    return serve_responder(
        LIBRARY, lambda out, err, n: LIBRARY.lib.bl_rdma_floor_listen(
            host.encode(), port, device.encode(), ib_port, gid_index, cpu, timeout_ms, out, err, n),
        wait_ms=wait_ms, parent_pid=parent_pid)


def main(argv: list[str] | None = None) -> int:
    parser, s = responder_parser("backline_transport_rdma.floor", "The bench floor's RDMA WRITE responder.")
    s.add_argument("--device", default="", help="RDMA device (default: the first with an active port)")
    s.add_argument("--ib-port", type=int, default=0, help="port of the device (default: its first active port)")
    s.add_argument("--gid-index", type=int, default=-1, help="GID index (default: the first RoCE v2 GID, "
                   "IPv4-mapped preferred)")
    args = parse_responder_args(parser, argv)
    return serve(args.host, args.port, args.device, args.ib_port, args.gid_index, args.cpu, args.timeout_ms,
                 args.parent_pid, args.wait_ms)


# -- the bench's side ---------------------------------------------------------------------------

def responder(host: str, port: int = 0, *, device: str = "", ib_port: int = 0, gid_index: int = -1,
              cpu: int | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS, wait_ms: int = 0,
              ready_timeout: float = READY_TIMEOUT_S) -> Responder:
    """This module's responder as a child process, listening on ``host:port`` (0: a free port)."""
    args = ["--host", host, "--port", str(port), "--ib-port", str(ib_port), "--gid-index", str(gid_index),
            "--cpu", str(-1 if cpu is None else cpu), "--timeout-ms", str(timeout_ms), "--wait-ms", str(wait_ms)]
    if device:
        args += ["--device", device]
    return Responder("backline_transport_rdma.floor", args, NAME, ready_timeout=ready_timeout)


class Floor(NativeFloor):
    """The bare RDMA WRITE ping-pong between this process and a responder on the coprocessor's CPU,
    on the device, port and GID given (by default the first active ones); :meth:`reference` runs
    perftest's ``ib_write_lat`` there for comparison. See :class:`~backline_core.sdk.NativeFloor`.
    """

    label = LABEL

    def __init__(self, host: str, payload_bytes: int, *, device: str = "", ib_port: int = 0, gid_index: int = -1,
                 reference_rounds: int = PERFTEST_MAX_ROUNDS, **kwargs: Any) -> None:
        super().__init__(host, payload_bytes, reference_rounds=reference_rounds, **kwargs)
        self.device, self.ib_port, self.gid_index = device, ib_port, gid_index

    def library(self) -> FloorLibrary:
        return LIBRARY

    def check(self) -> None:
        from backline_core.sdk import from_status

        try:
            check_device(self.device, self.ib_port, self.gid_index)
        except NativeError as exc:
            text = exc.text
            if self.device and f"'{self.device}'" not in text:  # "no RDMA device: ..." alone would not name it
                text = f"the floor's RDMA device '{self.device}' is not there: {text}"
            raise from_status(exc.status, text) from None

    def start_responder(self) -> Responder:
        return responder(self.host, device=self.device, ib_port=self.ib_port, gid_index=self.gid_index, cpu=self.cpu,
                         timeout_ms=self.timeout_ms, ready_timeout=self.ready_timeout)

    def open(self, out: Any, err: Any, n: int) -> int:
        return int(LIBRARY.lib.bl_rdma_floor_open(self.host.encode(), self.port, self.device.encode(), self.ib_port,
                                                  self.gid_index, self.payload_bytes, self.timeout_ms, out, err, n))

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
        figures, note = perftest_write_lat(LIBRARY.text(name), ib_port[0], gid_index[0], self.payload_bytes, rounds,
                                           self.host, server_cpu=self.cpu, client_cpu=self.controller_cpu)
        self.reference_note = note
        return figures


def bench_floor(cfg: Any, init_args: dict[str, Any]) -> Floor:
    """The Transport record's ``bench_floor``: a :class:`Floor` for the bench's configuration, on the
    device, port, GID and CPU of the coprocessor's ``init_args``; with ``--peer``, the peer's responder."""
    return Floor(device=str(init_args.get("device") or ""),
                 ib_port=as_int("ib_port", init_args.get("ib_port"), 0),
                 gid_index=as_int("gid_index", init_args.get("gid_index"), -1),
                 **floor_settings(cfg, init_args))


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


def perftest_write_lat(device: str, ib_port: int, gid_index: int, payload_bytes: int, rounds: int, host: str, *,
                       server_cpu: int | None = None, client_cpu: int | None = None,
                       timeout_s: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """Run ``ib_write_lat`` server and client here; (round-trip figures in ns, a note saying what ran or why not)."""
    from backline_core import BacklineError
    from backline_core.sdk import free_port  # numpy: not for the responder, which starts fast

    exe = shutil.which("ib_write_lat")
    if exe is None:
        return None, "perftest not run: ib_write_lat is not on PATH (Debian: apt-get install perftest)"
    try:
        port = free_port(host)
    except BacklineError as exc:
        return None, f"perftest not run: {exc}"
    args = [exe, "-d", device, "-i", str(ib_port), "-x", str(gid_index), "-s", str(payload_bytes), "-n", str(rounds),
            "-p", str(port)]
    # In cycles of the counter the floor's clock reads, converted with the floor's calibration:
    # perftest's own MHz estimate fails now and then under emulation (its figures come out inf).
    ns_per_cycle = native()[1].bl_rdma_floor_ns_per_tick() if platform.machine() in _COUNTER_MACHINES else None
    if ns_per_cycle:
        args.append("-C")
    shown = " ".join(os.path.basename(a) if a == exe else a for a in args)
    timeout = timeout_s if timeout_s is not None else 60.0 + rounds * 0.002
    out, status, why = run_tool_pair(args, [*args, host], port, server_cpu=server_cpu, client_cpu=client_cpu,
                                     timeout=timeout)
    if out is None:
        return None, f"perftest failed: {why}"
    parsed = parse_write_lat(out)
    if status != 0 or parsed is None or "t_typical" not in parsed[0]:
        last = [line for line in out.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return None, f"perftest failed: `{shown} {host}` exited with status {status} ({last[0].strip()})"
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
