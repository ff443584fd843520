"""Lookup-table decoding from a parity-check matrix, with CUDA-Q QEC's LUT rules (docs/decoder-lut.md).

:func:`lut_function` builds a :class:`~backline_core.DecoderFunction` (rounds and batches, one
native table each) from :class:`~backline_core.sdk.DemMatrices`; :func:`from_dem`,
:func:`from_matrices` and :func:`build` are what the ``lut`` decoder record calls;
:class:`LutDecoder` decodes syndromes of ``H`` into per-column error estimates directly.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from backline_core import DecoderFunction, InvalidArgumentError
from backline_core.sdk import DemMatrices, check_matrices, dem_matrices, encode_reply_map, reply_matrix

from .native import LIBRARY, ffi, last_error, lib
from .params import DEFAULT_MAX_TABLE_BYTES

_U64_MAX = (1 << 64) - 1


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def estimate(detectors: int, columns: int, depth: int) -> tuple[int, int]:
    """(bytes, patterns): the most a depth-``depth`` table over ``columns`` columns of ``detectors`` rows takes,
    and how many error patterns it enumerates (both saturate at 2^64 - 1)."""
    patterns = ffi.new("uint64_t *")
    need = lib.lut_estimate_bytes(detectors, columns, depth, patterns)
    return int(need), int(patterns[0])


def check_table_size(detectors: int, columns: int, depth: int, max_table_bytes: int) -> int:
    """The estimated table bytes, or :class:`InvalidArgumentError` when they exceed ``max_table_bytes``."""
    need, patterns = estimate(detectors, columns, depth)
    if need > max_table_bytes:
        many = f"more than {patterns:,}" if patterns == _U64_MAX else f"{patterns:,}"
        about = f"more than {_size(need)}" if need == _U64_MAX else f"about {_size(need)}"
        raise InvalidArgumentError(f"lut: depth {depth} over {columns:,} columns needs {about} ({many} patterns); "
                                   f"the limit is max_table_bytes={max_table_bytes}: lower depth or raise it")
    return need


def _check_params(depth: Any, max_table_bytes: Any, columns: int) -> None:
    # what the record's schema says, for callers that come here directly, and what it cannot say
    top = int(lib.LUT_MAX_DEPTH)
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= top:
        raise InvalidArgumentError(f"lut: depth={depth!r} must be an integer in [1, {top}]")
    if depth > columns:
        raise InvalidArgumentError(f"lut: depth={depth} exceeds the {columns} columns of H")
    if not isinstance(max_table_bytes, int) or isinstance(max_table_bytes, bool) or max_table_bytes < 1:
        raise InvalidArgumentError(f"lut: max_table_bytes={max_table_bytes!r} must be a positive integer")


def encode(h: np.ndarray, r: np.ndarray, depth: int, max_table_bytes: int) -> bytes:
    """The parameter blob of lut.h: header, H column-compressed, then R's reply map."""
    detectors, columns = h.shape
    cols, rows = np.nonzero(h.T)  # column-major: each column's rows in order
    col_ptr = np.zeros(columns + 1, dtype="<u4")
    np.cumsum(np.bincount(cols, minlength=columns), out=col_ptr[1:])
    header = struct.pack("<6IQ", lib.LUT_MAGIC, lib.LUT_VERSION, depth, detectors, columns, len(rows),
                         max_table_bytes)
    assert len(header) == lib.LUT_HEADER_BYTES
    return header + col_ptr.tobytes() + rows.astype("<u4").tobytes() + encode_reply_map(r)


class _Table:
    """One native table (freed with this object)."""

    def __init__(self, blob: bytes) -> None:
        t = lib.lut_create(blob, len(blob))
        if t == ffi.NULL:
            raise InvalidArgumentError(f"lut: {last_error()}")
        self._t = ffi.gc(t, lib.lut_free)
        self.entries = int(lib.lut_entries(t))
        self.reply_bytes = int(lib.lut_reply_bytes(t))

    def decode(self, packed: np.ndarray, converged: np.ndarray | None = None) -> np.ndarray:
        """(shots, syndrome bytes) packed, C-contiguous uint8 -> (shots, reply bytes) packed replies."""
        out = np.empty((packed.shape[0], self.reply_bytes), dtype=np.uint8)
        ok = ffi.NULL if converged is None else ffi.from_buffer(converged)
        if lib.lut_decode_batch(self._t, ffi.from_buffer(packed), packed.shape[0], ffi.from_buffer(out), ok) < 0:
            raise InvalidArgumentError(f"lut: {last_error()}")
        return out


def lut_function(m: DemMatrices, *, reply: str = "observables", depth: int = 1,
                 max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES, name: str = "lut") -> DecoderFunction:
    """A coprocessor function that decodes ``m.h``'s syndromes by table and replies ``R e`` (``reply``)."""
    _check_params(depth, max_table_bytes, m.num_columns)
    check_table_size(m.num_detectors, m.num_columns, depth, max_table_bytes)
    blob = encode(m.h, reply_matrix(m, reply), depth, max_table_bytes)
    table = _Table(blob)  # this process's own, for batches; the bound function builds one from the blob
    return DecoderFunction(name=name, library=LIBRARY, symbol="lut_fn", init_symbol="lut_init",
                           fini_symbol="lut_fini", context=blob, num_detectors=m.num_detectors,
                           num_observables=m.num_observables, reply=reply, batch=table.decode)


def from_matrices(m: DemMatrices, *, reply: str = "observables", depth: int = 1,
                  max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> DecoderFunction:
    """The ``lut`` record's builder from checked matrices."""
    return lut_function(m, reply=reply, depth=depth, max_table_bytes=max_table_bytes)


def from_dem(dem: Any, *, reply: str = "observables", depth: int = 1,
             max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> DecoderFunction:
    """The ``lut`` record's builder from a ``stim.DetectorErrorModel`` (the core's DEM -> matrices rule)."""
    return lut_function(dem_matrices(dem), reply=reply, depth=depth, max_table_bytes=max_table_bytes)


def _per_column(h: Any, depth: Any, max_table_bytes: Any) -> tuple[DemMatrices, int]:
    """H checked, O = identity (the reply is the error estimate itself, one bit per column), and the
    table's estimated bytes; the size is refused before the n x n identity is made."""
    a = np.asarray(h)
    if a.ndim != 2:
        raise InvalidArgumentError(f"H must be a 2-D 0/1 matrix, got shape {a.shape}")
    checked = check_matrices(a, np.zeros((1, a.shape[1]), dtype=np.uint8))
    _check_params(depth, max_table_bytes, checked.num_columns)
    need = check_table_size(checked.num_detectors, checked.num_columns, depth, max_table_bytes)
    return DemMatrices(h=checked.h, o=np.eye(checked.num_columns, dtype=np.uint8), priors=checked.priors), need


def build(h: Any, *, depth: int = 1, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> DecoderFunction:
    """A coprocessor function from an explicit ``H`` whose reply is the per-column error estimate."""
    return lut_function(_per_column(h, depth, max_table_bytes)[0], depth=depth, max_table_bytes=max_table_bytes)


class LutDecoder:
    """Decodes syndromes of ``h`` (rows: checks, columns: error mechanisms) into error estimates.

    ``decode`` answers as cudaqx's ``multi_error_lut.decode`` does: the estimate (0/1 per column)
    and whether it converged (False on a syndrome that no pattern of weight <= depth produces).
    """

    def __init__(self, h: Any, *, depth: int = 1, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> None:
        m, self.table_bytes = _per_column(h, depth, max_table_bytes)
        self.m, self.n, self.depth = m.num_detectors, m.num_columns, depth
        self._table = _Table(encode(m.h, m.o, depth, max_table_bytes))

    @property
    def entries(self) -> int:
        """Distinct nonzero syndromes in the table."""
        return self._table.entries

    def decode_batch(self, syndromes: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shots, m) 0/1 syndromes -> ((shots, n) 0/1 estimates, (shots,) bool converged)."""
        s = np.asarray(syndromes)
        if s.ndim != 2 or s.shape[1] != self.m:
            raise InvalidArgumentError(f"lut: syndromes must have shape (shots, {self.m}), got {s.shape}")
        if s.size and not np.isin(s, (0, 1)).all():
            raise InvalidArgumentError("lut: syndromes must hold only 0 and 1")
        packed = np.packbits(s.astype(np.uint8, copy=False), axis=1, bitorder="little")
        converged = np.empty(s.shape[0], dtype=np.uint8)
        errors = self._table.decode(packed, converged)
        return np.unpackbits(errors, axis=1, count=self.n, bitorder="little"), converged.astype(bool)

    def decode(self, syndrome: Any) -> tuple[np.ndarray, bool]:
        """One syndrome (m entries of 0/1) -> (n 0/1 estimate, converged)."""
        s = np.asarray(syndrome)
        if s.ndim != 1:
            raise InvalidArgumentError(f"lut: a syndrome is a vector of {self.m} entries, got shape {s.shape}")
        errors, converged = self.decode_batch(s[None, :])
        return errors[0], bool(converged[0])
