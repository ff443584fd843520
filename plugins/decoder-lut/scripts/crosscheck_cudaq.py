"""Cross-check the ``lut`` decoder against CUDA-Q QEC's ``single_error_lut`` / ``multi_error_lut``.

Run it with Backline's interpreter and name one that has ``cudaq-qec-cu12`` (their CPU decoders
need no GPU; docs/decoder-lut.md):

    python3 -m venv /tmp/cudaq-venv && /tmp/cudaq-venv/bin/pip install cudaq-qec-cu12==0.8.1 numpy
    .venv/bin/python plugins/decoder-lut/scripts/crosscheck_cudaq.py --cudaq-python /tmp/cudaq-venv/bin/python

It decodes the same syndromes of random parity-check matrices (dense ones: ties, equal and empty
columns) and of a distance-3 surface-code DEM with both, in two processes, and compares the error
estimates and the converged flags shot by shot. Exit status 0 when every shot agrees.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def cases(seed: int, random_shots: int) -> list[dict]:
    """(name, H, depth, which cudaq decoder, syndromes) to compare."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(24):
        m, n = int(rng.integers(3, 11)), int(rng.integers(4, 16))
        h = (rng.random((m, n)) < (0.2, 0.5, 0.8)[i % 3]).astype(np.uint8)
        if i % 4 == 0:
            h[:, n // 2] = h[:, 0]  # equal columns
        if i % 5 == 0:
            h[:, -1] = 0  # an empty column
        syndromes = np.array(list(itertools.product((0, 1), repeat=m)), dtype=np.uint8)  # every syndrome
        for depth in (1, 2, 3):
            if depth <= n:
                kind = "single_error_lut" if depth == 1 and i % 2 else "multi_error_lut"
                out.append(dict(name=f"random{i}-{m}x{n}", h=h, depth=depth, kind=kind, syndromes=syndromes))
    try:
        import stim
    except ImportError:
        print("crosscheck: stim is not installed here; the surface-code DEM case is left out", file=sys.stderr)
        return out
    from backline_core.sdk import dem_matrices

    dem = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                 after_clifford_depolarization=0.004, before_measure_flip_probability=0.004,
                                 after_reset_flip_probability=0.004).detector_error_model(decompose_errors=True)
    h = dem_matrices(dem).h
    sampled = dem.compile_sampler(seed=seed).sample(random_shots)[0].astype(np.uint8)
    uniform = (rng.random((random_shots // 4, h.shape[0])) < 0.1).astype(np.uint8)
    syndromes = np.vstack([sampled, uniform])
    for depth in (1, 2, 3):
        out.append(dict(name=f"surface-d3-dem-{h.shape[0]}x{h.shape[1]}", h=h, depth=depth,
                        kind="multi_error_lut", syndromes=syndromes))
    return out


def ours(case: dict) -> tuple[np.ndarray, np.ndarray]:
    from backline_decoder_lut import LutDecoder

    return LutDecoder(case["h"], depth=case["depth"]).decode_batch(case["syndromes"])


def serve(path_in: str, path_out: str) -> None:
    """In the cudaq interpreter: decode every case of path_in with cudaq_qec, one shot at a time."""
    import cudaq_qec as qec

    data = np.load(path_in, allow_pickle=False)
    results = {}
    for i in range(int(data["count"])):
        h, depth, kind = data[f"h{i}"], int(data[f"depth{i}"]), str(data[f"kind{i}"])
        h = np.ascontiguousarray(h, dtype=np.uint8)
        dec = qec.get_decoder(kind, h) if kind == "single_error_lut" else qec.get_decoder(kind, h,
                                                                                             lut_error_depth=depth)
        syndromes = data[f"s{i}"]
        errors = np.zeros((len(syndromes), h.shape[1]), dtype=np.uint8)
        converged = np.zeros(len(syndromes), dtype=bool)
        for k, s in enumerate(syndromes):
            r = dec.decode([float(x) for x in s])
            errors[k] = np.asarray(r.result) >= 0.5
            converged[k] = bool(r.converged)
        results[f"e{i}"], results[f"c{i}"] = errors, converged
    results["version"] = np.array(getattr(qec, "__version__", "unknown"))
    np.savez(path_out, **results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudaq-python", help="an interpreter with cudaq-qec installed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shots", type=int, default=4000, help="sampled syndromes of the surface-code DEM")
    parser.add_argument("--serve", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    if not args.cudaq_python:
        parser.error("--cudaq-python is required")
    todo = cases(args.seed, args.shots)
    with tempfile.TemporaryDirectory() as tmp:
        path_in, path_out = str(Path(tmp) / "in.npz"), str(Path(tmp) / "out.npz")
        arrays = {"count": np.array(len(todo))}
        for i, c in enumerate(todo):
            arrays.update({f"h{i}": c["h"], f"depth{i}": np.array(c["depth"]), f"kind{i}": np.array(c["kind"]),
                           f"s{i}": c["syndromes"]})
        np.savez(path_in, **arrays)
        proc = subprocess.run([args.cudaq_python, __file__, "--serve", path_in, path_out])
        if proc.returncode != 0:
            print(f"crosscheck: the cudaq interpreter failed (exit {proc.returncode})", file=sys.stderr)
            return 2
        theirs = dict(np.load(path_out, allow_pickle=False))
    print(f"cudaq-qec {theirs['version']}")
    bad = 0
    shots = 0
    for i, c in enumerate(todo):
        errors, converged = ours(c)
        e_diff = (errors != theirs[f"e{i}"]).any(axis=1)
        c_diff = converged != theirs[f"c{i}"]
        n = len(c["syndromes"])
        shots += n
        differ = int((e_diff | c_diff).sum())
        bad += differ
        print(f"{c['name']:28s} depth {c['depth']} {c['kind']:17s} {n:6d} syndromes: "
              f"{n - differ} agree, {differ} differ; {int(errors.any(axis=1).sum())} nonzero estimates, "
              f"{int((~converged).sum())} misses")
    print(f"crosscheck: {shots - bad} of {shots} syndromes agree ({len(todo)} cases)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
