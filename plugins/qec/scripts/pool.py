"""A decoder pool with deadlines: deadline misses with and without admission control at a cycle
just above and just below the sustainable one.

    .venv/bin/python plugins/qec/scripts/pool.py [--d 5] [--rounds 50] [--patches 4] [--workers 2]
        [--shots 20] [--decoder pymatching] [--factors 1.25 0.8]

Rotated surface code (stim's generated circuit, p on every channel), sliding windows of 2d rounds
committing d. The sustainable cycle is measured first on the same workers: the pool at cycle 0
(every round there at once, no deadlines), its dispatch time divided by the stream's rounds. Then
each factor x that cycle, with admission control on (late windows shed) and off, on the same shots. Each run is
``backline qec stream --patches K --workers N --cycle-us T`` through its API (memcpy, workers in
processes).
"""

from __future__ import annotations

import argparse

import stim

from backline_qec.stream import stream


def circuit(d: int, rounds: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p, before_round_data_depolarization=p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--p", type=float, default=0.003)
    ap.add_argument("--patches", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shots", type=int, default=20, help="shots per patch")
    ap.add_argument("--decoder", default="pymatching")
    ap.add_argument("--factors", type=float, nargs="+", default=[1.25, 0.8])
    args = ap.parse_args()
    c = circuit(args.d, args.rounds, args.p)
    dets, obs = c.compile_detector_sampler(seed=7).sample(args.shots * args.patches, separate_observables=True)
    common = dict(detectors=dets, observables=obs, window=2 * args.d, commit=args.d, patches=args.patches,
                  workers=args.workers, runs_in="process", round_timeout_ms=10000)
    base = stream(c, args.decoder, cycle_us=0.0, **common).to_json()
    sustainable_us = base["sustainable_cycle_ns"] / 1e3
    print(f"surface d={args.d}, {base['rounds']} rounds, p={args.p}, {args.decoder}, window {2 * args.d}/{args.d} "
          f"({base['windows_per_shot']} a shot), K={args.patches} patches x {args.shots} shots, N={args.workers} "
          f"workers: {base['windows']} windows")
    print(f"sustainable cycle (cycle 0: dispatch time per round) {sustainable_us:.1f} us; window p50 "
          f"{base['latency_ns']['p50'] / 1e3:.0f} us; LER per patch "
          f"{', '.join(format(p['ler'], '.3f') for p in base['per_patch'])}")
    print(f"{'cycle us':>9} {'x':>5} {'admission':>9} {'misses':>7} {'shed':>8} {'late':>5} {'max_queue':>9} "
          f"{'max_backlog':>11} {'resp p50 us':>11} {'resp p99 us':>11} {'median us':>9} {'pred late':>9} "
          f"{'of which in time':>16} {'err p50/p90 us':>14} {'LER':>6}")
    for factor in args.factors:
        cycle = sustainable_us * factor
        for admission in (True, False):
            r = stream(c, args.decoder, cycle_us=cycle, admission=admission, **common).to_json()
            e = r["prediction_error_ns"]  # answer minus predicted answer, the windows decoded
            err = "-" if e is None else f"{e['p50'] / 1e3:.0f}/{e['p90'] / 1e3:.0f}"
            print(f"{cycle:>9.1f} {factor:>5.2f} {'on' if admission else 'off':>9} {r['deadline_misses']:>7} "
                  f"{r['rejected_at_admission']:>8} {r['late_completions']:>5} {r['max_queue']:>9} "
                  f"{r['max_backlog']:>11} {r['response_ns']['p50'] / 1e3:>11.0f} "
                  f"{r['response_ns']['p99'] / 1e3:>11.0f} {r['estimate_ns'] / 1e3:>9.0f} {r['predicted_late']:>9} "
                  f"{r['predicted_late_met_deadline']:>16} {err:>14} {r['ler']:>6.3f}", flush=True)


if __name__ == "__main__":
    main()
