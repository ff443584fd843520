"""The ``backline`` command line.

    backline plugins                      list installed plugins and load errors
    backline bench [options]              round-trip benchmark against the bare floor
    backline coprocessor serve --key K    serve a coprocessor over a transport until signalled
    backline demo ghz [options]           the paper's Listing 3 (needs backline-compiler[frontend])
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
from collections.abc import Sequence

from .errors import BacklineError


def _cmd_plugins(args: argparse.Namespace) -> int:
    from . import plugins

    rows = plugins.listing()
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
        return 0
    if not rows:
        print("no plugins installed")
        return 0
    width = max(len(r.name) for r in rows)
    for kind in ("transport", "decoder", "executor", "pass", "device", "driver"):
        kind_rows = [r for r in rows if r.kind == kind]
        if not kind_rows:
            continue
        print(f"{kind}es:" if kind.endswith("s") else f"{kind}s:")
        for r in kind_rows:
            origin = f"{r.distribution} {r.version}".strip()
            what = f"FAILED TO LOAD: {r.error}" if r.error else r.serves
            print(f"  {r.name:<{width}}  {origin:<36} {what}")
    return 1 if args.strict and any(r.error for r in rows) else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    cfg = bench.BenchConfig(
        transport=args.transport, runs_in=args.runs_in, coprocessor_fn=args.coprocessor_fn,
        rounds=args.rounds, payload_bytes=args.payload_bytes, cadence=args.cadence, gap_ns=args.gap_ns,
        gap_span=args.gap_span, seed=args.seed, controller_cpu=_cpu(args.controller_cpu),
        coprocessor_cpu=_cpu(args.coprocessor_cpu), driver=args.driver, block=args.block, warmup=args.warmup,
        progress=not args.no_progress, code=args.code, error_rate=args.error_rate, decoder_id=args.decoder_id,
        decoder_params=_params(args.decoder_param),
    )
    result = bench.run(cfg, report=bench.stderr_report)
    print(bench.main_report(result, args.json, args.plot))
    return 0 if result.lost == 0 and result.mismatched == 0 else 1


def _params(items: Sequence[str]) -> dict[str, str]:
    from .config import parse_config

    try:
        return parse_config(";".join(items))
    except ValueError as exc:
        raise BacklineError(f"--decoder-param: {exc}") from None


def _cpu(text: str) -> int | None:
    return None if text == "none" else int(text)


def _cmd_serve(args: argparse.Namespace) -> int:
    from .coprocessor_function import CoprocessorFunction, load_import_path
    from .session import Session

    bindings = []
    for spec in args.fn:
        if spec.startswith("@"):  # the spec is in a file (long native contexts)
            try:
                with open(spec[1:]) as fh:
                    spec = fh.read()
            except OSError as exc:
                raise BacklineError(f"--fn {spec}: cannot read the function spec: {exc}") from None
        if spec.startswith("{"):
            try:
                bindings.append(CoprocessorFunction.from_dict(json.loads(spec)))
            except json.JSONDecodeError as exc:
                raise BacklineError(f"--fn: not a JSON CoprocessorFunction description: {exc}") from None
            continue
        name, _, ids = spec.partition("@")
        try:
            decoder_ids = [int(i) for i in ids.split(",")] if ids else None
        except ValueError:
            raise BacklineError(f"--fn {spec!r}: decoder ids after '@' must be integers, e.g. steane@0,1") from None
        bindings.append((load_import_path(name) if ":" in name else name, decoder_ids))
    session = Session.open(args.transport, "coprocessor", args.key, config=args.config, hardware=args.hardware,
                           runs_in="process", functions=bindings)
    try:
        print(f"ready key={args.key} pid={os.getpid()} transport={args.transport}", flush=True)
        _wait_for_stop(args.duration, args.parent_pid)
    finally:
        session.destroy()
    return 0


def _wait_for_stop(duration: float | None, parent_pid: int | None) -> None:
    """Block until SIGTERM, SIGINT or SIGHUP, ``duration`` seconds, or the death of ``parent_pid``."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # the wakeup fd does the waking
    watched = [wake_r]
    parent_fd = None
    if parent_pid is not None:
        try:
            parent_fd = os.pidfd_open(parent_pid)  # readable once the parent has exited
        except ProcessLookupError:
            return
        watched.append(parent_fd)
        if os.getppid() != parent_pid:  # it died before the pidfd was opened
            return
    try:
        select.select(watched, [], [], duration)
    finally:
        signal.set_wakeup_fd(-1)
        for fd in (wake_r, wake_w, parent_fd):
            if fd is not None:
                os.close(fd)


def _cmd_demo(args: argparse.Namespace) -> int:
    import importlib

    try:
        demos = importlib.import_module("backline_compiler.demos")
    except ImportError as exc:
        print(f"backline demo: the demos live in backline-compiler ({exc}); install it with its frontend: "
              "pip install 'backline-compiler[frontend]'", file=sys.stderr)
        return 2
    module = demos.DEMOS.get(args.name)
    if module is None:
        print(f"backline demo: unknown demo {args.name!r}; available: {', '.join(demos.DEMOS)}", file=sys.stderr)
        return 2
    return importlib.import_module(f"backline_compiler.demos.{module}").main(args.demo_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backline", description="Backline: real-time QEC rounds between a controller and coprocessors.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="list installed plugins, what they serve, and load errors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--strict", action="store_true", help="exit 1 if any plugin failed to load")
    p.set_defaults(func=_cmd_plugins)

    b = sub.add_parser("bench", help="round-trip benchmark; prints framework/floor ratios",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    b.add_argument("--transport", default="memcpy")
    b.add_argument("--runs-in", default=None, choices=("controller-thread", "thread", "process"),
                   help="where the coprocessor runs (default: the transport's first choice)")
    b.add_argument("--coprocessor-fn", default="echo", help="decoder plugin name; every reply is checked")
    b.add_argument("--rounds", type=int, default=1_000_000)
    b.add_argument("--payload-bytes", type=int, default=8)
    b.add_argument("--cadence", default="b2b", choices=("b2b", "random-delayed"))
    b.add_argument("--gap-ns", type=int, default=2_000, help="random-delayed: base gap between rounds")
    b.add_argument("--gap-span", type=lambda s: int(s, 0), default=0x3FFF,
                   help="random-delayed: gap += LFSR & span (ns)")
    b.add_argument("--seed", type=int, default=1, help="LFSR seed (nonzero)")
    b.add_argument("--controller-cpu", default="0", help="CPU for the issuing thread, or none")
    b.add_argument("--coprocessor-cpu", default="1", help="CPU for the coprocessor and the floor responder, or none")
    b.add_argument("--driver", default="native",
                   help="native, python, or a driver plugin such as compiled (backline-compiler)")
    b.add_argument("--code", metavar="NPZ", help="CSS code (Hx, Hz) for a decoder such as bposd; payloads become "
                   "syndromes of random errors and --payload-bytes follows the code")
    b.add_argument("--error-rate", type=float, default=0.05, help="with --code: independent bit-flip probability")
    b.add_argument("--decoder-id", type=int, default=0, help="decoder_id of every round (with --code: 0 = Hx, 1 = Hz)")
    b.add_argument("--decoder-param", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to the decoder plugin's build() (repeatable)")
    b.add_argument("--block", type=int, default=50_000, help="rounds per interleaved block")
    b.add_argument("--warmup", type=int, default=16, help="unrecorded rounds at the start of each block")
    b.add_argument("--json", metavar="FILE", help="write the statistics as JSON")
    b.add_argument("--plot", metavar="FILE.png", help="draw the time series and CCDF")
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(func=_cmd_bench)

    c = sub.add_parser("coprocessor", help="coprocessor processes")
    csub = c.add_subparsers(dest="coprocessor_command", required=True)
    s = csub.add_parser("serve", help="serve a coprocessor session until SIGTERM/SIGINT")
    s.add_argument("--key", required=True, help="session key the controller pairs on")
    s.add_argument("--fn", action="append", required=True,
                   help="decoder name or module:function, optionally @id,id to choose the decoder_ids "
                        "(default: those it declares), or a native CoprocessorFunction as JSON, or @FILE "
                        "holding either; repeatable")
    s.add_argument("--transport", default="memcpy")
    s.add_argument("--hardware", default="cpu")
    s.add_argument("--config", default="", help="the transport's configuration, k=v;k=v")
    s.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    s.add_argument("--parent-pid", type=int, default=None,
                   help="exit when this process exits (deploy and bench pass their own pid)")
    s.set_defaults(func=_cmd_serve)

    d = sub.add_parser("demo", help="run a demonstration (backline demo ghz --help)", add_help=False)
    d.add_argument("name", help="the demo: ghz")
    d.add_argument("demo_args", nargs=argparse.REMAINDER, help="the demo's own options")
    d.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BacklineError as exc:
        print(f"backline: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
