"""Parallel windows: windows per second on N = 1, 2, ... coprocessor processes, and the LER against
sequential sliding windows on the same shots.

    .venv/bin/python plugins/qec/scripts/parallel_windows.py [--shots N] [--workers 1 2] [--cases colour surface]
        [--transport memcpy] [--transport-arg K=V]...

Cases (stim's generated circuits, 10 d rounds, the same noise p on every channel):
- ``colour``: colour code (``color_code:memory_xyz``) d = 5, p = 0.002, ``bposd`` (decoder-dominated);
- ``surface``: rotated surface code d = 7, p = 0.003, ``pymatching``.
Layer-A windows of 3d rounds commit their middle d (surface: 13 rounds committing 5); the sequential
reference is sliding windows of 2d rounds committing d, decoded in this process on the same shots. Each run is ``backline qec stream
--parallel-windows`` through its API (memcpy, workers in processes by default).
"""

from __future__ import annotations

import argparse
import math

import stim

from backline_qec import SlidingWindowDecoder
from backline_qec.stream import stream

#: name: (stim's circuit, d, p, decoder, layer-A window, its commit)
CASES = {
    "colour": ("color_code:memory_xyz", 5, 0.002, "bposd", 15, 5),
    # 13/5, not 21/7: a Python decoder's windows travel to a worker process in one function file, which
    # the core caps at 16 MiB, and pymatching's d = 7 window DEMs of 21 rounds come to 21 MB
    "surface": ("surface_code:rotated_memory_z", 7, 0.003, "pymatching", 13, 5),
}


def circuit(kind: str, d: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated(kind, distance=d, rounds=10 * d, after_clifford_depolarization=p,
                                  before_measure_flip_probability=p, after_reset_flip_probability=p,
                                  before_round_data_depolarization=p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shots", type=int, default=300)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=["colour", "surface"])
    ap.add_argument("--transport", default="memcpy")
    ap.add_argument("--runs-in", default="process")
    ap.add_argument("--transport-arg", action="append", default=[], metavar="K=V")
    args = ap.parse_args()
    transport_args = dict(kv.split("=", 1) for kv in args.transport_arg)
    print(f"{'case':8} {'decoder':10} {'N':>2} {'windows/s':>10} {'window p50 us':>13} {'LER parallel':>13} "
          f"{'LER sliding':>12} {'z':>6}")
    for name in args.cases:
        kind, d, p, decoder, window, commit = CASES[name]
        c = circuit(kind, d, p)
        dets, obs = c.compile_detector_sampler(seed=7).sample(args.shots, separate_observables=True)
        seq = SlidingWindowDecoder(c, decoder, window=2 * d, commit=d).decode_batch(dets)
        b = int((seq != obs).any(axis=1).sum())
        for n in args.workers:
            r = stream(c, decoder, detectors=dets, observables=obs, window=window, commit=commit, parallel_windows=True,
                       workers=n, transport=args.transport, runs_in=args.runs_in, transport_args=transport_args,
                       reference=False, round_timeout_ms=10000).to_json()
            a, shots = r["logical_errors"], r["shots"]
            pooled = (a + b) / (2 * shots)
            z = 0.0 if pooled in (0, 1) else (a - b) / shots / math.sqrt(2 * pooled * (1 - pooled) / shots)
            print(f"{name:8} {decoder:10} {n:>2} {r['windows_per_s']:>10.0f} {r['latency_ns']['p50'] / 1e3:>13.1f} "
                  f"{a / shots:>13.4f} {b / shots:>12.4f} {z:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
