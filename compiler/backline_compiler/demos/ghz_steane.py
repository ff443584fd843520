"""The paper's Listing 3: a logical three-qubit GHZ state in the Steane code, decoded on a coprocessor.

``qec_code="steane"`` turns the three logical gates into encoded circuits with a correction
round (X and Z stabilizers, one decode each) after every gate, and each decode into a
message to the coprocessor over the ``memcpy`` transport. Run it as
``backline demo ghz`` or ``python examples/ghz_steane.py``:

1. Listing 3 as written (``null.qubit``, 10 shots): the samples, compile time, time per shot
   and the RTT of every decode round.
2. The same QNode on ``default.clifford`` (a stim simulation) with depolarizing noise at
   ``--noise``: the logical error rate (shots whose three logical outcomes differ) with the
   decoders' corrections applied and with them disabled, and the difference with its 95%
   confidence interval.
3. Only the placement changes: the decoded rate again with the ``bposd`` decoder
   (BP+OSD from the Steane matrices), with the ``steane`` table in its own process, and
   with no coprocessor at all (the same encoded program, decodes compiled in locally).

``--executor local`` changes only the placement: the decoder runs in an executor started
on this machine (``Coprocessor(..., executor=Executor.local())``, from the
``backline-executor-orc`` plugin), which the compiled program ships its code to. The
samples are the same as in process, seed for seed; ``--compare`` runs part 2 both ways and
prints rounds per second and the RTT median and P99 of each.

``--transport rdma`` changes only the placement too: the decoder runs in its own process and
the rounds cross RoCE v2 (``backline-transport-rdma``; it needs an RDMA device, such as the
Soft-RoCE device of ``plugins/transport-rdma/guest/run-in-guest``), its endpoint on ``--host``
and a free port. ``--compare`` then runs part 2 over memcpy too and checks the samples match.
``--transport ucx`` does the same over UCX active messages (``backline-transport-ucx``).

``--extraction flag`` runs the same QNode with fault-tolerant extraction (``encode-steane``'s
flagged checks, each shot decoded once over its detectors): the coprocessor runs the ``lut``
decoder (depth 2) built from the compiled program's own detector error model; part 3 then runs
it in its own process and BP+OSD from the same model (there is no decode compiled into the
controller for it). ``--json FILE`` writes part 2's figures (``extraction``, ``noise``,
``shots``, ``ler_corrected``, ``ler_uncorrected``, each with its 95 % Wilson interval as
``*_ci95``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pennylane as qml

from backline_compiler import Backline, qjit
from backline_core import Controller, Coprocessor, CoprocessorFunction, Endpoint
from backline_core._errors import PluginError
from backline_core.sdk import free_port, host_local_name, wilson

#: the coprocessor's name, this process's own (memcpy finds a coprocessor by its name on the host, and two demos
#: may run at once); its round trips are reported under it
DECODER_NODE = host_local_name("steane-decoder")
#: Spin this long (µs) between rounds before sleeping: the simulator takes tens of µs per
#: gate, and a sleeping coprocessor costs a wake-up on the next round.
IDLE_SPIN_US = 5000


def ghz(dev: Backline, shots: int) -> Any:
    """Listing 3's QNode on ``dev``, compiled."""

    @qjit
    @qml.set_shots(shots)
    @qml.qnode(dev, mcm_method="one-shot")
    def circuit():
        qml.Hadamard(0)
        qml.CNOT([0, 1])
        qml.CNOT([1, 2])
        return qml.sample([qml.measure(0), qml.measure(1), qml.measure(2)])

    return circuit


def steane_bposd() -> CoprocessorFunction:
    """BP+OSD built from the Steane code's matrices (min-sum at scaling 1.0, where it equals
    the lookup table on every syndrome; see docs/decoder-bpod.md)."""
    from backline_decoder_bpod import css_bp_decoder

    from backline_compiler.passes.encode_steane import H

    return css_bp_decoder(np.array(H), np.array(H), ms_scaling_factor=1.0)


def local_executor() -> Any:
    """An executor on this machine (``backline_executor_orc.handle.Executor.local()``); close it when done."""
    try:
        from backline_executor_orc.handle import Executor
    except ImportError as exc:
        raise PluginError(f"an executor needs the backline-executor-orc plugin, which is not installed ({exc}); "
                          "install it (pip install -e plugins/executor-orc in the repository)") from None
    return Executor.local()


#: extraction -> the decoder the demo's coprocessor runs and its parameters (flag: built from the program's model)
DECODERS: dict[str, tuple[str, dict[str, Any]]] = {"bare": ("steane", {}), "flag": ("lut", {"depth": 2})}


def device(quantum: str, *, coprocessor_fn: str | CoprocessorFunction | None = "steane", runs_in: str = "thread",
           noise: float = 0.0, apply_correction: bool = True, seed: int | None = None,
           executor: Any = None, transport: str = "memcpy", endpoint: Endpoint | None = None,
           extraction: str = "bare", decoder_params: dict[str, Any] | None = None) -> Backline:
    """A Backline device as in Listing 3, with the choices the demo varies
    (``coprocessor_fn=None``: no coprocessor, decodes stay in the controller; ``executor``: an
    executor handle the coprocessor runs in, instead of ``runs_in``; ``endpoint``: where the
    coprocessor listens, for a transport that crosses machines; ``extraction="flag"``:
    ``coprocessor_fn`` names a decoder built from each program's model, with ``decoder_params``)."""
    ctrl = Controller(hardware="cpu", device=qml.device(quantum, wires=3))
    where: dict[str, Any] = {"executor": executor} if executor is not None else {"runs_in": runs_in}
    coprocessors = [] if coprocessor_fn is None else [
        Coprocessor(name=DECODER_NODE, hardware="cpu", coprocessor_fn=coprocessor_fn,
                    init_args={"idle_spin_us": IDLE_SPIN_US}, endpoint=endpoint, **where)]
    return Backline(controller=ctrl, coprocessors=coprocessors, transport=transport, qec_code="steane", noise=noise,
                    apply_correction=apply_correction, seed=seed, extraction=extraction,
                    decoder_params=decoder_params)


def logical_error_rate(samples: Any) -> tuple[float, float]:
    """Fraction of shots whose logical outcomes are not all equal, and its 95% half-width."""
    s = np.asarray(samples)
    rate = float(np.mean(~((s == 0).all(axis=1) | (s == 1).all(axis=1))))
    return rate, 1.96 * math.sqrt(rate * (1 - rate) / len(s))


@dataclass
class Outcome:
    """One compiled run of the GHZ QNode."""

    samples: np.ndarray
    compile_s: float
    us_per_shot: float
    rtt: dict[str, dict[str, float]]
    rtt_text: str

    @property
    def ler(self) -> tuple[float, float]:
        return logical_error_rate(self.samples)

    def rounds_text(self) -> str:
        """Rounds per second of the shot loop, and the RTT median and P99, of the decoder."""
        s = self.rtt.get(DECODER_NODE, {})
        seconds = self.us_per_shot * len(self.samples) / 1e6
        if "median_us" not in s or seconds <= 0:
            return "no decode rounds"
        return (f"{s['rounds'] / seconds:,.0f} rounds/s, RTT median {s['median_us']:.2f} µs, "
                f"P99 {s['p99_us']:.2f} µs")


def run(dev: Backline, shots: int) -> Outcome:
    circuit = ghz(dev, shots)
    samples = np.asarray(circuit())
    stats = circuit.last_run
    return Outcome(samples, circuit.programs[0].timings["compile_s"], stats.us_per_shot, stats.rtt_summary(),
                   stats.rtt_text())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backline demo ghz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shots", type=int, default=2000, help="shots of the noisy runs (default 2000)")
    parser.add_argument("--noise", type=float, default=0.002, help="physical error rate (default 0.002)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the simulator (default 2026)")
    parser.add_argument("--skip-placements", action="store_true", help="skip part 3 (bposd, out of process)")
    parser.add_argument("--executor", choices=["local"], default=None,
                        help="run the decoder in an executor: 'local' starts one on this machine "
                             "(needs the backline-executor-orc plugin)")
    parser.add_argument("--transport", choices=["memcpy", "rdma", "ucx"], default="memcpy",
                        help="rdma: the decoder in its own process, rounds over RoCE v2 (needs an RDMA device); ucx: "
                             "in its own process, rounds as UCX active messages (backline-transport-ucx)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="with --transport rdma or ucx: the address the decoder listens on")
    parser.add_argument("--compare", action="store_true",
                        help="with --executor or --transport rdma/ucx: run part 2 over memcpy in process too, and "
                             "print rounds/s and RTT of both")
    parser.add_argument("--extraction", choices=sorted(DECODERS), default="bare",
                        help="syndrome extraction: bare (a real-time correction round after every gate; default) or "
                             "flag (flagged checks, each shot decoded over its detector error model)")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="write part 2's figures (extraction, noise, shots, ler_corrected, ler_uncorrected and "
                             "their *_ci95) to FILE")
    args = parser.parse_args(argv)
    if args.shots < 1:
        parser.error("--shots must be at least 1")
    if not 0.0 <= args.noise <= 1.0:
        parser.error(f"--noise {args.noise} is not a probability in [0, 1]")
    if args.compare and args.executor is None and args.transport == "memcpy":
        parser.error("--compare compares another placement with the in-process run: give --executor local or "
                     "--transport rdma or ucx")
    if args.executor is not None and args.transport != "memcpy":
        parser.error(f"--executor and --transport {args.transport} are separate placements here; give one")
    if args.executor is None:
        return _demo(args, None)
    try:
        ex = local_executor()
    except PluginError as exc:
        print(f"backline demo ghz --executor local: {exc}", file=sys.stderr)
        return 2
    with ex:
        return _demo(args, ex)


def _demo(args: argparse.Namespace, executor: Any) -> int:
    where = "in an executor on this machine" if executor is not None else "on a CPU coprocessor"
    decoder, params = DECODERS[args.extraction]
    place: dict[str, Any] = {"executor": executor, "extraction": args.extraction, "coprocessor_fn": decoder,
                             "decoder_params": params or None}
    table = "steane table" if args.extraction == "bare" else f"{decoder} ({params}) from the program's model"
    if args.transport != "memcpy":
        where = "in its own process"
        place.update(transport=args.transport, runs_in="process", endpoint=Endpoint(host=args.host,
                                                                                   port=free_port(args.host)))
    t0 = time.perf_counter()
    print(f"1. Listing 3: logical GHZ on null.qubit, {args.extraction} extraction, {args.transport} transport, "
          f"{table} {where}")
    first = run(device("null.qubit", **place), 10)
    print("samples:", first.samples.tolist())
    print(f"   compile {first.compile_s * 1e3:.0f} ms, {first.us_per_shot:.2f} µs per shot; {first.rtt_text}")

    print(f"\n2. The same QNode on default.clifford (stim), depolarizing noise p = {args.noise}, {args.shots} shots")
    fixed = run(device("default.clifford", noise=args.noise, seed=args.seed, **place), args.shots)
    raw = run(device("default.clifford", noise=args.noise, apply_correction=False, seed=args.seed, **place),
              args.shots)
    (r1, h1), (r0, h0) = fixed.ler, raw.ler
    diff, hd = r0 - r1, math.hypot(h0, h1)
    print(f"   logical error rate, corrected:   {r1:.4f} ± {h1:.4f}  ({fixed.us_per_shot:.0f} µs per shot; "
          f"{fixed.rtt_text})")
    print(f"   logical error rate, uncorrected: {r0:.4f} ± {h0:.4f}")
    print(f"   decoding lowers it by {diff:.4f} ± {hd:.4f} (95% CI; ratio {r1 / r0 if r0 else float('nan'):.2f})")
    ok = r1 < r0
    if args.json:
        figures = {"extraction": args.extraction, "noise": args.noise, "shots": args.shots, "decoder": decoder,
                   "decoder_params": params, "ler_corrected": r1, "ler_uncorrected": r0,
                   "ler_corrected_ci95": wilson(round(r1 * args.shots), args.shots),
                   "ler_uncorrected_ci95": wilson(round(r0 * args.shots), args.shots),
                   "us_per_shot": fixed.us_per_shot, "rtt": fixed.rtt}
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    if args.compare:
        here = run(device("default.clifford", noise=args.noise, seed=args.seed, extraction=args.extraction,
                          coprocessor_fn=decoder, decoder_params=params or None), args.shots)
        same = np.array_equal(here.samples, fixed.samples)
        other = "in an executor" if executor is not None else f"over {args.transport}"
        print(f"   {other + ':':<16}{fixed.rounds_text()}")
        print(f"   {'memcpy, thread:':<16}{here.rounds_text()}")
        print(f"   samples {'identical' if same else 'DIFFER'} (seed {args.seed})")
        ok = ok and same

    if not args.skip_placements:
        print("\n3. Only the placement changes")
        noisy = {"noise": args.noise, "seed": args.seed, "extraction": args.extraction}
        if args.extraction == "bare":
            rows = (("bposd (BP+OSD), thread", device("default.clifford", coprocessor_fn=steane_bposd(), **noisy)),
                    ("steane table, own process", device("default.clifford", runs_in="process", **noisy)),
                    ("no coprocessor (local)", device("default.clifford", coprocessor_fn=None, **noisy)))
        else:
            rows = ((f"{decoder}, own process", device("default.clifford", runs_in="process", coprocessor_fn=decoder,
                                                        decoder_params=params or None, **noisy)),
                    ("bposd from the model, thread", device("default.clifford", coprocessor_fn="bposd", **noisy)))
            print("   (no coprocessor (local): a flag-extracted shot is decoded by a decoder built from its model, "
                  "which runs on a coprocessor)")
        for label, dev in rows:
            out = run(dev, args.shots)
            rate, half = out.ler
            same = "identical to 2." if np.array_equal(out.samples, fixed.samples) else "differs from 2."
            print(f"   {label:<27} corrected {rate:.4f} ± {half:.4f}, samples {same}; {out.rtt_text}")
    print(f"\ndone in {time.perf_counter() - t0:.1f} s")
    if not ok:
        print("FAILED: the decoded logical error rate is not lower than the undecoded one, or the samples of "
              "the other placement differ from the in-process ones", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
