"""``backline bench-decoder``: per-shot decode time through the batch path sinter's compiled decoder calls, against
the reference of each decoder in the same run.

Every case is a detector error model: code-capacity cases (hypergraph-product, toric and
bivariate-bicycle codes; independent X flips at ``p``, the code's Hz as detectors and its Z
logicals as observables) and circuit-level memory experiments (rotated surface code d=5 r=5,
colour code d=5 r=4, and the gross code's Z checks measured for a few rounds). For each,
``bposd`` (``DecoderFunction.decode_batch_packed``, what ``backline_core.sinter``'s
``decode_shots_bit_packed`` calls: one native call) and
ldpc's own sinter decoder's path (``ldpc.sinter_decoders.SinterBpOsdDecoder``: ldpc's matrices
of the DEM, its ``BpOsdDecoder`` in a loop over the shots, without the files it reads and
writes) decode the same bit-packed shots with the same parameters; the figure is the
median over ``--repeats`` of the time per shot, and the ratio ours/ldpc. Their predictions
are compared shot by shot. Where installed, ``pymatching`` is timed against PyMatching's own
``decode_batch`` on the surface-code DEM, and ``lut`` per shot on a d=3 surface-code DEM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backline_core import BacklineError, plugins
from backline_core.sdk import Parser, run_command

from . import codes

CIRCUIT_NOISE = {"after_clifford_depolarization": 0.001, "before_measure_flip_probability": 0.001,
                 "after_reset_flip_probability": 0.001, "before_round_data_depolarization": 0.001}
CODE_CAPACITY = ("hgp-rep-5", "hgp-rep-9", "toric-6", "toric-10", "gross")
CIRCUITS = ("surface-d5-r5", "color-d5-r4", "gross-r3")


def code_capacity_dem(code: codes.CSSCode, p: float) -> Any:
    """X flips of probability ``p`` on each qubit, seen by Hz, flipping the Z logicals."""
    import stim

    lz = code.lz if code.lz is not None else codes.css_logicals(code.hx, code.hz)[1]
    lines = []
    for j in range(code.n):
        dets = " ".join(f"D{i}" for i in np.flatnonzero(code.hz[:, j]))
        obs = " ".join(f"L{k}" for k in np.flatnonzero(lz[:, j]))
        lines.append(f"error({p}) {dets} {obs}".rstrip())
    lines.append(f"detector D{code.hz.shape[0] - 1}")
    lines.append(f"logical_observable L{lz.shape[0] - 1}")
    return stim.DetectorErrorModel("\n".join(lines))


def circuit(name: str) -> Any:
    import stim

    if name == "surface-d5-r5":
        return stim.Circuit.generated("surface_code:rotated_memory_x", distance=5, rounds=5, **CIRCUIT_NOISE)
    if name == "color-d5-r4":
        return stim.Circuit.generated("color_code:memory_xyz", distance=5, rounds=4, **CIRCUIT_NOISE)
    if name == "gross-r3":
        return codes.css_memory_circuit(codes.gross_code(), rounds=3, p=0.001)
    raise BacklineError(f"unknown circuit {name!r}; the circuits: {', '.join(CIRCUITS)}")


def _compare(ours: Callable[[], Any], reference: Callable[[], Any], repeats: int) -> tuple[float, float, Any, Any]:
    """Median seconds of ``ours`` and of ``reference``, timed in turn (a shared machine drifts), and
    their last outputs."""
    a, b = ours(), reference()  # warm up: first-call set-up, caches, page faults
    t_ours, t_ref = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a = ours()
        t1 = time.perf_counter()
        b = reference()
        t_ours.append(t1 - t0)
        t_ref.append(time.perf_counter() - t1)
    return float(np.median(t_ours)), float(np.median(t_ref)), a, b


class LdpcSinterPath:
    """ldpc's sinter decoder (``ldpc.sinter_decoders.SinterBpOsdDecoder.decode_via_files``) without its
    files: the same matrices, decoder and per-shot loop, on bit-packed shots in memory."""

    def __init__(self, dem: Any, params: dict[str, Any]) -> None:
        from ldpc import BpOsdDecoder
        from ldpc.ckt_noise.dem_matrices import detector_error_model_to_check_matrices

        self.matrices = detector_error_model_to_check_matrices(dem, allow_undecomposed_hyperedges=True)
        bp = {"min_sum": "minimum_sum"}.get(params["bp_method"], params["bp_method"])
        self.bposd = BpOsdDecoder(self.matrices.check_matrix, error_channel=list(self.matrices.priors),
                                  **{**params, "bp_method": bp})
        self.num_dets, self.num_obs = dem.num_detectors, dem.num_observables

    def decode_shots_bit_packed(self, *, bit_packed_detection_event_data: np.ndarray) -> np.ndarray:
        shots = np.unpackbits(bit_packed_detection_event_data, axis=1, count=self.num_dets, bitorder="little")
        predictions = np.zeros((len(shots), self.num_obs), dtype=np.uint8)
        for i in range(len(shots)):  # as ldpc's adapter: one decode and one sparse product per shot
            predictions[i, :] = (self.matrices.observables_matrix @ self.bposd.decode(shots[i, :])) % 2
        return np.packbits(predictions, axis=1, bitorder="little")


def bench_bposd(label: str, dem: Any, *, shots: int, repeats: int, seed: int, params: dict[str, Any]) -> dict[str, Any]:
    """bposd against ldpc's sinter path on ``dem``: seconds per shot and agreement."""
    dets = dem.compile_sampler(seed=seed).sample(shots, bit_packed=True)[0]
    ours = plugins.get("decoder", "bposd").build_from_dem(dem, **params)
    theirs = LdpcSinterPath(dem, params)
    t_ours, t_ldpc, a, b = _compare(lambda: ours.decode_batch_packed(dets),
                                    lambda: theirs.decode_shots_bit_packed(bit_packed_detection_event_data=dets),
                                    repeats)
    return {"case": label, "decoder": "bposd", "reference": "ldpc sinter path", "detectors": dem.num_detectors,
            "shots": shots, "us_per_shot": 1e6 * t_ours / shots, "reference_us_per_shot": 1e6 * t_ldpc / shots,
            "ratio": t_ours / t_ldpc, "agreement": float((a == b).all(axis=1).mean()), "params": params}


def bench_pymatching(dem: Any, *, shots: int, repeats: int, seed: int) -> dict[str, Any]:
    import pymatching

    dets = dem.compile_sampler(seed=seed).sample(shots, bit_packed=True)[0]
    ours = plugins.get("decoder", "pymatching").build_from_dem(dem)
    theirs = pymatching.Matching.from_detector_error_model(dem)
    t_ours, t_ref, a, b = _compare(
        lambda: ours.decode_batch_packed(dets),
        lambda: theirs.decode_batch(dets, bit_packed_shots=True, bit_packed_predictions=True), repeats)
    return {"case": "surface-d5-r5", "decoder": "pymatching", "reference": "PyMatching decode_batch",
            "detectors": dem.num_detectors, "shots": shots, "us_per_shot": 1e6 * t_ours / shots,
            "reference_us_per_shot": 1e6 * t_ref / shots, "ratio": t_ours / t_ref,
            "agreement": float((a == b).all(axis=1).mean())}


def bench_lut(dem: Any, *, shots: int, repeats: int, seed: int) -> dict[str, Any]:
    dets = dem.compile_sampler(seed=seed).sample(shots, bit_packed=True)[0]
    ours = plugins.get("decoder", "lut").build_from_dem(dem)
    t_ours, _, _, _ = _compare(lambda: ours.decode_batch_packed(dets),
                               lambda: None, repeats)
    return {"case": "surface-d3-r3", "decoder": "lut", "reference": "1 us per shot (the target)",
            "detectors": dem.num_detectors, "shots": shots, "us_per_shot": 1e6 * t_ours / shots,
            "reference_us_per_shot": 1.0, "ratio": 1e6 * t_ours / shots, "agreement": None}


def format_row(r: dict[str, Any]) -> str:
    agree = "" if r["agreement"] is None else f"  agree {100 * r['agreement']:.2f}%"
    return (f"{r['case']:<14} {r['decoder']:<10} {r['detectors']:>5} dets  {r['us_per_shot']:10.3f} us/shot  vs "
            f"{r['reference']}: {r['reference_us_per_shot']:10.3f} us/shot  ratio {r['ratio']:.3f}x{agree}")


def _cmd(args: argparse.Namespace) -> int:
    try:
        import ldpc  # noqa: F401
        import stim
    except ImportError as exc:
        raise BacklineError(f"bench-decoder needs ldpc and stim for its references ({exc.name} is missing): "
                            "pip install ldpc==2.4.1 stim") from None
    for what in ("shots", "repeats"):
        if getattr(args, what) < 1:
            raise BacklineError(f"--{what} {getattr(args, what)}: give at least 1")
    if not 0 < args.p < 0.5:
        raise BacklineError(f"--p {args.p}: a code-capacity error rate is in (0, 0.5)")
    params = {"bp_method": args.bp_method, "max_iter": args.max_iter, "ms_scaling_factor": args.ms_scaling_factor,
              "osd_method": args.osd_method, "osd_order": args.osd_order}
    rows: list[dict[str, Any]] = []
    print(f"per-shot decode time through decode_batch_packed (what sinter calls), median of {args.repeats}; "
          f"bposd {params}")
    for name in args.code if args.code is not None else CODE_CAPACITY:
        code = codes.named_code(name)
        rows.append(bench_bposd(f"{name} p={args.p:g}", code_capacity_dem(code, args.p), shots=args.shots,
                                repeats=args.repeats, seed=args.seed, params=params))
        print(format_row(rows[-1]), flush=True)
    for name in args.circuit if args.circuit is not None else CIRCUITS:
        dem = circuit(name).detector_error_model(decompose_errors=False)
        rows.append(bench_bposd(name, dem, shots=args.shots, repeats=args.repeats, seed=args.seed, params=params))
        print(format_row(rows[-1]), flush=True)
    installed = plugins.names("decoder")
    for name, run in (("pymatching", lambda: bench_pymatching(
            circuit("surface-d5-r5").detector_error_model(decompose_errors=True), shots=max(args.shots, 20000),
            repeats=args.repeats, seed=args.seed)),
                      ("lut", lambda: bench_lut(stim.Circuit.generated(
                          "surface_code:rotated_memory_z", distance=3, rounds=3, **CIRCUIT_NOISE).detector_error_model(),
                          shots=max(args.shots, 200000), repeats=args.repeats, seed=args.seed))):
        if name in installed:
            rows.append(run())
            print(format_row(rows[-1]), flush=True)
        else:
            print(f"{name}: not installed, not measured")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def parser() -> Parser:
    p = Parser(prog="backline bench-decoder", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--code", action="append", help="a code-capacity case by code name (hgp-rep-N, toric-L, gross); "
                   f"repeatable (default: {', '.join(CODE_CAPACITY)})")
    p.add_argument("--circuit", action="append", choices=CIRCUITS, help="a circuit-level case; repeatable "
                   "(default: all)")
    p.add_argument("--p", type=float, default=0.05, help="code-capacity error rate")
    p.add_argument("--shots", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bp-method", default="min_sum", choices=("min_sum", "product_sum"))
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--ms-scaling-factor", type=float, default=0.625)
    p.add_argument("--osd-method", default="osd_cs", choices=("osd0", "osd_cs", "osd_e"))
    p.add_argument("--osd-order", type=int, default=4)
    p.add_argument("--json", metavar="FILE")
    p.set_defaults(func=_cmd)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``backline bench-decoder ARGS``."""
    return run_command(parser(), sys.argv[1:] if argv is None else argv)
