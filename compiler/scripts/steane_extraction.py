"""Bare against flag extraction on the Steane code, through the whole stack (Backline on the stim device,
the decoder on a memcpy coprocessor thread), and a Steane memory beside stim's colour-code memory.

1. The GHZ demo's QNode at each ``--ps``: the decoded and undecoded logical error rates with their
   95 % Wilson intervals, for ``bare`` (the real-time steane table) and ``flag`` (``lut`` depth 2
   built from the program's detector error model), the decoded / undecoded ratio, and the fitted
   log-log slope of the decoded rate against p (least squares over the ps).
2. A Steane memory: ``|0_L>``, ``--memory-rounds`` logical identities (one flagged round each), a
   logical measurement, decoded by ``--memory-decoders`` from the program's model; beside it stim's
   ``color_code:memory_xyz`` (distance 3: the Steane code) with the same noise model at the same p
   and rounds, decoded by BP+OSD (sinter-style, stim sampling). Both as a logical error per round.

Run: ``.venv/bin/python compiler/scripts/steane_extraction.py --shots 20000`` (about 15 min here).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np
import pennylane as qml

from backline_compiler import Backline, qjit
from backline_compiler.demos.ghz_steane import DECODERS, device, ghz
from backline_core import Controller, Coprocessor, plugins
from backline_core.sdk import wilson


def rate(samples: np.ndarray, bad: Any) -> dict[str, Any]:
    errors = int(np.sum(bad(np.asarray(samples))))
    return {"errors": errors, "shots": len(samples), "ler": errors / len(samples), "ci95": wilson(errors, len(samples))}


def ghz_errors(s: np.ndarray) -> np.ndarray:
    return ~((s == 0).all(axis=1) | (s == 1).all(axis=1))


def ghz_point(extraction: str, p: float, shots: int, seed: int) -> dict[str, Any]:
    decoder, params = DECODERS[extraction]
    out: dict[str, Any] = {"extraction": extraction, "p": p, "decoder": decoder, "decoder_params": params}
    for key, correct in (("corrected", True), ("uncorrected", False)):
        dev = device("default.clifford", coprocessor_fn=decoder, noise=p, seed=seed, apply_correction=correct,
                     extraction=extraction, decoder_params=params or None)
        t0 = time.perf_counter()
        samples = np.asarray(ghz(dev, shots)())
        out[key] = {**rate(samples, ghz_errors), "seconds": time.perf_counter() - t0}
    return out


def slope(ps: list[float], lers: list[float]) -> float:
    """Least-squares slope of log(LER) against log(p) (points with no errors left out)."""
    pts = [(math.log(p), math.log(r)) for p, r in zip(ps, lers) if r > 0]
    if len(pts) < 2:
        return float("nan")
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def per_round(ler: float, rounds: int) -> float:
    """The per-round error rate that compounds to ``ler`` over ``rounds`` (sinter's shot_error_rate_to_piece)."""
    return 0.5 - 0.5 * (1 - 2 * ler) ** (1 / rounds) if ler < 0.5 else float("nan")


def steane_memory(p: float, rounds: int, shots: int, decoder: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
    ctrl = Controller(hardware="cpu", device=qml.device("default.clifford", wires=1))
    dev = Backline(controller=ctrl, qec_code="steane", extraction="flag", noise=p, seed=seed,
                   coprocessors=[Coprocessor(name="memory-decoder", coprocessor_fn=decoder)],
                   decoder_params=params or None)

    @qjit
    @qml.set_shots(shots)
    @qml.qnode(dev, mcm_method="one-shot")
    def memory():
        for _ in range(rounds):
            qml.Identity(0)
        return qml.sample([qml.measure(0)])

    t0 = time.perf_counter()
    samples = np.asarray(memory()).reshape(shots, -1)
    r = rate(samples, lambda s: s[:, 0] == 1)
    return {**r, "per_round": per_round(r["ler"], rounds), "decoder": decoder, "decoder_params": params,
            "seconds": time.perf_counter() - t0}


def colour_memory(p: float, rounds: int, shots: int, seed: int) -> dict[str, Any]:
    import stim

    circuit = stim.Circuit.generated("color_code:memory_xyz", distance=3, rounds=rounds,
                                     after_clifford_depolarization=p, before_measure_flip_probability=p)
    dem = circuit.detector_error_model(decompose_errors=False)
    dets, obs, _ = dem.compile_sampler(seed=seed).sample(shots)
    fn = plugins.get("decoder", "bposd").build_from_dem(dem)
    predicted = fn.decode_batch(dets.astype(np.uint8)).astype(bool)
    errors = int(np.sum((predicted != obs).any(axis=1)))
    ler = errors / shots
    return {"errors": errors, "shots": shots, "ler": ler, "ci95": wilson(errors, shots),
            "per_round": per_round(ler, rounds), "decoder": "bposd"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shots", type=int, default=20000, help="shots per GHZ run (default 20000)")
    parser.add_argument("--ps", type=float, nargs="+", default=[0.001, 0.002, 0.004])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--memory-rounds", type=int, default=5)
    parser.add_argument("--memory-shots", type=int, default=20000)
    parser.add_argument("--memory-p", type=float, default=0.001)
    parser.add_argument("--memory-decoders", nargs="+", default=["lut", "bposd"])
    parser.add_argument("--skip-ghz", action="store_true")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"ghz": [], "memory": {}}
    if not args.skip_ghz:
        print(f"GHZ, {args.shots} shots per run, seed {args.seed}")
        for extraction in ("bare", "flag"):
            points = []
            for p in args.ps:
                pt = ghz_point(extraction, p, args.shots, args.seed)
                c, u = pt["corrected"], pt["uncorrected"]
                pt["ratio"] = c["ler"] / u["ler"] if u["ler"] else float("nan")
                print(f"  {extraction:<5} p={p:<6} decoded {c['ler']:.5f} [{c['ci95'][0]:.5f}, {c['ci95'][1]:.5f}]  "
                      f"undecoded {u['ler']:.5f} [{u['ci95'][0]:.5f}, {u['ci95'][1]:.5f}]  ratio {pt['ratio']:.3f}  "
                      f"({c['seconds'] / args.shots * 1e6:.0f} µs/shot)", flush=True)
                points.append(pt)
            s = slope(args.ps, [pt["corrected"]["ler"] for pt in points])
            print(f"  {extraction}: log-log slope of the decoded rate {s:.2f}", flush=True)
            report["ghz"].append({"extraction": extraction, "points": points, "slope": s})
    p, rounds = args.memory_p, args.memory_rounds
    print(f"memory, p={p}, {rounds} rounds, {args.memory_shots} shots")
    for name in args.memory_decoders:
        params = {"depth": 2} if name == "lut" else {}
        m = steane_memory(p, rounds, args.memory_shots, name, params, args.seed)
        report["memory"][f"steane-flag-{name}"] = m
        print(f"  Steane, flag extraction, {name}{params or ''}: {m['errors']}/{m['shots']} = {m['ler']:.5f} "
              f"[{m['ci95'][0]:.5f}, {m['ci95'][1]:.5f}], per round {m['per_round']:.2e}", flush=True)
    c = colour_memory(p, rounds, args.memory_shots * 10, args.seed)
    report["memory"]["color_code:memory_xyz-bposd"] = c
    print(f"  stim color_code:memory_xyz d=3, bposd: {c['errors']}/{c['shots']} = {c['ler']:.5f} "
          f"[{c['ci95'][0]:.5f}, {c['ci95'][1]:.5f}], per round {c['per_round']:.2e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
