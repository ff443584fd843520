"""``backline rdma``: the rdma transport's own commands.

    backline rdma devices [--json]    the verbs devices, their ports, states, MTUs and GIDs
    backline rdma bench-peer --host H --secret-file F
                                       serve one `backline bench --peer H:PORT` run from another host:
                                       its coprocessor and its floor responder, each on its own CPU; the
                                       bench gives the same secret (--transport-arg secret_file=F)

Exit status: 0 on success; 1 when there is no device; 2 for any error, reported as one line
on stderr, ``backline: error: ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from backline_core import BacklineError
from backline_core.sdk import Parser, cpu_or_none, run_command

NO_DEVICES = "no RDMA devices: libibverbs finds none; for Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE"


def _cmd_devices(args: argparse.Namespace) -> int:
    from .devices import format_devices, list_devices

    devices = list_devices()
    if args.json:
        print(json.dumps([d.to_json() for d in devices], indent=2))
    elif devices:
        print(format_devices(devices))
    if not devices:
        print(NO_DEVICES, file=sys.stderr)
        return 1
    return 0


DEFAULT_PEER_PORT = 18515


def _peer_config(args: argparse.Namespace) -> str:
    """The coprocessor's configuration: the Endpoint's host and port, and the transport's own keys given."""
    pairs = [("host", args.host), ("port", args.port), ("device", args.device), ("ib_port", args.ib_port),
             ("gid_index", args.gid_index), ("cpu", args.cpu), ("rt_priority", args.rt_priority),
             ("timeout_ms", args.timeout_ms), ("secret_file", args.secret_file)]
    return ";".join(f"{key}={value}" for key, value in pairs if value not in (None, ""))


def _check_peer_args(args: argparse.Namespace) -> None:
    from .floor import FLOOR_PORT_OFFSET

    if not 0 < args.port <= 65535 - FLOOR_PORT_OFFSET:
        raise BacklineError(f"--port {args.port}: give a TCP port from 1 to {65535 - FLOOR_PORT_OFFSET} (the floor "
                            f"responder takes the port after it)")
    allowed = os.sched_getaffinity(0)
    for option, cpu in (("--cpu", args.cpu), ("--floor-cpu", args.floor_cpu)):
        if cpu is not None and cpu not in allowed:
            raise BacklineError(f"{option} {cpu}: not a CPU this process may run on (it may use "
                                f"{', '.join(map(str, sorted(allowed)))})")
    if args.duration is not None and not (0 < args.duration < float("inf")):
        raise BacklineError(f"--duration {args.duration}: give a number of seconds > 0, or leave it out")
    if args.cpu is not None and args.cpu == args.floor_cpu:
        raise BacklineError(f"--cpu and --floor-cpu are both {args.cpu}: the coprocessor and the floor responder both "
                            "spin while they wait, so nothing pauses either; give them different CPUs")
    # The controller on the other host must prove it holds the same secret: no default can be shared.
    if not args.secret_file:
        raise BacklineError("bench-peer needs --secret-file PATH: make one with `backline secret new PATH`, copy it "
                            "(mode 0600) to the controller's host and run the bench there with --transport-arg "
                            "secret_file=PATH")
    from backline_core.sdk import read_secret_file

    args.secret_file = os.path.abspath(args.secret_file)
    read_secret_file(args.secret_file)  # a missing or unsafe file is an error now, not in the coprocessor's log


def _cmd_bench_peer(args: argparse.Namespace) -> int:
    from backline_core.sdk import PEER_KEY, CoprocessorProcess, Responder

    from .floor import FLOOR_PORT_OFFSET, READY_TIMEOUT_S, StopWatch
    from .floor import responder as floor_responder

    _check_peer_args(args)
    stop = StopWatch(None)  # armed first: a signal during start-up ends it, leaving nothing running
    responder: Responder | None = None
    coprocessor: CoprocessorProcess | None = None
    from backline_core.sdk import lib

    # The responder waits for the bench as long as this peer serves (at most the ABI's longest timeout).
    longest = lib.BL_MAX_TIMEOUT_MS / 1000.0
    wait_ms = max(1, int(min(longest if args.duration is None else args.duration, longest) * 1000))
    try:
        floor_port = args.port + FLOOR_PORT_OFFSET
        responder = floor_responder(args.host, floor_port, device=args.device, ib_port=args.ib_port or 0,
                                    gid_index=-1 if args.gid_index is None else args.gid_index, cpu=args.floor_cpu,
                                    timeout_ms=args.timeout_ms or 1000, wait_ms=wait_ms)
        coprocessor = CoprocessorProcess("rdma", PEER_KEY, [args.fn], _peer_config(args),
                                         ready_timeout=READY_TIMEOUT_S)
        print(f"ready peer={args.host}:{args.port} coprocessor={args.fn} cpu={args.cpu} floor_port={floor_port} "
              f"floor_cpu={args.floor_cpu}; from the other host: backline bench --transport rdma --peer "
              f"{args.host}:{args.port} --coprocessor-fn {args.fn} --transport-arg secret_file=PATH (PATH: a copy "
              f"of {args.secret_file})", flush=True)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while True:
            # The bench closes its floor last: the responder's exit is the end of the run.
            status = responder.wait(0)
            if status is not None:
                if status:
                    raise responder._error(f"exited with status {status}")
                return 0
            if coprocessor.proc is not None and coprocessor.proc.poll() is not None:
                tail = " / ".join(line for _, line in coprocessor.output_tail()[-3:]) or "it said nothing"
                raise BacklineError(f"the coprocessor exited with status {coprocessor.proc.returncode}: {tail}")
            if stop.wait(0.2) or (deadline is not None and time.monotonic() > deadline):
                return 0
    finally:
        if coprocessor is not None:
            coprocessor.terminate()
        if responder is not None:
            responder.close()
        stop.close()


def build_parser() -> Parser:
    """The parser of ``backline rdma``."""
    parser = Parser(prog="backline rdma", description="The rdma transport (RoCE v2 over libibverbs): its devices.")
    sub = parser.add_subparsers(dest="rdma_command", metavar="COMMAND", required=True)
    d = sub.add_parser("devices", help="list the RDMA devices, their ports and states, and each port's GIDs with "
                                       "their types (exit 1 if there is none)")
    d.add_argument("--json", action="store_true", help="machine-readable output: a list of devices")
    d.set_defaults(func=_cmd_devices)
    p = sub.add_parser("bench-peer", help="serve one `backline bench --transport rdma --peer HOST:PORT` run from "
                                          "another host: a coprocessor on PORT and the floor's responder on PORT+1")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on, one the other host reaches (default: "
                   "loopback, which only this host reaches)")
    p.add_argument("--port", type=int, default=DEFAULT_PEER_PORT, help="the coprocessor's TCP port; the floor "
                   "responder takes the next one")
    p.add_argument("--fn", default="echo", help="the coprocessor function (the bench's --coprocessor-fn)")
    p.add_argument("--cpu", type=cpu_or_none, default="1", help="CPU of the coprocessor's poller, or none")
    p.add_argument("--floor-cpu", type=cpu_or_none, default="0", help="CPU of the floor responder (not --cpu), or none")
    p.add_argument("--device", default="", help="RDMA device (default: the first with an active port)")
    p.add_argument("--ib-port", type=int, default=None, help="port of the device (default: its first active port)")
    p.add_argument("--gid-index", type=int, default=None, help="GID index (default: the first RoCE v2 GID)")
    p.add_argument("--rt-priority", type=int, default=None, help="SCHED_FIFO priority of the coprocessor's poller, "
                   "best effort")
    p.add_argument("--timeout-ms", type=int, default=None, help="deadline of a blocked WRITE, both sides")
    p.add_argument("--secret-file", default=None, metavar="PATH", help="the secret (a 0600 file of this user, "
                   "`backline secret new PATH` makes one) that the bench's controller must hold too: give it a copy, "
                   "--transport-arg secret_file=PATH (required)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds even if no bench came")
    p.set_defaults(func=_cmd_bench_peer)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``backline rdma ARGV`` and return its exit status."""
    return run_command(build_parser(), sys.argv[1:] if argv is None else argv)
