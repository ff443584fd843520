"""``backline rdma``: the rdma transport's own commands.

    backline rdma devices [--json]    the verbs devices, their ports, states, MTUs and GIDs

Exit status: 0 on success; 1 when there is no device; 2 for any error, reported as one line
on stderr, ``backline: error: ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from backline_core.cli import Parser, one_line
from backline_core.errors import BacklineError

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


def build_parser() -> Parser:
    """The parser of ``backline rdma``."""
    parser = Parser(prog="backline rdma", description="The rdma transport (RoCE v2 over libibverbs): its devices.")
    sub = parser.add_subparsers(dest="rdma_command", metavar="COMMAND", required=True)
    d = sub.add_parser("devices", help="list the RDMA devices, their ports and states, and each port's GIDs with "
                                       "their types (exit 1 if there is none)")
    d.add_argument("--json", action="store_true", help="machine-readable output: a list of devices")
    d.set_defaults(func=_cmd_devices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``backline rdma ARGV`` and return its exit status."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # --help (0), or a usage error already reported in one line (2)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    try:
        return int(args.func(args))
    except (BacklineError, OSError) as exc:
        print(f"backline: error: {one_line(str(exc) or type(exc).__name__)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
