"""BP+OSD as Triton kernels on torch tensors, and user-written Triton kernels as coprocessor functions.

Two routes to a GPU coprocessor function:

* :func:`css_triton_bp_decoder` (what ``css_bp_decoder(..., platform="triton")`` returns) runs the
  algorithm of ``native/bpod.c`` -- flooding BP (min-sum or product-sum), then OSD-0 / OSD-CS /
  OSD-E -- as Triton kernels in float64, keeping the C decoder's order of floating-point
  operations so that min-sum results agree with it bit for bit. Any number of checks and bits.
* :func:`triton_decoder` wraps kernels you write yourself, ``kernel(syndrome_ptr,
  correction_ptr, m, n)`` launched on one program with unpacked 0/1 ``uint8`` tensors; the
  wrapper does the packing, the device transfers and the checks.

Without a GPU, set ``TRITON_INTERPRET=1`` in the environment before triton is imported: the
kernels then run in Triton's interpreter on CPU tensors (slowly). In the interpreter tanh and
log (product-sum BP) come from the host's C library, as in ``bpod.c``; on a GPU they come from
libdevice / ocml and may differ from it in the last bit.

Importing this module imports torch and triton; ``import backline_decoder_bpod`` does not.
See ``docs/decoder-bpod-triton.md``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import KernelInterface

from backline_core import CoprocessorFunction

from .native import lib
from .params import BpOsdParams, check_css, check_matrix

__all__ = ["INTERPRETED", "TritonBpOsdDecoder", "css_triton_bp_decoder", "resolve_device", "triton_decoder"]

# Status of a decode: bpod.h's, so that both decoders report alike.
BP_CONVERGED, OSD, BP_FAILED = lib.BPOD_BP_CONVERGED, lib.BPOD_OSD, lib.BPOD_BP_FAILED

_DBL_MAX = tl.constexpr(1.7976931348623157e308)
_SCRATCH_BYTES = 1 << 26  # OSD candidate corrections (n bytes each) held per launch, at most
# No fused multiply-add: bpod.c rounds every product and sum (1.0 + pre * acc would fuse).
_LAUNCH = {"enable_fp_fusion": False}


@triton.jit
def _probe_kernel(x):  # only to learn whether @triton.jit builds interpreted functions here
    pass


#: True when TRITON_INTERPRET=1 was in effect as this module's kernels were defined.
INTERPRETED = isinstance(_probe_kernel, InterpretedFunction)

if INTERPRETED:
    from triton.runtime.interpreter import TensorHandle

    def _host_map(x: Any, f: Any) -> Any:
        # The interpreter holds a block as a numpy array: apply the host libm's f to each element.
        data = x.handle.data
        out = np.fromiter((f(float(v)) for v in data.ravel()), dtype=np.float64, count=data.size)
        return tl.tensor(TensorHandle(out.reshape(data.shape), x.handle.dtype), x.type)

    def _c_log(v: float) -> float:
        # C's log(): -inf at 0 and nan below (math.log raises instead)
        if v > 0.0:
            return math.log(v)
        return -math.inf if v == 0.0 else math.nan

    def _tanh(x):  # called from interpreted kernels: tanh of a float64 block
        return _host_map(x, math.tanh)

    def _log(x):
        return _host_map(x, _c_log)

else:
    from triton.language.extra import libdevice

    @triton.jit
    def _tanh(x):
        return libdevice.tanh(x)

    @triton.jit
    def _log(x):
        return libdevice.log(x)


# ---- belief propagation -----------------------------------------------------------------------
#
# Edges are CSR positions e (row ascending, column ascending within a row), as in bpod.c. Check
# kernels give each check a lane (BLOCK checks per program); bit kernels give each bit a lane and
# walk its edges in row order. Sums and products that round are taken one edge at a time in
# bpod.c's order (never as a tree reduction); minima, signs and parities, which do not round,
# are block reductions. Index arithmetic is int64 throughout.


@triton.jit
def _ms_check_kernel(row_ptr, b2c, c2b, syndrome, alphas, it, m, BLOCK: tl.constexpr, DEG: tl.constexpr):
    """Min-sum: c2b[e] = (least |b2c| over the check's other edges) * (+-alpha), the sign the
    parity of the syndrome bit and the other edges' signs (b2c <= 0 counts as negative)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    rmask = rows < m
    lo = tl.load(row_ptr + rows, mask=rmask, other=0)
    deg = tl.load(row_ptr + rows + 1, mask=rmask, other=0) - lo
    k = tl.arange(0, DEG).to(tl.int64)[None, :]
    valid = k < deg[:, None]
    e = lo[:, None] + k
    b = tl.load(b2c + e, mask=valid, other=0.0)
    big = tl.full([BLOCK, DEG], _DBL_MAX, tl.float64)
    # bpod.c scans with min1 = min2 = DBL_MAX and strict `<`: values >= DBL_MAX (and nan)
    # never become a minimum, and the first edge of the least value is arg1 (the row's first
    # edge when there is none). Clamping to DBL_MAX gives the same from block minima.
    a = tl.abs(b)
    a = tl.where(valid & (a < big), a, big)
    min1 = tl.min(a, axis=1)
    first = tl.min(tl.where((a == min1[:, None]) & (a < big), k, DEG), axis=1)
    arg1 = tl.where(first < DEG, first, 0)[:, None]
    min2 = tl.min(tl.where(k == arg1, big, a), axis=1)
    negative = (b <= 0.0).to(tl.int64)
    syn = tl.load(syndrome + rows, mask=rmask, other=0).to(tl.int64)
    parity = (syn + tl.sum(tl.where(valid, negative, 0), axis=1))[:, None]
    other = tl.where(k == arg1, min2[:, None], min1[:, None])
    alpha = tl.load(alphas + it)
    # bpod.c: other * (sign * alpha), sign = -1.0 when the parity without this edge is odd
    tl.store(c2b + e, other * tl.where(((parity + negative) & 1) != 0, -alpha, alpha), mask=valid)


@triton.jit
def _ps_check_kernel(row_ptr, b2c, c2b, tbuf, pre, syndrome, m, max_deg, BLOCK: tl.constexpr):
    """Product-sum: t[e] = tanh(b2c[e] / 2); c2b[e] = sign * log((1 + x) / (1 - x)) with
    x = (product of the t before e, from the left) * (product of the t after e, from the right)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    rmask = rows < m
    lo = tl.load(row_ptr + rows, mask=rmask, other=0)
    deg = tl.load(row_ptr + rows + 1, mask=rmask, other=0) - lo
    one = tl.full([BLOCK], 1.0, tl.float64)
    acc = one
    for k in range(max_deg):
        valid = k < deg
        e = lo + k
        b = tl.load(b2c + e, mask=valid, other=0.0)
        t = tl.where(valid, _tanh(b / 2.0), one)
        tl.store(tbuf + e, t, mask=valid)
        tl.store(pre + e, acc, mask=valid)
        acc = acc * t  # finished lanes multiply by exactly 1.0
    tl.debug_barrier()  # tbuf and pre, written above, are read back below
    sign = tl.where(tl.load(syndrome + rows, mask=rmask, other=0) != 0, -one, one)
    acc = one
    for kk in range(max_deg):
        k = max_deg - 1 - kk
        valid = k < deg
        e = lo + k
        x = tl.load(pre + e, mask=valid, other=0.0) * acc
        acc = acc * tl.load(tbuf + e, mask=valid, other=1.0)
        tl.store(c2b + e, sign * _log((1.0 + x) / (1.0 - x)), mask=valid)


@triton.jit
def _bit_kernel(col_ptr, col_edges, init_llr, c2b, b2c, pfx, llr, hard, n, max_deg, BLOCK: tl.constexpr):
    """Posterior llr = init + c2b[e0] + c2b[e1] + ... (the bit's edges in row order), the hard
    decision llr <= 0, and b2c[e] = (init + the c2b before e) + (the c2b after e, summed from
    the last edge back): bpod.c's posterior_and_check and suffix_messages."""
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    cmask = cols < n
    lo = tl.load(col_ptr + cols, mask=cmask, other=0)
    deg = tl.load(col_ptr + cols + 1, mask=cmask, other=0) - lo
    edges = col_edges + lo
    # Finished lanes add +0.0, which leaves a sum that is not -0.0 unchanged; these sums start
    # at log((1-p)/p) or +0.0 and so are never -0.0.
    acc = tl.load(init_llr + cols, mask=cmask, other=0.0)
    for k in range(max_deg):
        valid = k < deg
        e = tl.load(edges + k, mask=valid, other=0)
        tl.store(pfx + e, acc, mask=valid)
        acc = acc + tl.load(c2b + e, mask=valid, other=0.0)
    tl.store(llr + cols, acc, mask=cmask)
    tl.store(hard + cols, (acc <= 0.0).to(tl.uint8), mask=cmask)
    tl.debug_barrier()  # pfx, written above, is read back below
    acc = tl.zeros([BLOCK], tl.float64)
    for kk in range(max_deg):
        k = max_deg - 1 - kk
        valid = k < deg
        e = tl.load(edges + k, mask=valid, other=0)
        tl.store(b2c + e, tl.load(pfx + e, mask=valid, other=0.0) + acc, mask=valid)
        acc = acc + tl.load(c2b + e, mask=valid, other=0.0)


@triton.jit
def _syndrome_kernel(row_ptr, col_idx, hard, syndrome, flags, it, m, BLOCK: tl.constexpr, DEG: tl.constexpr):
    """flags[it] += the number of checks the hard decision leaves unsatisfied."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    rmask = rows < m
    lo = tl.load(row_ptr + rows, mask=rmask, other=0)
    deg = tl.load(row_ptr + rows + 1, mask=rmask, other=0) - lo
    k = tl.arange(0, DEG).to(tl.int64)[None, :]
    valid = k < deg[:, None]
    c = tl.load(col_idx + lo[:, None] + k, mask=valid, other=0)
    ones = tl.sum(tl.load(hard + c, mask=valid, other=0).to(tl.int64), axis=1)
    parity = (tl.load(syndrome + rows, mask=rmask, other=0).to(tl.int64) + ones) & 1
    tl.atomic_add(flags + it, tl.sum(parity, axis=0).to(tl.int32))


# ---- ordered statistics: bit-packed GF(2) elimination ------------------------------------------
#
# OSD permutes the columns by the posterior LLRs (position k holds column order[k]) and packs
# each row of the permuted H into WN int64 words (position k: word k // 64, bit k % 64). One
# program runs Gauss-Jordan elimination over the positions in order: a position gets a pivot
# (a row not yet used with a 1 there) exactly when its column is independent of the columns
# already chosen -- bpod.c's greedy information set -- and the row operations, applied to the
# syndrome too, leave the OSD-0 solution on the pivot rows. The solution supported on the
# information set is unique, so it is the C decoder's whatever the elimination details.
# Candidates (OSD-0 first, then OSD-CS / OSD-E flips) are then solved and costed in parallel.


@triton.jit
def _pack_rows_kernel(row_ptr, col_idx, inv_order, R, m, WN, BLOCK: tl.constexpr, DEG: tl.constexpr):
    """R[i, word] |= bit for each edge (i, j) of H at position inv_order[j]; R starts zeroed."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    rmask = rows < m
    lo = tl.load(row_ptr + rows, mask=rmask, other=0)
    deg = tl.load(row_ptr + rows + 1, mask=rmask, other=0) - lo
    k = tl.arange(0, DEG).to(tl.int64)[None, :]
    valid = k < deg[:, None]
    pos = tl.load(inv_order + tl.load(col_idx + lo[:, None] + k, mask=valid, other=0), mask=valid, other=0)
    bit = tl.full([BLOCK, DEG], 1, tl.int64) << (pos % 64)
    tl.atomic_or(R + rows[:, None] * WN + pos // 64, bit, mask=valid)


@triton.jit
def _osd_eliminate_kernel(R, syn, row_piv, nonpivots, counts, m, n, WN,
                          BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr):
    """One program: Gauss-Jordan over positions 0..n-1 of the packed rows R, applied to syn too.

    row_piv[i] = the position whose pivot is row i (-1: none; starts all -1); nonpivots = the
    positions without a pivot, in order; counts = (pivots, non-pivots)."""
    lanes_m = tl.arange(0, BLOCK_M).to(tl.int64)
    lanes_w = tl.arange(0, BLOCK_W).to(tl.int64)
    zero = tl.program_id(0).to(tl.int64) * 0
    n_piv = zero
    n_np = zero
    for k in range(n):
        pos = zero + k
        wk = pos // 64
        bk = pos % 64
        p = zero + m  # the pivot row: the first unused row with a 1 at this position
        for r0 in range(0, m, BLOCK_M):
            rows = r0 + lanes_m
            rmask = rows < m
            word = tl.load(R + rows * WN + wk, mask=rmask, other=0)
            free = tl.load(row_piv + rows, mask=rmask, other=0) < 0
            cand = (((word >> bk) & 1) != 0) & free
            p = tl.minimum(p, tl.min(tl.where(cand, rows, m), axis=0))
        if p < m:
            sp = tl.load(syn + p)
            prow = R + p * WN
            for r0 in range(0, m, BLOCK_M):
                rows = r0 + lanes_m
                word = tl.load(R + rows * WN + wk, mask=rows < m, other=0)
                hit = (((word >> bk) & 1) != 0) & (rows != p)
                tl.debug_barrier()  # every lane has read its bit before any row changes
                for w0 in range(0, WN, BLOCK_W):
                    words = w0 + lanes_w
                    wmask = words < WN
                    pw = tl.load(prow + words, mask=wmask, other=0)
                    ptrs = R + rows[:, None] * WN + words[None, :]
                    both = hit[:, None] & wmask[None, :]
                    tl.store(ptrs, tl.load(ptrs, mask=both, other=0) ^ pw[None, :], mask=both)
                tl.store(syn + rows, tl.load(syn + rows, mask=hit, other=0) ^ sp, mask=hit)
            tl.store(row_piv + p, pos)
            n_piv += 1
        else:
            tl.store(nonpivots + n_np, pos)
            n_np += 1
        tl.debug_barrier()  # the next position reads the rows changed here
    tl.store(counts, n_piv)
    tl.store(counts + 1, n_np)


@triton.jit
def _osd_candidates_kernel(flips, C, F, nonpivots, order, R, syn, row_piv, cost, xs, out_cost, out_ok, m, n, WN,
                           BLOCK_C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Candidates c (BLOCK_C per program): flip the non-pivot positions nonpivots[flips[c, :]]
    (-1: none), solve the rest on the pivots, and cost the correction (bpod.c's try_candidate).

    The reduced syndrome with the flipped columns' reduced bits XORed in gives the pivot bits;
    on rows without a pivot it must be 0 (out_ok). The correction is left in xs[c, :] and its
    cost, sum of cost[j] over its bits j ascending one add at a time, in out_cost[c]."""
    cands = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C).to(tl.int64)
    cmask = cands < C
    xrow = xs + cands * n
    for j0 in range(0, n, BLOCK_N):
        cols = j0 + tl.arange(0, BLOCK_N).to(tl.int64)
        tl.store(xrow[:, None] + cols[None, :], tl.zeros([BLOCK_C, BLOCK_N], tl.uint8),
                 mask=cmask[:, None] & (cols < n)[None, :])
    tl.debug_barrier()
    bad = tl.zeros([BLOCK_C], tl.int64)
    lanes_m = tl.arange(0, BLOCK_M).to(tl.int64)
    for r0 in range(0, m, BLOCK_M):
        rows = r0 + lanes_m
        rmask = rows < m
        val = tl.zeros([BLOCK_C, BLOCK_M], tl.int64) + tl.load(syn + rows, mask=rmask, other=0)[None, :]
        for f in range(F):
            a = tl.load(flips + cands * F + f, mask=cmask, other=-1)
            pos = tl.load(nonpivots + tl.maximum(a, 0), mask=a >= 0, other=0)
            word = tl.load(R + rows[None, :] * WN + (pos // 64)[:, None], mask=(a >= 0)[:, None] & rmask[None, :],
                           other=0)
            val = val ^ ((word >> (pos % 64)[:, None]) & 1)
        piv = tl.load(row_piv + rows, mask=rmask, other=-1)
        col = tl.load(order + tl.maximum(piv, 0), mask=piv >= 0, other=0)
        tl.store(xrow[:, None] + col[None, :], val.to(tl.uint8), mask=cmask[:, None] & (piv >= 0)[None, :])
        bad += tl.sum(tl.where((piv < 0)[None, :] & rmask[None, :], val, 0), axis=1)
    for f in range(F):
        a = tl.load(flips + cands * F + f, mask=cmask, other=-1)
        pos = tl.load(nonpivots + tl.maximum(a, 0), mask=a >= 0, other=0)
        col = tl.load(order + pos, mask=a >= 0, other=0)
        tl.store(xrow + col, tl.full([BLOCK_C], 1, tl.uint8), mask=cmask & (a >= 0))
    tl.debug_barrier()  # xs rows, written above by any lane, are read back below
    acc = tl.zeros([BLOCK_C], tl.float64)
    for j in range(n):
        xj = tl.load(xrow + j, mask=cmask, other=0)
        acc = tl.where(xj != 0, acc + tl.load(cost + j), acc)
    tl.store(out_cost + cands, acc, mask=cmask)
    tl.store(out_ok + cands, (bad == 0).to(tl.int32), mask=cmask)


# ---- host side ---------------------------------------------------------------------------------


def _pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _merge_order(llr: list[float]) -> list[int]:
    """bpod.c's sort_by_llr verbatim: bottom-up merge sort taking the right element only when
    strictly less. With nan (no total order) its result depends on the merges."""
    n, a = len(llr), list(range(len(llr)))
    width = 1
    while width < n:
        b: list[int] = []
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            while i < mid and j < hi:
                if llr[a[j]] < llr[a[i]]:
                    b.append(a[j])
                    j += 1
                else:
                    b.append(a[i])
                    i += 1
            b += a[i:mid] + a[j:hi]
        a, width = b, 2 * width
    return a


def llr_order(llr: torch.Tensor) -> torch.Tensor:
    """The OSD column order: stable ascending sort of the posterior LLRs (most likely flipped
    first), -0.0 and +0.0 equal as under C's `<`. LLRs with nan (product-sum BP can overflow to
    inf - inf) have no total order: then bpod.c's merge sort itself runs, on the host."""
    if bool(torch.isnan(llr).any()):
        return torch.tensor(_merge_order(llr.cpu().tolist()), dtype=torch.int64, device=llr.device)
    key = torch.where(llr == 0.0, torch.zeros_like(llr), llr)
    return torch.sort(key, stable=True).indices


def resolve_device(device: Any = None) -> torch.device:
    """The torch device the kernels run on: ``device`` checked, or (None) "cuda" when a GPU is
    visible, else "cpu" under the Triton interpreter; RuntimeError when neither."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if INTERPRETED:
            return torch.device("cpu")
        raise RuntimeError(
            "no GPU found (torch.cuda.is_available() is False) and the Triton interpreter is off: set "
            "TRITON_INTERPRET=1 in the environment before triton is imported to run the kernels on CPU "
            "tensors (slow; for testing), or run on a machine with a CUDA or ROCm GPU and a GPU build of torch"
        )
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r}: no GPU found (torch.cuda.is_available() is False)")
    elif dev.type == "cpu":
        if not INTERPRETED:
            raise RuntimeError(
                f"device={device!r}: Triton kernels run on CPU tensors only in the interpreter; set "
                "TRITON_INTERPRET=1 in the environment before triton is imported"
            )
    else:
        raise ValueError(f"device={device!r}: choose 'cuda' (a CUDA or ROCm GPU) or 'cpu' (the Triton interpreter)")
    return dev


def _candidate_chunks(method: str, k: int, w: int, rows: int) -> Iterator[np.ndarray]:
    """bpod.c's candidate order, led by OSD-0 (no flips), as int32 arrays of flip positions
    (indices into the non-pivots, -1 padded), at most `rows` candidates at a time.

    "osd0": OSD-0 alone. OSD-CS: each non-pivot alone, then every pair (a, b), a < b, among the
    first w. OSD-E: every nonempty subset of the first w, by increasing bit mask."""
    if method == "osd0" or (method == "osd_e" and w == 0):
        yield np.full((1, 1), -1, dtype=np.int32)
        return
    if method == "osd_cs":
        singles = np.full((k, 2), -1, dtype=np.int32)
        singles[:, 0] = np.arange(k, dtype=np.int32)
        a, b = np.triu_indices(w, 1)  # a ascending, then b ascending
        every = np.concatenate([np.full((1, 2), -1, dtype=np.int32), singles,
                                np.stack([a, b], axis=1).astype(np.int32)])
        for start in range(0, len(every), rows):
            yield every[start:start + rows]
        return
    bit = np.arange(w, dtype=np.int64)
    for start in range(0, 1 << w, rows):  # mask 0 is OSD-0
        masks = np.arange(start, min(start + rows, 1 << w), dtype=np.int64)
        member = ((masks[:, None] >> bit[None, :]) & 1) == 1
        pos = np.where(member, bit[None, :], w)
        pos.sort(axis=1)  # members first, ascending
        yield np.where(pos < w, pos, -1).astype(np.int32).reshape(len(masks), max(w, 1))


class TritonBpOsdDecoder:
    """BP(+OSD) for one parity-check matrix ``h`` as Triton kernels: bpod.c's algorithm.

    The Tanner graph goes to the device once, with every buffer a decode needs (the OSD
    candidate scratch on first use). ``decode`` takes and returns unpacked 0/1 numpy arrays,
    ``decode_packed`` bit-packed little-endian bytes. One decode at a time per decoder.
    """

    def __init__(self, h: Any, params: BpOsdParams | None = None, device: Any = None) -> None:
        self.h = check_matrix(h, "H")
        self.params = BpOsdParams() if params is None else params
        if not isinstance(self.params, BpOsdParams):
            raise TypeError(f"params must be a BpOsdParams, got {type(self.params).__name__}")
        self.device = dev = resolve_device(device)
        self.m, self.n = m, n = self.h.shape
        self.syndrome_bytes, self.correction_bytes = (m + 7) // 8, (n + 7) // 8
        p = self.params
        self.max_iter = p.max_iter if p.max_iter else n
        self.product_sum = p.bp_method == "product_sum"
        self.osd_method, self.osd_order = p.osd_method, p.osd_order
        probs = p.probs(n).tolist()
        # math.log is the C library's log, as bpod.c uses (numpy's may differ in the last bit)
        init_llr = np.array([math.log((1.0 - q) / q) for q in probs], dtype=np.float64)
        cost = np.array([math.log(1.0 / q) for q in probs], dtype=np.float64)

        rows, cols = np.nonzero(self.h)  # CSR order: row ascending, column ascending
        self.nnz = nnz = len(cols)
        row_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=m), out=row_ptr[1:])
        col_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols, minlength=n), out=col_ptr[1:])
        col_edges = np.argsort(cols, kind="stable")  # each column's edges, in row order
        self.max_row_deg = int(np.diff(row_ptr).max()) if m else 0
        self.max_col_deg = int(np.diff(col_ptr).max())
        self.wn = (n + 63) // 64  # words of a packed (permuted) row

        def put(a: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.as_tensor(np.ascontiguousarray(a)).to(device=dev, dtype=dtype)

        def pad(a: np.ndarray) -> np.ndarray:
            return a if len(a) else np.zeros(1, dtype=a.dtype)

        f64 = torch.float64
        self._row_ptr, self._col_ptr = put(row_ptr), put(col_ptr)
        self._col_idx, self._col_edges = put(pad(cols)), put(pad(col_edges))
        self._init_llr, self._cost = put(init_llr, f64), put(cost, f64)
        self._init_b2c = put(pad(init_llr[cols]), f64)
        if p.ms_scaling_factor == 0.0:  # adaptive: 1 - 2^-it, exact as pow(2.0, -it) in C
            alphas = [1.0 - 2.0 ** -it for it in range(1, self.max_iter + 1)]
        else:
            alphas = [float(p.ms_scaling_factor)] * self.max_iter
        self._alphas = put(np.array(alphas, dtype=np.float64), f64)
        e = max(nnz, 1)
        self._b2c, self._c2b, self._pfx, self._tbuf, self._pre = (torch.zeros(e, dtype=f64, device=dev)
                                                                  for _ in range(5))
        self._llr = torch.zeros(n, dtype=f64, device=dev)
        self._hard = torch.zeros(n, dtype=torch.uint8, device=dev)
        self._flags = torch.zeros(self.max_iter, dtype=torch.int32, device=dev)
        self._syndrome = torch.zeros(max(m, 1), dtype=torch.uint8, device=dev)
        # OSD
        self._order = torch.zeros(n, dtype=torch.int64, device=dev)
        self._inv_order = torch.zeros(n, dtype=torch.int64, device=dev)
        self._positions = torch.arange(n, dtype=torch.int64, device=dev)
        self._R = torch.zeros(max(m, 1) * self.wn, dtype=torch.int64, device=dev)
        self._syn_red = torch.zeros(max(m, 1), dtype=torch.int64, device=dev)
        self._row_piv = torch.zeros(max(m, 1), dtype=torch.int64, device=dev)
        self._nonpivots = torch.zeros(n, dtype=torch.int64, device=dev)
        self._counts = torch.zeros(2, dtype=torch.int64, device=dev)
        self._xs: torch.Tensor | None = None

        interp = dev.type == "cpu"  # the interpreter: few large programs; a GPU: many small ones
        cap = 4096 if interp else 128
        self._deg_r = _pow2(max(self.max_row_deg, 1))
        self._block_r = max(1, min(_pow2(max(m, 1)), cap, (1 << 16 if interp else 4096) // self._deg_r))
        self._block_c = min(_pow2(n), cap)
        self._grid_r = (triton.cdiv(max(m, 1), self._block_r),)
        self._grid_c = (triton.cdiv(n, self._block_c),)
        self._block_m = min(_pow2(max(m, 1)), 4096 if interp else 256)
        self._block_w = min(_pow2(self.wn), 256 if interp else 16)
        self._block_n = min(_pow2(n), 4096 if interp else 256)
        self._cand_cap = 256 if interp else 1  # candidates per program
        self._scratch_rows = max(1, _SCRATCH_BYTES // n)
        self.iterations = 0
        self.last_status = BP_CONVERGED

    # -- decoding --------------------------------------------------------------------------------

    def decode(self, syndrome: Any) -> np.ndarray:
        """Unpacked 0/1 syndrome of length m -> 0/1 correction of length n (numpy uint8)."""
        s = np.asarray(syndrome)
        if s.ndim != 1 or s.size != self.m:
            raise ValueError(f"syndrome must be a vector of {self.m} entries (one per check), got shape {s.shape}")
        if s.size and not np.isin(s, (0, 1)).all():
            bad = int(np.argmax(~np.isin(s, (0, 1))))
            raise ValueError(f"syndrome entry {bad} is {s[bad]!r}, not 0 or 1")
        return self._decode_bits(np.ascontiguousarray(s, dtype=np.uint8))

    def decode_packed(self, syndrome: bytes | bytearray | memoryview | np.ndarray) -> bytes:
        """Bit-packed syndrome (ceil(m/8) bytes) -> bit-packed correction (ceil(n/8) bytes)."""
        data = bytes(syndrome)
        if len(data) != self.syndrome_bytes:
            raise ValueError(f"syndrome has {len(data)} bytes; this H has {self.m} checks, so {self.syndrome_bytes} "
                             "bytes")
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        if bits[self.m:].any():
            raise ValueError(f"syndrome has bits set beyond its {self.m} checks")
        out = self._decode_bits(np.ascontiguousarray(bits[:self.m]))
        return np.packbits(out, bitorder="little").tobytes()

    @property
    def converged(self) -> bool:
        """Whether BP alone satisfied the last syndrome."""
        return self.last_status == BP_CONVERGED

    @property
    def log_prob_ratios(self) -> np.ndarray:
        """Posterior log-likelihood ratios of the last decode that ran BP."""
        return self._llr.cpu().numpy().copy()

    def _decode_bits(self, s: np.ndarray) -> np.ndarray:
        if INTERPRETED:  # the interpreter computes in numpy: let inf and nan arise quietly, as in C
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return self._decode(s)
        return self._decode(s)

    def _decode(self, s: np.ndarray) -> np.ndarray:
        if not s.any():  # the zero syndrome: zero correction, BP not run (as bpod.c)
            self.iterations, self.last_status = 0, BP_CONVERGED
            return np.zeros(self.n, dtype=np.uint8)
        self._syndrome.copy_(torch.from_numpy(s))
        if self._run_bp():
            self.last_status = BP_CONVERGED
            return self._hard.cpu().numpy()
        if self.osd_method != "none":
            x = self._run_osd()
            if x is not None:
                self.last_status = OSD
                return x
        self.last_status = BP_FAILED  # BP's hard decision, as bpod.c
        return self._hard.cpu().numpy()

    def _run_bp(self) -> bool:
        self._b2c.copy_(self._init_b2c)
        self._flags.zero_()
        m, n = self.m, self.n
        for it in range(1, self.max_iter + 1):
            self.iterations = it
            if self.product_sum:
                _ps_check_kernel[self._grid_r](self._row_ptr, self._b2c, self._c2b, self._tbuf, self._pre,
                                               self._syndrome, m, self.max_row_deg, BLOCK=self._block_r, **_LAUNCH)
            else:
                _ms_check_kernel[self._grid_r](self._row_ptr, self._b2c, self._c2b, self._syndrome, self._alphas,
                                               it - 1, m, BLOCK=self._block_r, DEG=self._deg_r, **_LAUNCH)
            _bit_kernel[self._grid_c](self._col_ptr, self._col_edges, self._init_llr, self._c2b, self._b2c,
                                      self._pfx, self._llr, self._hard, n, self.max_col_deg, BLOCK=self._block_c,
                                      **_LAUNCH)
            _syndrome_kernel[self._grid_r](self._row_ptr, self._col_idx, self._hard, self._syndrome, self._flags,
                                           it - 1, m, BLOCK=self._block_r, DEG=self._deg_r, **_LAUNCH)
            if int(self._flags[it - 1].item()) == 0:
                return True
        return False

    def _run_osd(self) -> np.ndarray | None:
        order = llr_order(self._llr)
        self._order.copy_(order)
        self._inv_order[order] = self._positions
        self._R.zero_()
        _pack_rows_kernel[self._grid_r](self._row_ptr, self._col_idx, self._inv_order, self._R, self.m, self.wn,
                                        BLOCK=self._block_r, DEG=self._deg_r, **_LAUNCH)
        self._syn_red.copy_(self._syndrome)
        self._row_piv.fill_(-1)
        _osd_eliminate_kernel[(1,)](self._R, self._syn_red, self._row_piv, self._nonpivots, self._counts, self.m,
                                    self.n, self.wn, BLOCK_M=self._block_m, BLOCK_W=self._block_w, **_LAUNCH)
        _, k = (int(v) for v in self._counts.cpu().tolist())
        method = "osd0" if self.osd_method == "osd0" or self.osd_order == 0 else self.osd_method
        best_cost, best, last = math.inf, None, None
        for index, chunk in enumerate(_candidate_chunks(method, k, min(self.osd_order, k), self._scratch_rows)):
            costs, ok = self._evaluate(chunk)
            if index == 0 and not ok[0]:
                return None  # OSD-0 failed: the syndrome is not in H's column space
            costs = np.where(ok != 0, costs, math.inf)
            first = int(np.argmin(costs))  # the first of the least
            if costs[first] < best_cost:  # strictly less: OSD-0, then earlier candidates, win ties
                best_cost, best = float(costs[first]), (index, first, chunk[first:first + 1])
            last = index
        assert best is not None and self._xs is not None
        if best[0] != last:  # its correction was overwritten by a later chunk: evaluate it again
            self._evaluate(best[2])
            return self._xs[0].cpu().numpy()
        return self._xs[best[1]].cpu().numpy()

    def _evaluate(self, flips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows, f = flips.shape
        if self._xs is None or self._xs.shape[0] < rows:
            self._xs = torch.empty((min(self._scratch_rows, max(rows, 64)), self.n), dtype=torch.uint8,
                                   device=self.device)
        block = min(_pow2(rows), self._cand_cap)
        flips_t = torch.from_numpy(np.ascontiguousarray(flips, dtype=np.int64)).to(self.device)
        costs = torch.empty(rows, dtype=torch.float64, device=self.device)
        ok = torch.empty(rows, dtype=torch.int32, device=self.device)
        _osd_candidates_kernel[(triton.cdiv(rows, block),)](
            flips_t, rows, f, self._nonpivots, self._order, self._R, self._syn_red, self._row_piv, self._cost,
            self._xs, costs, ok, self.m, self.n, self.wn, BLOCK_C=block, BLOCK_M=self._block_m,
            BLOCK_N=min(self._block_n, max(16, 8192 // block)), **_LAUNCH)
        return costs.cpu().numpy(), ok.cpu().numpy()


# ---- coprocessor functions -------------------------------------------------------------------


class _CssTritonBp:
    """The Python coprocessor function: decoder_id 0 decodes with Hx, 1 with Hz."""

    def __init__(self, decoders: tuple[TritonBpOsdDecoder, TritonBpOsdDecoder], name: str) -> None:
        self.decoders, self.name = decoders, name
        self._lock = threading.Lock()  # the decoders' buffers are shared between calls

    def __call__(self, decoder_id: int, payload: bytes) -> bytes:
        if decoder_id not in (0, 1):
            raise ValueError(f"{self.name}: decoder_id {decoder_id} is not 0 (Hx) or 1 (Hz)")
        with self._lock:
            return self.decoders[decoder_id].decode_packed(payload)

    def __repr__(self) -> str:
        d = self.decoders[0]
        return f"<{self.name}: Triton BP+OSD, n={d.n}, on {d.device}>"


def css_triton_bp_decoder(hx: Any, hz: Any, params: BpOsdParams | None = None, *, name: str = "bposd",
                          device: Any = None) -> CoprocessorFunction:
    """A Python coprocessor function running BP+OSD as Triton kernels: decoder_id 0 decodes Hx
    syndromes, 1 Hz syndromes; bit-packed little-endian syndrome in, packed correction out.

    A syndrome of the wrong length raises ValueError, so the round fails with an error reply.
    ``device``: None picks "cuda" when a GPU is visible, else "cpu" under TRITON_INTERPRET=1.
    """
    hx, hz = check_css(hx, hz)
    params = BpOsdParams() if params is None else params
    dev = resolve_device(device)
    fn = _CssTritonBp((TritonBpOsdDecoder(hx, params, dev), TritonBpOsdDecoder(hz, params, dev)), name)
    return CoprocessorFunction(name=name, python=fn, decoder_ids=(0, 1), reply_bits=hx.shape[1])


# ---- user-written kernels ----------------------------------------------------------------------

PLATFORMS = ("cuda", "hip", "cpu")


def _platform_device(platform: str | None, kernels: tuple[Any, ...]) -> torch.device:
    if platform is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        platform = "cpu"
        if not all(isinstance(k, InterpretedFunction) for k in kernels):
            raise RuntimeError(
                "no GPU found (torch.cuda.is_available() is False) and the kernels are not interpreted: set "
                "TRITON_INTERPRET=1 in the environment before triton is imported (and before the kernels are "
                "defined) to run them on CPU tensors, or run on a machine with a CUDA or ROCm GPU"
            )
    if platform not in PLATFORMS:
        raise ValueError(f"platform={platform!r}: choose 'cuda', 'hip', 'cpu' (the Triton interpreter) or None (auto)")
    if platform == "cpu":
        if not all(isinstance(k, InterpretedFunction) for k in kernels):
            raise RuntimeError(
                "platform='cpu' runs the kernels in the Triton interpreter: set TRITON_INTERPRET=1 in the "
                "environment before triton is imported and the kernels are defined"
            )
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"platform={platform!r}: no GPU found (torch.cuda.is_available() is False)")
    hip = getattr(torch.version, "hip", None) is not None
    if platform == "hip" and not hip:
        raise RuntimeError("platform='hip': this torch is a CUDA build; use platform='cuda'")
    if platform == "cuda" and hip:
        raise RuntimeError("platform='cuda': this torch is a ROCm build; use platform='hip'")
    return torch.device("cuda")  # torch names ROCm devices "cuda" too


class _UserKernels:
    """Calls a user kernel per message: unpack, transfer, launch on grid (1,), transfer back, pack."""

    def __init__(self, kernels: tuple[Any, ...], ms: tuple[int, ...], n: int, device: torch.device,
                 name: str) -> None:
        self.kernels, self.ms, self.n, self.device, self.name = kernels, ms, n, device, name
        self._lock = threading.Lock()

    def __call__(self, decoder_id: int, payload: bytes) -> bytes:
        if not 0 <= decoder_id < len(self.kernels):
            raise ValueError(f"{self.name}: no kernel for decoder_id {decoder_id}")
        m, n = self.ms[decoder_id], self.n
        if len(payload) != (m + 7) // 8:
            raise ValueError(f"{self.name}: syndrome has {len(payload)} bytes; {m} checks take {(m + 7) // 8}")
        bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), bitorder="little")
        if bits[m:].any():
            raise ValueError(f"{self.name}: syndrome has bits set beyond its {m} checks")
        with self._lock:
            syndrome = torch.from_numpy(np.ascontiguousarray(bits[:m])).to(self.device)
            correction = torch.zeros(n, dtype=torch.uint8, device=self.device)
            self.kernels[decoder_id][(1,)](syndrome, correction, m, n)
            out = correction.cpu().numpy() != 0
        return np.packbits(out, bitorder="little").tobytes()

    def __repr__(self) -> str:
        return f"<{self.name}: {len(self.kernels)} Triton kernel(s) on {self.device}>"


def triton_decoder(fns: Any, *, m: int | tuple[int, int], n: int, platform: str | None = None,
                   name: str = "triton") -> CoprocessorFunction:
    """A coprocessor function from your own Triton kernel(s).

    ``fns`` is one ``@triton.jit`` kernel (decoder_id 0) or a pair ``(fn_x, fn_z)`` (decoder_ids
    0 and 1). Each kernel has the signature ``kernel(syndrome_ptr, correction_ptr, m, n)`` and is
    launched on grid ``(1,)`` with a ``uint8`` tensor of the ``m`` syndrome bits (0/1) and a
    zeroed ``uint8`` tensor of ``n`` correction entries, which it fills (nonzero = flip). The
    wrapper unpacks the bit-packed little-endian syndrome, moves it to the device, launches,
    and packs the correction; a syndrome of the wrong length raises ValueError (an error reply).

    ``m`` is the number of checks (or a pair, one per kernel), ``n`` the number of qubits.
    ``platform``: "cuda", "hip", "cpu" (the Triton interpreter: TRITON_INTERPRET=1 set before
    triton is imported) or None (a GPU if visible, else the interpreter).
    """
    if isinstance(fns, (tuple, list)):
        kernels = tuple(fns)
        if len(kernels) != 2:
            raise ValueError(f"fns: give one Triton kernel or a pair (fn_x, fn_z), not {len(kernels)} functions")
    else:
        kernels = (fns,)
    for k in kernels:
        if not isinstance(k, KernelInterface):
            raise TypeError(f"{k!r} is not a Triton kernel: decorate it with @triton.jit")
    ms = tuple(m) if isinstance(m, (tuple, list)) else (m,) * len(kernels)
    if len(ms) != len(kernels):
        raise ValueError(f"m: give one check count, or one per kernel ({len(kernels)}), not {len(ms)}")
    for value, what in [*((v, "m") for v in ms), (n, "n")]:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{what}={value!r}: must be an int >= 1")
    device = _platform_device(platform, kernels)
    fn = _UserKernels(kernels, ms, n, device, name)
    return CoprocessorFunction(name=name, python=fn, decoder_ids=tuple(range(len(kernels))), reply_bits=n)
