"""``backline qec``: QEC workloads.

    backline qec stream CIRCUIT.stim --decoder NAME [--decoder-param K=V]...
        [--shots N --seed S | --detectors FILE.b8 [--observables FILE.b8]]
        [--transport T --runs-in R [--transport-arg K=V]... | --placement FILE.json]
        [--window W --commit C] [--cycle-us T]
        [--parallel-windows [--workers N] [--round-timeout-ms MS]]
        [--patches K [--workers N] [--admission on|off] [--round-timeout-ms MS]]
        [--escalate-to NAME [--escalate-when not-converged|syndrome-weight>K] [--escalate-placement FILE.json]
         [--escalate-param K=V]...]
        [--predictions FILE.b8] [--json FILE] [--plot FILE.png]
    backline qec export-config CIRCUIT.stim|DEM.dem --decoder NAME [--decoder-param K=V]... [--out FILE]

Each round of each shot goes to the placement's coprocessor once (docs/streaming.md); a short
summary goes to stdout. Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from backline_core import BacklineError, InvalidArgumentError
from backline_core.sdk import Parser, cpu_or_none, read_input_file, read_input_text, run_command

#: the largest circuit, placement or b8 file read
MAX_CIRCUIT_BYTES = 64 << 20
MAX_B8_BYTES = 1 << 30


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def read_circuit(path: str) -> Any:
    import stim

    text = read_input_text(path, what="the circuit", limit=MAX_CIRCUIT_BYTES)
    try:
        return stim.Circuit(text)
    except ValueError as exc:
        raise BacklineError(f"{path}: not a stim circuit: {str(exc).splitlines()[0]}") from None


def read_b8(path: str, width: int, what: str) -> np.ndarray:
    """stim's b8 shot data (each shot ``ceil(width / 8)`` bytes, bit-packed LSB first) as (shots, width) 0/1."""
    data = read_input_file(path, what=what, limit=MAX_B8_BYTES)
    per_shot = (width + 7) // 8
    if per_shot == 0 or len(data) % per_shot:
        raise BacklineError(f"{what} {path}: {len(data)} bytes is not a whole number of shots of {width} bits "
                            f"({per_shot} bytes each): is it b8 data of this circuit?")
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, per_shot)
    return np.unpackbits(rows, axis=1, count=width, bitorder="little")


def write_b8(path: str, bits: np.ndarray) -> None:
    with open(path, "wb") as fh:
        fh.write(np.packbits(np.asarray(bits, dtype=np.uint8), axis=1, bitorder="little").tobytes())


def summary_text(report: dict[str, Any]) -> str:
    lat, react = report["latency_ns"], report["reaction_ns"]
    ler = "n/a (no observables given)" if report["ler"] is None else (
        f"{report['ler']:.4g} ({report['logical_errors']} of {report['shots']}; 95% CI "
        f"{report['ler_ci95'][0]:.3g}-{report['ler_ci95'][1]:.3g})")
    lines = [
        f"decoder {report['decoder']['name']} over {report['placement']['transport']} "
        f"({report['placement']['runs_in']}): {report['shots']} shots x {report['rounds']} rounds, "
        f"{report['windows_per_shot']} windows a shot",
        f"logical error rate {ler}",
        f"window latency p50 {lat['p50'] / 1e3:.3f} us, p99 {lat['p99'] / 1e3:.3f} us, max {lat['max'] / 1e3:.3f} us",
        f"reaction time p50 {react['p50'] / 1e3:.3f} us, p99 {react['p99'] / 1e3:.3f} us",
        f"sustainable cycle {report['sustainable_cycle_ns'] / 1e3:.3f} us; deadline misses "
        f"{report['deadline_misses']}; max pending rounds {report['backlog']['max_pending_rounds']}",
    ]
    if "framework_overhead_ns" in report:
        lines.append(f"framework per window {report['framework_overhead_ns']['p50'] / 1e3:.3f} us over the decoder "
                     f"in process ({report['reference_latency_ns']['p50'] / 1e3:.3f} us)")
    return "\n".join(lines)


def parallel_summary_text(report: dict[str, Any]) -> str:
    lat = report["latency_ns"]
    ler = "n/a (no observables given)" if report["ler"] is None else (
        f"{report['ler']:.4g} ({report['logical_errors']} of {report['shots']}; 95% CI "
        f"{report['ler_ci95'][0]:.3g}-{report['ler_ci95'][1]:.3g})")
    layers = [w["layer"] for w in report["parallel_windows"]]
    per = ", ".join(f"{k} {v}" for k, v in report["windows_per_worker"].items())
    lines = [
        f"decoder {report['decoder']['name']} in parallel windows on {report['workers']} worker(s) over "
        f"{report['placement']['transport']} ({report['placement']['runs_in']}): {report['shots']} shots x "
        f"{report['rounds']} rounds, {layers.count('A')} layer-A and {layers.count('B')} layer-B windows a shot",
        f"logical error rate {ler}",
        f"{report['windows_per_s']:.0f} windows/s ({per}); window latency p50 {lat['p50'] / 1e3:.3f} us, "
        f"p99 {lat['p99'] / 1e3:.3f} us",
        f"worker failures {len(report['worker_failures'])}; deadline misses {report['deadline_misses']}",
    ]
    return "\n".join(lines)


def pool_summary_text(report: dict[str, Any]) -> str:
    lat, resp = report["latency_ns"], report["response_ns"]
    per = ", ".join("n/a" if p["ler"] is None else f"{p['ler']:.4g}" for p in report["per_patch"])
    cycle = "every round at once (no deadlines)" if not report["cycle_ns"] else f"a round every {report['cycle_ns'] / 1e3:g} us"
    lines = [
        f"decoder pool: {report['patches']} patches x {report['shots']} shots x {report['rounds']} rounds, "
        f"{report['windows_per_shot']} windows a shot, on {report['workers']} worker(s) over "
        f"{report['placement']['transport']} ({report['placement']['runs_in']}); {cycle}; admission control "
        f"{'on' if report['admission'] else 'off'}",
        f"logical error rate per patch: {per}",
        f"window latency p50 {lat['p50'] / 1e3:.3f} us, p99 {lat['p99'] / 1e3:.3f} us; response (ready to "
        f"committed) p50 {resp['p50'] / 1e3:.3f} us, p99 {resp['p99'] / 1e3:.3f} us",
        f"deadline misses {report['deadline_misses']} of {report['windows']} windows (rejected at admission "
        f"{report['rejected_at_admission']}, completed late {report['late_completions']}); max queue "
        f"{report['max_queue']}, max backlog {report['max_backlog']} windows; worker failures "
        f"{len(report['worker_failures'])}",
    ]
    if report["sustainable_cycle_ns"] is not None:
        lines.append(f"sustainable cycle {report['sustainable_cycle_ns'] / 1e3:.3f} us (dispatch time per round)")
    return "\n".join(lines)


def tiered_summary_text(report: dict[str, Any]) -> str:
    ler = "n/a (no observables given)" if report["ler"] is None else (
        f"{report['ler']:.4g} ({report['logical_errors']} of {report['shots']}; 95% CI "
        f"{report['ler_ci95'][0]:.3g}-{report['ler_ci95'][1]:.3g})")
    lines = [f"tiered decoding: {report['shots']} shots x {report['rounds']} rounds, {report['windows_per_shot']} "
             f"windows a shot; escalated {report['escalated']:.3f} of the windows ({report['escalate_when']})",
             f"logical error rate {ler}"]
    for name, tier in report["tiers"].items():
        lat, where = tier["latency_ns"], tier["placement"]
        lines.append(f"{name} {tier['decoder']['name']} over {where['transport']} ({where['runs_in']}): "
                     f"{tier['windows']} windows, latency p50 {lat['p50'] / 1e3:.3f} us, p99 {lat['p99'] / 1e3:.3f} us")
    return "\n".join(lines)


def plot(result: Any, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BacklineError("--plot needs matplotlib: pip install 'backline-core[plot]'") from None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    lat = np.sort(result.window_latency_ns.ravel()) / 1e3
    axes[0].loglog(lat, 1.0 - np.arange(len(lat)) / len(lat))
    axes[0].set(xlabel="window latency (us)", ylabel="P(latency > x)", title="latency CCDF")
    if result.cycle_ns:
        pending = np.floor(result.lag_ns.ravel() / result.cycle_ns) + 1
        axes[1].plot(pending)
        axes[1].set(xlabel="round sent", ylabel="rounds pending", title=f"backlog at {result.cycle_ns / 1e3:g} us cycle")
    else:
        axes[1].text(0.5, 0.5, "no pacing (--cycle-us 0)", ha="center", va="center")
        axes[1].set(title="backlog")
    t, p = zip(*result.ler_at_deadline())
    axes[2].semilogx(np.array(t) / 1e3, p)
    axes[2].set(xlabel="deadline t (us)", ylabel="P(reaction > t or logical error)", title="LER(t)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _write_outputs(args: argparse.Namespace, predictions: np.ndarray, report: dict[str, Any]) -> None:
    """The stream's --predictions (b8) and --json report, where they are asked for."""
    if args.predictions:
        write_b8(args.predictions, predictions)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


def _cmd_stream(args: argparse.Namespace) -> int:
    from backline_core import Placement

    from .stream import stream

    circuit = read_circuit(args.circuit)
    params = dict(args.decoder_param)
    placement = None
    if args.placement:
        if args.transport_arg or args.transport_given or args.runs_in_given:
            raise InvalidArgumentError("--placement names the transport and where the coprocessor runs; leave out "
                                       "--transport, --runs-in and --transport-arg")
        placement = Placement.from_json(read_input_text(args.placement, what="--placement",
                                                        limit=MAX_CIRCUIT_BYTES))
    detectors = observables = None
    if args.detectors:
        detectors = read_b8(args.detectors, circuit.num_detectors, "--detectors")
        if args.observables:
            observables = read_b8(args.observables, circuit.num_observables, "--observables")
            if len(observables) != len(detectors):
                raise InvalidArgumentError(f"--observables holds {len(observables)} shots but --detectors "
                                           f"{len(detectors)}")
    elif args.observables:
        raise InvalidArgumentError("--observables goes with --detectors (sampled shots carry their own)")
    pool = args.patches is not None
    if args.admission is not None and not pool:
        raise InvalidArgumentError("--admission goes with --patches K (the decoder pool)")
    if pool:
        if args.patches < 1:
            raise InvalidArgumentError(f"--patches {args.patches}: give at least 1 patch")
        if args.workers is not None and args.workers < 1:
            raise InvalidArgumentError(f"--workers {args.workers}: give at least 1 worker")
        if args.parallel_windows or args.escalate_to is not None:
            raise InvalidArgumentError("--patches is not supported with --parallel-windows or --escalate-to: the pool "
                                       "decodes each patch's sliding windows in order")
        for given, what in ((args.plot, "--plot"), (args.controller_cpu is not None, "--controller-cpu"),
                            (args.coprocessor_cpu is not None, "--coprocessor-cpu")):
            if given:
                raise InvalidArgumentError(f"{what} is not supported with --patches (its report is the JSON)")
    if not args.parallel_windows and not pool and args.workers is not None:
        raise InvalidArgumentError("--workers and --round-timeout-ms go with --parallel-windows or --patches")
    if not args.parallel_windows and not pool and args.escalate_to is None and args.round_timeout_ms is not None:
        raise InvalidArgumentError("--workers and --round-timeout-ms go with --parallel-windows or --patches "
                                   "(--round-timeout-ms also with --escalate-to)")
    escalate_params = dict(args.escalate_param) if args.escalate_param else None
    escalate_placement = None
    if args.escalate_to is None:
        if args.escalate_when is not None or args.escalate_placement or args.escalate_param:
            raise InvalidArgumentError("--escalate-when, --escalate-placement and --escalate-param go with "
                                       "--escalate-to NAME (the auxiliary decoder)")
    else:
        if args.plot:
            raise InvalidArgumentError("--plot is not drawn for --escalate-to (its report is the JSON)")
        if args.escalate_placement:
            escalate_placement = Placement.from_json(read_input_text(args.escalate_placement,
                                                                     what="--escalate-placement",
                                                                     limit=MAX_CIRCUIT_BYTES))
    if args.parallel_windows:
        if args.workers is not None and args.workers < 1:
            raise InvalidArgumentError(f"--workers {args.workers}: give at least 1 worker")
        if args.plot:
            raise InvalidArgumentError("--plot is not drawn for --parallel-windows (its report is the JSON)")
        if args.window is None or args.commit is None:
            raise InvalidArgumentError("--parallel-windows needs --window W --commit C: layer-A windows of W rounds "
                                       "commit their middle C")
    result = stream(circuit, args.decoder, shots=args.shots, seed=args.seed, detectors=detectors,
                    observables=observables, placement=placement, transport=args.transport,
                    runs_in=args.runs_in if args.runs_in_given else None,
                    transport_args=dict(args.transport_arg), window=args.window, commit=args.commit,
                    cycle_us=args.cycle_us, controller_cpu=args.controller_cpu,
                    coprocessor_cpu=args.coprocessor_cpu, parallel_windows=args.parallel_windows,
                    workers=args.workers, round_timeout_ms=args.round_timeout_ms, escalate_to=args.escalate_to,
                    escalate_when=args.escalate_when, escalate_placement=escalate_placement,
                    escalate_params=escalate_params, patches=args.patches,
                    admission=None if args.admission is None else args.admission == "on", **params)
    report = result.to_json()
    if pool:  # patch 0's shots, then patch 1's, ...: the order of --detectors
        _write_outputs(args, result.predictions.reshape(-1, result.predictions.shape[-1]), report)
        print(pool_summary_text(report))
        return 0
    if args.escalate_to is not None or args.parallel_windows:
        _write_outputs(args, result.predictions, report)
        print((tiered_summary_text if args.escalate_to is not None else parallel_summary_text)(report))
        return 0
    from .stream import MIN_PACED_CYCLE_NS

    if 0 < report["cycle_ns"] < MIN_PACED_CYCLE_NS:
        print(f"backline qec stream: warning: a {args.cycle_us:g} us cycle is shorter than busy-wait pacing holds "
              f"(about {MIN_PACED_CYCLE_NS} ns); the rounds came every {report['achieved_cycle_ns'] / 1e3:.3f} us",
              file=sys.stderr)
    _write_outputs(args, result.predictions, report)
    if args.plot:
        plot(result, args.plot)
    print(summary_text(report))
    return 0


def _cmd_export_config(args: argparse.Namespace) -> int:
    import stim

    from .cudaq.config import export_config

    if args.source.endswith(".dem"):
        text = read_input_text(args.source, what="the DEM", limit=MAX_CIRCUIT_BYTES)
        try:
            source: Any = stim.DetectorErrorModel(text)
        except ValueError as exc:
            raise BacklineError(f"{args.source}: not a stim DEM: {str(exc).splitlines()[0]}") from None
    else:
        source = read_circuit(args.source)
    # the decoder's schema reads the parameters' text (export_config checks them)
    text = export_config(source, args.decoder, params=dict(args.decoder_param), decoder_id=args.decoder_id)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


class _Given(argparse.Action):
    """Stores the value and notes that the option was given (a default is not a choice)."""

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, option: Any = None) -> None:
        setattr(ns, self.dest, value)
        setattr(ns, f"{self.dest}_given", True)


def parser() -> Parser:
    p = Parser(prog="backline qec", description="QEC workloads over a placement.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    s = sub.add_parser("stream", help="decode a circuit's shots round by round on a coprocessor")
    s.add_argument("circuit", help="a stim circuit file (.stim) whose detectors carry their round as last coordinate")
    s.add_argument("--decoder", required=True, help="an installed decoder that builds from a DEM (backline plugins)")
    s.add_argument("--decoder-param", type=_key_value, action="append", default=[], metavar="K=V")
    s.add_argument("--shots", type=int, default=1000, help="shots sampled with stim (default 1000)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--detectors", help="detection events in stim's b8 format instead of sampling")
    s.add_argument("--observables", help="their observable flips (b8), for the logical error rate")
    s.add_argument("--transport", default="memcpy", action=_Given)
    s.add_argument("--runs-in", default="thread", action=_Given)
    s.add_argument("--transport-arg", type=_key_value, action="append", default=[], metavar="K=V")
    s.add_argument("--placement", help="a placement JSON (Placement.to_json) with one coprocessor (with "
                                       "--parallel-windows: one per worker)")
    s.add_argument("--window", type=int, help="rounds a window decodes (default: the whole shot)")
    s.add_argument("--commit", type=int, help="rounds a window commits (with --window)")
    s.add_argument("--cycle-us", type=float, default=0.0, help="a round every T us (default 0: as fast as possible)")
    s.add_argument("--controller-cpu", type=cpu_or_none, default=None,
                   help="pin the thread that drives the rounds to this CPU (default: none)")
    s.add_argument("--coprocessor-cpu", type=cpu_or_none, default=None,
                   help="pin the coprocessor's poller to this CPU, a key of the transport's (default: none)")
    s.add_argument("--parallel-windows", action="store_true",
                   help="decode layer-A windows (W rounds committing the middle C) concurrently on several workers, "
                        "then the layer-B windows between them")
    s.add_argument("--workers", type=int, default=None,
                   help="with --parallel-windows or --patches: coprocessors started as workers (default 2, in "
                        "processes; with --placement, its coprocessors)")
    s.add_argument("--patches", type=int, default=None, metavar="K",
                   help="a decoder pool with deadlines: K independent patches (K blocks of the shots) streamed "
                        "together, their sliding windows decoded on the workers earliest deadline first")
    s.add_argument("--admission", choices=("on", "off"), default=None,
                   help="with --patches: admission control (default on): a window that cannot meet its deadline "
                        "is counted as a miss at admission and decoded after the others")
    s.add_argument("--round-timeout-ms", type=int, default=None,
                   help="with --parallel-windows or --patches: a window's deadline on a worker (default the "
                        "sessions' 1000 ms); "
                        "a worker past it is retired and the window re-sent")
    s.add_argument("--escalate-to", metavar="NAME",
                   help="tiered decoding: the auxiliary decoder, which answers the windows --escalate-when flags on "
                        "its own coprocessor (the primary, --decoder, answers the others)")
    s.add_argument("--escalate-when", metavar="CRITERION",
                   help="with --escalate-to: not-converged (default: the primary decodes every window, and one "
                        "its estimate does not explain goes on to the auxiliary) or syndrome-weight>K (a window of "
                        "more than K detection events; K = -1: every window)")
    s.add_argument("--escalate-placement", metavar="FILE.json",
                   help="with --escalate-to: a placement JSON with one coprocessor for the auxiliary decoder "
                        "(default: memcpy, in a process)")
    s.add_argument("--escalate-param", type=_key_value, action="append", default=[], metavar="K=V",
                   help="with --escalate-to: a parameter of the auxiliary decoder")
    s.add_argument("--predictions", help="write the predicted observable flips (b8)")
    s.add_argument("--json", help="write the report (JSON)")
    s.add_argument("--plot", help="write latency CCDF, backlog and LER(t) (PNG)")
    s.set_defaults(func=_cmd_stream, transport_given=False, runs_in_given=False)
    e = sub.add_parser("export-config", help="write a CUDA-Q QEC decoder config (YAML) of a circuit's or DEM's decoder")
    e.add_argument("source", help="a stim circuit (.stim) or detector error model (.dem)")
    e.add_argument("--decoder", required=True, help="lut, pymatching, bposd or bp")
    e.add_argument("--decoder-param", type=_key_value, action="append", default=[], metavar="K=V")
    e.add_argument("--decoder-id", type=int, default=0, help="its id in the config (default 0)")
    e.add_argument("--out", help="write the YAML here (default: stdout)")
    e.set_defaults(func=_cmd_export_config)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``backline qec ARGS``."""
    return run_command(parser(), sys.argv[1:] if argv is None else argv)
