"""Tiered decoding (bp -> bposd): the escalated fraction, each tier's window latency, and the LER of
tiered against auxiliary-only and primary-only decoding, against p.

    .venv/bin/python plugins/qec/scripts/tiered.py [--shots N] [--d 5] [--p 0.001 0.003 0.006] [--k 1 4]

Rotated surface code memory, ``d`` rounds (+1 of detectors), the same noise p on every channel, sliding
windows of 2d rounds committing d. Each row is ``backline qec stream --decoder bp --escalate-to bposd
--escalate-when syndrome-weight>K`` through its API on the same shots (primary in the controller's process on
memcpy, auxiliary in a memcpy process); ``K = -1`` is auxiliary-only (every window escalated) and
``K = inf`` primary-only (none), so their latencies are each tier alone on the same path.
"""

from __future__ import annotations

import argparse

import stim

from backline_qec.stream import stream

NEVER = 10**9


def circuit(d: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p, before_round_data_depolarization=p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shots", type=int, default=500)
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--p", type=float, nargs="+", default=[0.001, 0.003, 0.006])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    d = args.d
    print(f"{'p':>6} {'K':>5} {'escalated':>9} {'prim p50 us':>11} {'prim p99 us':>11} {'aux p50 us':>10} "
          f"{'aux p99 us':>10} {'all p50 us':>10} {'LER':>7}")
    for p in args.p:
        c = circuit(d, p)
        dets, obs = c.compile_detector_sampler(seed=7).sample(args.shots, separate_observables=True)
        for k in [NEVER, *args.k, -1]:
            r = stream(c, "bp", detectors=dets, observables=obs, window=2 * d, commit=d, escalate_to="bposd",
                       escalate_when=f"syndrome-weight>{k}", reference=False).to_json()
            t = r["tiers"]
            name = "inf (bp only)" if k == NEVER else ("-1 (bposd only)" if k == -1 else str(k))

            def us(tier: str, q: str) -> str:
                v = t[tier]["latency_ns"][q]
                return "-" if v != v else f"{v / 1e3:.0f}"

            print(f"{p:>6} {name:>5} {r['escalated']:>9.3f} {us('primary', 'p50'):>11} {us('primary', 'p99'):>11} "
                  f"{us('auxiliary', 'p50'):>10} {us('auxiliary', 'p99'):>10} {r['latency_ns']['p50'] / 1e3:>10.0f} "
                  f"{r['ler']:>7.4f}")


if __name__ == "__main__":
    main()
