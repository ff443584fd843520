"""The sustainable QEC cycle of each decoder on each placement: rotated surface codes d = 3, 5, 7.

    .venv/bin/python plugins/qec/scripts/sustainable_cycle.py [--shots N] [--distances 3 5 7]
        [--decoders lut pymatching bposd] [--placements memcpy:thread ucx:process:tls=shm memcpy:executor]

Each run is ``backline qec stream`` through its API: a memory experiment of 4d rounds at p = 0.001
(stim's generated circuit), windows of 2d rounds committing d, as fast as possible (cycle 0). The
sustainable cycle is the report's: the smallest cycle at which the backlog stays bounded, from the
measured window times (docs/streaming.md). Prints one row per run; a decoder that cannot run on a
placement (a Python decoder in an executor, which runs native code only) is listed as such.
"""

from __future__ import annotations

import argparse
import sys

import stim

from backline_core import BacklineError
from backline_qec.stream import stream


def circuit(d: int, p: float = 0.001) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=4 * d,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p, before_round_data_depolarization=p)


def placement(text: str) -> tuple[str, str, dict[str, str]]:
    transport, runs_in, *args = text.split(":")
    return transport, runs_in, dict(a.split("=", 1) for a in args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shots", type=int, default=2000)
    ap.add_argument("--distances", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--decoders", nargs="+", default=["lut", "pymatching", "bposd"])
    ap.add_argument("--placements", nargs="+", default=["memcpy:thread", "ucx:process:tls=shm", "memcpy:executor"])
    args = ap.parse_args(argv)
    print(f"{'d':>2} {'decoder':<11} {'placement':<22} {'window p50 us':>13} {'reaction p50/p99 us':>20} "
          f"{'sustainable cycle us':>21} {'framework us':>12}")
    for d in args.distances:
        for name in args.decoders:
            for text in args.placements:
                transport, runs_in, targs = placement(text)
                try:
                    r = stream(circuit(d), name, shots=args.shots, seed=d, transport=transport, runs_in=runs_in,
                               transport_args=targs, window=2 * d, commit=d).to_json()
                except BacklineError as exc:
                    print(f"{d:>2} {name:<11} {text:<22} {str(exc).splitlines()[0]}")
                    continue
                print(f"{d:>2} {name:<11} {text:<22} {r['latency_ns']['p50'] / 1e3:>13.2f} "
                      f"{r['reaction_ns']['p50'] / 1e3:>9.2f}/{r['reaction_ns']['p99'] / 1e3:<10.2f} "
                      f"{r['sustainable_cycle_ns'] / 1e3:>21.3f} {r['framework_overhead_ns']['p50'] / 1e3:>12.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
