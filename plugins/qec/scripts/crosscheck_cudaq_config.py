"""Cross-check ``backline_qec.cudaq.config`` against CUDA-Q QEC's own configs and decoders.

Run it with Backline's interpreter and name one that has ``cudaq-qec-cu12`` (CPU decoders, no GPU):

    python3 -m venv /tmp/cudaq-venv && /tmp/cudaq-venv/bin/pip install cudaq-qec-cu12==0.8.1 numpy
    .venv/bin/python plugins/qec/scripts/crosscheck_cudaq_config.py --cudaq-python /tmp/cudaq-venv/bin/python

For a distance-3 surface-code DEM, cudaq_qec writes a config (``multi_decoder_config().to_yaml_str()``)
with a single_error_lut, a multi_error_lut (depth 2) and a pymatching decoder; ``load_config`` reads it
and its matrices must be the ones given. Backline's ``export_config`` of the same decoders must be
accepted by cudaq's ``configure_decoders_from_str``. Then both decode the same sampled shots: the
LUTs must agree on every shot; the pymatching agreement rate is reported. Exit status 0 when all hold.
Not part of the test suite (it needs the 4 GB cudaq install).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

KINDS = [("single_error_lut", {}), ("multi_error_lut", {"lut_error_depth": 2}),
         ("pymatching", {"merge_strategy": "smallest_weight"})]


def serve(path_in: str, path_out: str) -> None:
    """In the cudaq interpreter: write the configs, configure our exports, decode every shot."""
    import cudaq_qec as qec

    data = np.load(path_in, allow_pickle=False)
    exports = json.loads(str(data["exports"]))
    cfgs = []
    for i, (kind, args) in enumerate(KINDS):
        graph = kind == "pymatching"
        h, o = data["hg" if graph else "h"], data["og" if graph else "o"]
        cfg = qec.decoder_config()
        cfg.id, cfg.type, cfg.block_size, cfg.syndrome_size = i, kind, int(h.shape[1]), int(h.shape[0])
        cfg.H_sparse = qec.pcm_to_sparse_vec(np.ascontiguousarray(h))
        cfg.O_sparse = qec.pcm_to_sparse_vec(np.ascontiguousarray(o))
        cfg.D_sparse = [x for r in range(h.shape[0]) for x in (r, -1)]  # the measurements are the detectors
        custom = dict(args)
        if graph:
            custom["error_rate_vec"] = [float(p) for p in data["pg"]]
        cfg.set_decoder_custom_args(custom)
        cfgs.append(cfg)
    multi = qec.multi_decoder_config()
    multi.decoders = cfgs
    written = multi.to_yaml_str()
    accepted = []
    for text in exports:
        accepted.append(int(qec.configure_decoders_from_str(text)))
        if hasattr(qec, "finalize_decoders"):
            qec.finalize_decoders()
    syndromes = data["s"]
    out = {}
    for i, (kind, args) in enumerate(KINDS):
        graph = kind == "pymatching"
        h = np.ascontiguousarray(data["hg" if graph else "h"], dtype=np.uint8)
        o = np.ascontiguousarray(data["og" if graph else "o"], dtype=np.uint8)
        if graph:
            dec = qec.get_decoder(kind, h, O=o, error_rate_vec=[float(p) for p in data["pg"]], **args)
        else:
            dec = qec.get_decoder(kind, h, **args)
        flips = np.zeros((len(syndromes), o.shape[0]), dtype=np.uint8)
        for k, s in enumerate(syndromes):
            r = np.asarray(dec.decode([float(x) for x in s]).result) >= 0.5
            flips[k] = (o @ r.astype(np.uint8)) % 2 if r.size == h.shape[1] else r.astype(np.uint8)
        out[f"f{i}"] = flips
    np.savez(path_out, yaml=np.array(written), accepted=np.array(accepted),
             version=np.array(getattr(qec, "__version__", "unknown")), **out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudaq-python", help="an interpreter with cudaq-qec installed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shots", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--save-yaml", help="write the config cudaq_qec wrote to this file")
    parser.add_argument("--serve", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    if not args.cudaq_python:
        parser.error("--cudaq-python is required")
    import stim

    from backline_core import plugins
    from backline_core.sdk import dem_matrices
    from backline_qec.cudaq.config import _split_components, export_config, load_config

    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=args.rounds,
                                     after_clifford_depolarization=0.004, before_measure_flip_probability=0.004,
                                     after_reset_flip_probability=0.004)
    dem = circuit.detector_error_model(decompose_errors=True)
    m, g = dem_matrices(dem), dem_matrices(_split_components(dem))
    dets, _ = circuit.compile_detector_sampler(seed=args.seed).sample(args.shots, separate_observables=True)
    dets = dets.astype(np.uint8)
    # one config each: cudaq numbers a config's decoders 0, 1, ... and refuses a larger id
    exports = [export_config(dem, "lut"), export_config(dem, "lut", params={"depth": 2}), export_config(dem, "pymatching")]
    with tempfile.TemporaryDirectory() as tmp:
        path_in, path_out = str(Path(tmp) / "in.npz"), str(Path(tmp) / "out.npz")
        np.savez(path_in, h=m.h, o=m.o, hg=g.h, og=g.o, pg=g.priors, s=dets, exports=np.array(json.dumps(exports)))
        proc = subprocess.run([args.cudaq_python, "-W", "ignore", __file__, "--serve", path_in, path_out])
        if proc.returncode != 0:
            print(f"crosscheck: the cudaq interpreter failed (exit {proc.returncode})", file=sys.stderr)
            return 2
        theirs = dict(np.load(path_out, allow_pickle=False))
    written = str(theirs["yaml"])
    if args.save_yaml:
        Path(args.save_yaml).write_text(written)
    print(f"cudaq-qec {theirs['version']}; its config: {len(written)} bytes")
    ok = True
    accepted = theirs["accepted"].tolist()
    print(f"configure_decoders_from_str of our exports (lut, lut depth 2, pymatching): {accepted} (0 = accepted)")
    ok &= all(a == 0 for a in accepted)
    cfgs = load_config(written, source="cudaq's config")
    for i, cfg in enumerate(cfgs):
        graph = cfg.type == "pymatching"
        h, o = (g.h, g.o) if graph else (m.h, m.o)
        same = np.array_equal(cfg.H, h) and np.array_equal(cfg.O, o) and (not graph or np.allclose(cfg.priors, g.priors))
        ours = cfg.build().decode_batch(dets)
        agree = int((ours == theirs[f"f{i}"]).all(axis=1).sum())
        direct = plugins.get("decoder", cfg.decoder).build_from_matrices(h, o, cfg.priors, **cfg.params)
        print(f"decoder {cfg.id} {cfg.type:17s} -> {cfg.decoder} {cfg.params}: matrices equal {same}; "
              f"{agree} of {len(dets)} shots agree with cudaq ({100 * agree / len(dets):.2f}%); "
              f"same as built directly: {bool((direct.decode_batch(dets) == ours).all())}")
        ok &= same and (graph or agree == len(dets))
    print("crosscheck:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
