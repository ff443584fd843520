"""``backline decoding-server``: CUDA-Q QEC's decoding server, its decoders on Backline placements.

    backline decoding-server --config CFG.yaml [--transport udp] [--port 0] [--host 127.0.0.1]
        [--num-slots 8] [--slot-size 256] [--placement P.json] [--allow-remote] [--timeout 60]
    backline decoding-server replay FILE --config CFG.yaml [--slot-size 256] [--placement P.json]
        [--timeout 5]
    backline decoding-server bench --config CFG.yaml [--rounds 2000] [--decoder ID] [--slot-size 256]
        [--placement P.json] [--json FILE]

The server prints ``QEC_DECODING_SERVER_READY port=<P> transport=udp ...`` when it answers, and
at the end one ``QEC_DECODING_SERVER_RING decoder=<id> dispatched=<n>`` a decoder. Replay exits
1 when a shot's corrections differ from the file's. Errors are one line on stderr, exit status 2
(docs/cudaq-interop.md).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from backline_core.sdk import Parser, read_input_text, run_command

from . import wire

PROG = "backline decoding-server"
#: the largest placement JSON read
MAX_PLACEMENT_BYTES = 1 << 20


def _placement(path: str | None) -> Any:
    if not path:
        return None
    from backline_core import Placement

    return Placement.from_json(read_input_text(path, what="--placement", limit=MAX_PLACEMENT_BYTES))


def _configs(path: str) -> list[Any]:
    from .config import read_config

    return read_config(path)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 1e7:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds from 0 to 1e7")
    return value


def _cmd_serve(args: argparse.Namespace) -> int:
    from .server import DecodingServer

    if args.transport != "udp":
        raise ValueError(f"--transport {args.transport}: Backline's decoding server speaks udp only (CUDA-Q's "
                         "cpu_roce and gpu_roce are not implemented)")
    stop = threading.Event()
    previous = {}
    # a stop signal ends the serving loop at its next poll; the deployments close on the way out
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        server = DecodingServer(_configs(args.config), host=args.host, port=args.port, num_slots=args.num_slots,
                                slot_size=args.slot_size, placement=_placement(args.placement),
                                allow_remote=args.allow_remote)
        with server:
            print(server.ready_line(), flush=True)
            server.serve(stop.is_set, args.timeout or None)
        for line in server.summary_lines():
            print(line, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replay import MAX_PLAYBACK_BYTES, Client, parse_playback, replay, running_server

    pb = parse_playback(read_input_text(args.file, what="the playback file", limit=MAX_PLAYBACK_BYTES), args.file)
    configs = _configs(args.config)
    with running_server(configs, slot_size=args.slot_size, placement=_placement(args.placement)) as server, \
            Client(server.ports(), slot_size=args.slot_size, timeout_s=args.timeout) as client:
        result = replay(pb, configs, client)
    print(result.summary(args.file), flush=True)
    return 1 if result.mismatched else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import measure, report_text

    if args.rounds < 1:
        raise ValueError(f"--rounds {args.rounds}: give at least 1")
    report = measure(_configs(args.config), rounds=args.rounds, slot_size=args.slot_size, decoder_id=args.decoder,
                     placement=_placement(args.placement))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    print(report_text(report), flush=True)
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="CUDA-Q's multi_decoder_config YAML (decoders: [...])")
    p.add_argument("--slot-size", type=int, default=wire.DEFAULT_SLOT_SIZE,
                   help=f"bytes a request or response slot holds, both ends alike (default {wire.DEFAULT_SLOT_SIZE})")
    p.add_argument("--placement", help="a placement JSON with one coprocessor, each decoder's function put on it "
                                       "(default: memcpy, the coprocessor in a thread)")


def serve_parser() -> Parser:
    p = Parser(prog=PROG, description="Serve CUDA-Q QEC's decoding RPC over UDP, each decoder on a Backline "
                                      f"placement ({PROG} replay|bench --help for the others).")
    _common(p)
    p.add_argument("--transport", default="udp", help="udp (the only one)")
    p.add_argument("--port", type=int, default=0, help="UDP port (default 0: a free one a decoder, printed in the "
                                                       "READY line)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the protocol has no authentication)")
    p.add_argument("--num-slots", type=int, default=wire.DEFAULT_NUM_SLOTS,
                   help=f"slots of receive buffer a decoder (default {wire.DEFAULT_NUM_SLOTS})")
    p.add_argument("--timeout", type=_positive_seconds, default=60.0,
                   help="stop after this many seconds, as CUDA-Q's server (default 60; 0: until signalled)")
    p.set_defaults(func=_cmd_serve)
    return p


def replay_parser() -> Parser:
    p = Parser(prog=f"{PROG} replay", description="Send a CUDA-Q playback file through a decoding server on "
                                                  "loopback and compare the corrections (exit 1 on a mismatch).")
    p.add_argument("file", help="a playback file (NUM_DATA, NUM_LOGICAL, SHOT_START, ROUND_START, CORRECTIONS_START)")
    _common(p)
    p.add_argument("--timeout", type=_positive_seconds, default=5.0, help="seconds to wait for a reply (default 5)")
    p.set_defaults(func=_cmd_replay)
    return p


def bench_parser() -> Parser:
    p = Parser(prog=f"{PROG} bench", description="Time a shot's enqueue + get_corrections over UDP loopback "
                                                 "against a bare UDP ping-pong of the same slot size.")
    _common(p)
    p.add_argument("--rounds", type=int, default=2000, help="shots timed (default 2000)")
    p.add_argument("--decoder", type=int, help="the decoder id (default: the config's first)")
    p.add_argument("--json", help="write the report (JSON)")
    p.set_defaults(func=_cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``backline decoding-server ARGS``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["replay"]:
        return run_command(replay_parser(), argv[1:])
    if argv[:1] == ["bench"]:
        return run_command(bench_parser(), argv[1:])
    return run_command(serve_parser(), argv)
