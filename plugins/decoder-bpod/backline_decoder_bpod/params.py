"""Decoder parameters, checked, and their binary form for the native decoder.

Blob layout (little-endian), read by ``bpod.c``::

    header:  u32 magic "BPOD", u32 version (1), u32 sections, u32 reserved
    section: u32 m, u32 n, u32 nnz, u32 bp_method, u32 max_iter, u32 osd_method,
             u32 osd_order, u32 reserved, f64 ms_scaling_factor,
             f64 channel_probs[n], u32 row_ptr[m + 1], u32 col_idx[nnz]   (H in CSR form)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .native import lib

MAGIC, VERSION = lib.BPOD_MAGIC, lib.BPOD_VERSION  # bpod.h's
BP_METHODS = {"min_sum": 0, "product_sum": 1}
OSD_METHODS = {"none": 0, "osd0": 1, "osd_cs": 2, "osd_e": 3}
_ALIASES = {"ms": "min_sum", "minimum_sum": "min_sum", "ps": "product_sum", "osd_0": "osd0", "osd-cs": "osd_cs",
            "osd_cs": "osd_cs", "osdcs": "osd_cs", "osd_e": "osd_e", "exhaustive": "osd_e", "osd-e": "osd_e"}


def check_matrix(h: object, name: str) -> np.ndarray:
    """``h`` as a C-contiguous uint8 0/1 matrix, or ValueError saying what is wrong."""
    a = np.asarray(h)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D parity-check matrix, got shape {a.shape}")
    if a.size and not np.isin(a, (0, 1)).all():
        bad = np.unique(a[~np.isin(a, (0, 1))])[:5]
        raise ValueError(f"{name} must be binary (0/1); it holds {bad.tolist()}")
    if a.shape[1] == 0:
        raise ValueError(f"{name} has no columns (no qubits)")
    return np.ascontiguousarray(a, dtype=np.uint8)


def check_css(hx: object, hz: object) -> tuple[np.ndarray, np.ndarray]:
    """Checked (Hx, Hz): binary, same qubit count, and commuting (Hx Hz^T = 0 mod 2)."""
    hx, hz = check_matrix(hx, "Hx"), check_matrix(hz, "Hz")
    if hx.shape[1] != hz.shape[1]:
        raise ValueError(f"Hx has {hx.shape[1]} columns but Hz has {hz.shape[1]}: both act on the same qubits")
    # float32 sums of 0/1 products are exact up to 2**24 terms, and BLAS makes this fast
    overlap = (hx.astype(np.float32) @ hz.T.astype(np.float32)) % 2
    if overlap.any():
        raise ValueError(
            f"Hx Hz^T != 0 mod 2 ({int(overlap.sum())} of {overlap.size} check pairs anticommute): "
            "these are not the checks of a CSS code"
        )
    return hx, hz


def _choice(value: str, choices: dict[str, int], what: str) -> str:
    key = _ALIASES.get(value, value) if isinstance(value, str) else value
    if key not in choices:
        raise ValueError(f"{what}={value!r}: choose one of {', '.join(choices)}")
    return key


@dataclass(frozen=True)
class BpOsdParams:
    """The settings of a BP(+OSD) decoder, as ``ldpc.BpOsdDecoder`` names them."""

    bp_method: str = "min_sum"
    max_iter: int = 10
    ms_scaling_factor: float = 0.625
    osd_method: str = "osd0"
    osd_order: int = 0
    error_rate: float | None = 0.05
    channel_probs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "bp_method", _choice(self.bp_method, BP_METHODS, "bp_method"))
        object.__setattr__(self, "osd_method", _choice(self.osd_method, OSD_METHODS, "osd_method"))
        if not isinstance(self.max_iter, int) or isinstance(self.max_iter, bool) or not 0 <= self.max_iter < 2**31:
            raise ValueError(f"max_iter={self.max_iter!r}: must be an int >= 0 (0 means n iterations, as in ldpc)")
        if not isinstance(self.osd_order, int) or isinstance(self.osd_order, bool) or not 0 <= self.osd_order <= 60:
            raise ValueError(f"osd_order={self.osd_order!r}: must be an int from 0 to 60")
        if self.osd_method == "osd_e" and self.osd_order > 20:
            raise ValueError(f"osd_order={self.osd_order} with osd_e tries 2**{self.osd_order} candidates per decode; "
                             "use at most 20, or osd_cs")
        if not 0.0 <= float(self.ms_scaling_factor) <= 1.0:
            raise ValueError(f"ms_scaling_factor={self.ms_scaling_factor!r}: must be in [0, 1] (0: adaptive, as in ldpc)")
        if self.channel_probs is None:
            if self.error_rate is None or not 0.0 < float(self.error_rate) < 1.0:
                raise ValueError(f"error_rate={self.error_rate!r}: must be in (0, 1), or give channel_probs")
        else:
            probs = tuple(float(p) for p in self.channel_probs)
            if not all(0.0 < p < 1.0 for p in probs):
                raise ValueError("channel_probs must all be in (0, 1)")
            object.__setattr__(self, "channel_probs", probs)

    def probs(self, n: int) -> np.ndarray:
        if self.channel_probs is None:
            return np.full(n, float(self.error_rate))
        if len(self.channel_probs) != n:
            raise ValueError(f"channel_probs has {len(self.channel_probs)} entries but the code has {n} qubits")
        return np.asarray(self.channel_probs, dtype=np.float64)


def encode(matrices: Sequence[np.ndarray], params: BpOsdParams) -> bytes:
    """The native blob for one decoder per matrix, all with ``params``."""
    parts = [struct.pack("<4I", MAGIC, VERSION, len(matrices), 0)]
    for h in matrices:
        m, n = h.shape
        rows, cols = np.nonzero(h)
        row_ptr = np.zeros(m + 1, dtype="<u4")
        np.cumsum(np.bincount(rows, minlength=m), out=row_ptr[1:])
        parts.append(struct.pack("<8Id", m, n, len(cols), BP_METHODS[params.bp_method], params.max_iter,
                                 OSD_METHODS[params.osd_method], params.osd_order, 0, float(params.ms_scaling_factor)))
        parts.append(params.probs(n).astype("<f8").tobytes())
        parts.append(row_ptr.tobytes())
        parts.append(cols.astype("<u4").tobytes())
    return b"".join(parts)


def check_osd_order(h: np.ndarray, params: BpOsdParams, name: str) -> None:
    """Refuse an OSD order past the columns OSD can search: n - rank(H) (ldpc corrupts its heap there)."""
    if params.osd_method in ("osd_cs", "osd_e") and params.osd_order > 0:
        from .codes import gf2_rank

        free = h.shape[1] - gf2_rank(h)
        if params.osd_order > free:
            raise ValueError(f"{name}: osd_order={params.osd_order} is more than columns - rank(H) = {h.shape[1]} - "
                             f"{h.shape[1] - free} = {free}; give at most {free}")


def schema_properties() -> dict[str, dict[str, object]]:
    """The parameters of ``bposd`` and ``bp`` as JSON Schema properties, from this module's checks."""
    fields = BpOsdParams()
    return {
        "bp_method": {"type": "string", "default": fields.bp_method,
                      "enum": sorted(set(BP_METHODS) | {k for k, v in _ALIASES.items() if v in BP_METHODS}),
                      "description": "BP's check-node rule (ldpc's names and ours)"},
        "max_iter": {"type": "integer", "default": fields.max_iter, "minimum": 0, "maximum": 2**31 - 1,
                     "description": "BP iterations (0: n, as in ldpc)"},
        "ms_scaling_factor": {"type": "number", "default": fields.ms_scaling_factor, "minimum": 0, "maximum": 1,
                              "description": "min-sum scaling factor (0: adaptive, as in ldpc)"},
        "osd_method": {"type": "string", "default": fields.osd_method,
                       "enum": sorted(set(OSD_METHODS) | {k for k, v in _ALIASES.items() if v in OSD_METHODS}),
                       "description": "OSD when BP does not converge (none: BP alone)"},
        "osd_order": {"type": "integer", "default": fields.osd_order, "minimum": 0, "maximum": 60,
                      "description": "OSD search depth (at most n - rank(H); 20 for osd_e)"},
        "error_rate": {"type": ["number", "null"], "default": None, "exclusiveMinimum": 0, "exclusiveMaximum": 1,
                       "description": "Hx/Hz builds: every qubit's prior (default 0.05); a DEM carries its own"},
        "channel_probs": {"type": ["array", "null"], "default": None, "items": {"type": "number"},
                          "description": "Hx/Hz builds: each qubit's prior"},
        "platform": {"type": "string", "default": "cpu", "enum": ["cpu", "triton"],
                     "description": "native C, or Triton kernels (Hx/Hz builds)"},
    }
