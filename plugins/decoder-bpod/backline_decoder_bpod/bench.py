"""`backline-bench-decoder`: single-shot latency and batch throughput against ldpc, one run.

For each code, the same syndromes (from independent bit flips at ``p``) go through
(a) the native decoder called from native code, (b) the Python API
(:meth:`BpOsdDecoder.decode`, unpacked arrays in and out, like ldpc's), and
(c) ``ldpc.BpOsdDecoder.decode`` with the same parameters; then a batch of them through
``decode_batch_packed`` against ldpc called in a loop (ldpc has no batch call). The
report gives medians, P99s, the ratios the targets are stated in, and the fraction of
shots on which the two decoders agree bit for bit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from backline_core.sdk import summary

from . import codes
from .decoder import BpOsdDecoder
from .native import ffi, lib

DEFAULT_CODES = ("hgp13", "gross")


def _syndromes(h: np.ndarray, p: float, shots: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    errors = (rng.random((shots, h.shape[1])) < p).astype(np.uint8)
    return ((errors.astype(np.int64) @ h.T.astype(np.int64)) % 2).astype(np.uint8)


def bench_code(code: codes.CSSCode, *, p: float, shots: int, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """Latency and throughput of one code's Hz decoder (X errors), ours against ldpc's."""
    import ldpc

    h = code.hz
    syn = _syndromes(h, p, shots, seed)
    packed = np.packbits(syn, axis=1, bitorder="little")
    ours = BpOsdDecoder(h, error_rate=p, **settings)
    theirs = ldpc.BpOsdDecoder(h, error_rate=p, **settings)

    # warm both up on the first shots (page faults, caches)
    for s in syn[: min(100, shots)]:
        ours.decode(s)
        theirs.decode(s)

    native_ns = np.zeros(shots, dtype=np.uint64)
    native_out = np.zeros((shots, ours.correction_bytes), dtype=np.uint8)
    lib.bpod_time_decodes(ours._d, ffi.from_buffer(packed), shots, ffi.from_buffer(native_out),
                          ffi.from_buffer("uint64_t[]", native_ns))

    clock = time.perf_counter_ns
    python_ns = np.zeros(shots, dtype=np.uint64)
    ldpc_ns = np.zeros(shots, dtype=np.uint64)
    agree = 0
    unpacked_native = np.unpackbits(native_out, axis=1, count=h.shape[1], bitorder="little")
    for i, s in enumerate(syn):
        t0 = clock()
        a = ours.decode(s)
        t1 = clock()
        b = theirs.decode(s)
        t2 = clock()
        python_ns[i], ldpc_ns[i] = t1 - t0, t2 - t1
        agree += bool(np.array_equal(a, b) and np.array_equal(a, unpacked_native[i]))

    t0 = clock()
    ours.decode_batch_packed(packed)
    batch_s = (clock() - t0) / 1e9
    t0 = clock()
    for s in syn:
        theirs.decode(s)
    ldpc_batch_s = (clock() - t0) / 1e9

    native, python, reference = summary(native_ns), summary(python_ns), summary(ldpc_ns)
    return {
        "code": code.name, "n": code.n, "k": code.k, "checks": h.shape[0], "p": p, "shots": shots,
        "settings": settings,
        "native": native, "python": python, "ldpc": reference,
        "ratio_native_to_ldpc_median": native["median_ns"] / reference["median_ns"],
        "ratio_python_to_ldpc_median": python["median_ns"] / reference["median_ns"],
        "batch_shots_per_s": shots / batch_s, "ldpc_shots_per_s": shots / ldpc_batch_s,
        "batch_ratio": ldpc_batch_s / batch_s,
        "agreement": agree / shots,
    }


def format_row(r: dict[str, Any]) -> str:
    us = lambda x: f"{x / 1e3:8.2f}"  # noqa: E731
    return (
        f"[[{r['n']},{r['k']}]] {r['code']:<8} p={r['p']:<5} "
        f"native {us(r['native']['median_ns'])} /{us(r['native']['p99_ns'])}   "
        f"python {us(r['python']['median_ns'])} /{us(r['python']['p99_ns'])}   "
        f"ldpc {us(r['ldpc']['median_ns'])} /{us(r['ldpc']['p99_ns'])}   "
        f"native/ldpc {r['ratio_native_to_ldpc_median']:.3f}x   "
        f"batch {r['batch_shots_per_s']:,.0f}/s vs ldpc {r['ldpc_shots_per_s']:,.0f}/s ({r['batch_ratio']:.2f}x)   "
        f"agree {100 * r['agreement']:.2f}%"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backline-bench-decoder", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--code", action="append", help="named code (steane, hgp13, hgp-rep-N, toric-L, gross) "
                        "or an .npz with Hx, Hz; repeatable", default=None)
    parser.add_argument("--error-rate", type=float, action="append", default=None, help="repeatable (default 0.05)")
    parser.add_argument("--shots", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bp-method", default="min_sum", choices=("min_sum", "product_sum"))
    parser.add_argument("--max-iter", type=int, default=10)
    parser.add_argument("--ms-scaling-factor", type=float, default=0.625)
    parser.add_argument("--osd-method", default="osd0", choices=("osd0", "osd_cs", "osd_e", "none"))
    parser.add_argument("--osd-order", type=int, default=0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    try:
        import ldpc  # noqa: F401
    except ImportError:
        print("backline-bench-decoder: error: needs ldpc for the reference: pip install ldpc==2.4.1", file=sys.stderr)
        return 2
    settings = {"bp_method": args.bp_method, "max_iter": args.max_iter, "ms_scaling_factor": args.ms_scaling_factor,
                "osd_method": args.osd_method, "osd_order": args.osd_order}
    results = []
    print("single-shot decode latency, median / P99 in us (Hz decoder, X errors); batch throughput; "
          "agreement = bit-identical to ldpc")
    for name in args.code or DEFAULT_CODES:
        try:
            code = codes.CSSCode.from_npz(name) if name.endswith(".npz") else codes.named_code(name)
        except (ValueError, OSError) as exc:
            print(f"backline-bench-decoder: error: {exc}", file=sys.stderr)
            return 2
        for p in args.error_rate or [0.05]:
            r = bench_code(code, p=p, shots=args.shots, seed=args.seed, settings=settings)
            results.append(r)
            print(format_row(r), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
