"""Tiered decoding (bp -> bposd): the escalated fraction, each tier's window latency, and the LER of
tiered against auxiliary-only and primary-only decoding, against p.

    .venv/bin/python plugins/qec/scripts/tiered.py [--shots N] [--d 5] [--p 0.001 0.002 0.003] [--k 1 4]

Rotated surface code memory, ``d`` rounds (+1 of detectors), the same noise p on every channel, sliding
windows of 2d rounds committing d. Each row is ``backline qec stream --decoder bp --escalate-to bposd
--escalate-when CRITERION`` through its API on the same shots (primary in a thread of the controller's
process on memcpy, auxiliary in a memcpy process): ``not-converged`` (the default), then
``syndrome-weight>K``; ``K = -1`` is auxiliary-only (every window escalated) and ``K = inf``
primary-only (none), so their latencies are each tier alone on the same path. ``esc p50`` is the
answer time of the escalated windows (with not-converged: the primary's round and the auxiliary's).
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
    ap.add_argument("--shots", type=int, default=2000)
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--p", type=float, nargs="+", default=[0.001, 0.002, 0.003])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    d = args.d
    print(f"{'p':>6} {'criterion':>15} {'escalated':>9} {'prim p50 us':>11} {'prim p99 us':>11} {'aux p50 us':>10} "
          f"{'aux p99 us':>10} {'all p50 us':>10} {'esc p50 us':>10} {'LER [95% CI]':>22}")
    for p in args.p:
        c = circuit(d, p)
        dets, obs = c.compile_detector_sampler(seed=7).sample(args.shots, separate_observables=True)
        for k in [NEVER, None, *args.k, -1]:
            when = "not-converged" if k is None else f"syndrome-weight>{k}"
            r = stream(c, "bp", detectors=dets, observables=obs, window=2 * d, commit=d, escalate_to="bposd",
                       escalate_when=when, reference=False).to_json()
            t = r["tiers"]
            name = {NEVER: "bp only", -1: "bposd only", None: "not-converged"}.get(k, f"weight>{k}")

            def us(tier: str, q: str) -> str:
                v = t[tier]["latency_ns"][q]
                return "-" if v != v else f"{v / 1e3:.0f}"

            esc = r["latency_escalated_ns"]["p50"]
            lo, hi = r["ler_ci95"]
            print(f"{p:>6} {name:>15} {r['escalated']:>9.3f} {us('primary', 'p50'):>11} {us('primary', 'p99'):>11} "
                  f"{us('auxiliary', 'p50'):>10} {us('auxiliary', 'p99'):>10} {r['latency_ns']['p50'] / 1e3:>10.0f} "
                  f"{'-' if esc != esc else f'{esc / 1e3:.0f}':>10} {r['ler']:.4f} [{lo:.4f}, {hi:.4f}]")


if __name__ == "__main__":
    main()
