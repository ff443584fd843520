"""Shots per second of `backline collect --workers K` against `sinter collect --processes K` on the
same tasks, and whether their logical error rates agree (a two-proportion z-score per task).

    .venv/bin/python plugins/sweeps/scripts/compare_sinter.py [--shots 1000000] [--workers 1 2] [--repeat 3]

Each command runs whole (its start-up included) in a fresh folder on the same circuit files;
shots per second is the shots it wrote over its wall-clock time. The runs alternate (sinter, then
backline, for each worker count, --repeat times) and the medians are compared: the machine is noisy;
so is each repeat's ratio of the two back-to-back runs, and the median of those.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sinter
import stim

BIN = Path(sys.executable).parent
DECODER = "backline:pymatching"


def circuits(where: Path, ds: list[int], ps: list[float]) -> None:
    for d in ds:
        for p in ps:
            c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                       after_clifford_depolarization=p, before_measure_flip_probability=p,
                                       after_reset_flip_probability=p, before_round_data_depolarization=p)
            (where / f"d={d},p={p}.stim").write_text(str(c))


def run(argv: list[str], cwd: Path, out: str) -> tuple[float, dict[str, sinter.TaskStats]]:
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} failed: {r.stderr[-2000:]}")
    totals: dict[str, sinter.TaskStats] = {}
    for s in sinter.read_stats_from_csv_files(cwd / out):
        totals[s.strong_id] = totals[s.strong_id] + s if s.strong_id in totals else s
    return wall, totals


def z_score(a: sinter.TaskStats, b: sinter.TaskStats) -> float:
    p1, p2 = a.errors / a.shots, b.errors / b.shots
    pooled = (a.errors + b.errors) / (a.shots + b.shots)
    se = math.sqrt(pooled * (1 - pooled) * (1 / a.shots + 1 / b.shots))
    return 0.0 if se == 0 else (p1 - p2) / se


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shots", type=int, default=1_000_000,
                    help="shots per task (no error limit: equal work); default 1,000,000, a sweep's usual size")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--distances", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--ps", type=float, nargs="+", default=[0.002, 0.005])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command; their medians are compared")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bl-compare-") as tmp:
        root = Path(tmp)
        circuits(root, args.distances, args.ps)
        names = sorted(p.name for p in root.glob("d=*.stim"))
        results: dict[tuple[str, int], list[tuple[float, int, dict[str, sinter.TaskStats]]]] = {}
        for rep in range(args.repeat):
            for k in args.workers:
                for tool in ("sinter", "backline"):
                    cwd = root / f"{tool}-{k}-{rep}"
                    cwd.mkdir()
                    for n in names:
                        (cwd / n).write_text((root / n).read_text())
                    if tool == "sinter":
                        argv = [str(BIN / "sinter"), "collect", "--circuits", *names, "--decoders", DECODER,
                                "--custom_decoders_module_function", "backline_core.sinter:sinter_decoders",
                                "--max_shots", str(args.shots), "--processes", str(k), "--metadata_func", "auto",
                                "--save_resume_filepath", "out.csv"]
                    else:
                        argv = [sys.executable, "-m", "backline_core", "collect", "--circuits", "d=*.stim",
                                "--decoders", DECODER, "--metadata-from-filename", "--max-shots", str(args.shots),
                                "--workers", str(k), "--save-resume-filepath", "out.csv", "--no-progress"]
                    wall, totals = run(argv, cwd, "out.csv")
                    shots = sum(s.shots for s in totals.values())
                    results.setdefault((tool, k), []).append((wall, shots, totals))
                    print(f"run {rep + 1}: {tool:8} workers={k}: {shots:,} shots in {wall:.2f} s = "
                          f"{shots / wall:,.0f} shots/s", flush=True)
        print()
        for k in args.workers:
            rate = {tool: statistics.median(shots / wall for wall, shots, _ in results[tool, k])
                    for tool in ("sinter", "backline")}
            wall = {tool: statistics.median(w for w, _, _ in results[tool, k]) for tool in ("sinter", "backline")}
            # each repeat runs the two commands back to back: their ratio shares that moment's load
            paired = [(b_shots / b_wall) / (s_shots / s_wall) for (s_wall, s_shots, _), (b_wall, b_shots, _)
                      in zip(results["sinter", k], results["backline", k])]
            print(f"workers={k}: median of {args.repeat}: sinter {rate['sinter']:,.0f} shots/s ({wall['sinter']:.2f} s), "
                  f"backline {rate['backline']:,.0f} shots/s ({wall['backline']:.2f} s): "
                  f"backline/sinter = {rate['backline'] / rate['sinter']:.2f}x; per repeat "
                  f"{', '.join(f'{r:.2f}' for r in paired)}, median {statistics.median(paired):.2f}x")
        print("\nlogical error rates (all runs of each tool pooled), two-proportion z-score:")
        pooled: dict[str, dict[str, sinter.TaskStats]] = {"sinter": {}, "backline": {}}
        for (tool, _), runs in results.items():
            for _, _, totals in runs:
                for sid, s in totals.items():
                    pooled[tool][sid] = pooled[tool][sid] + s if sid in pooled[tool] else s
        for sid in sorted(pooled["sinter"], key=lambda i: sorted(pooled["sinter"][i].json_metadata.items())):
            a, b = pooled["backline"][sid], pooled["sinter"][sid]
            md = ",".join(f"{k}={v}" for k, v in sorted(a.json_metadata.items()))
            print(f"  {md:14} backline {a.errors / a.shots:.3e} ({a.errors}/{a.shots})  sinter {b.errors / b.shots:.3e} "
                  f"({b.errors}/{b.shots})  z = {z_score(a, b):+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
