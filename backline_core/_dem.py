"""A detector error model as matrices: the one DEM -> (H, O, priors) conversion.

Every decoder that wants matrices gets them here, so two decoders given one DEM see the same
columns. The rule is ``ldpc.ckt_noise``'s: the error mechanisms of ``dem.flattened()`` in
order; the components of a decomposed mechanism (``D0 D1 ^ D2 D3``) are XORed into one
detector set; mechanisms with the same detector set are merged into one column with
``p = p1 (1 - p2) + p2 (1 - p1)``; columns keep the order in which their detector set first
appears; a mechanism of probability 0 is dropped. When mechanisms merged into one column flip
different observables, the column keeps the observables of the most probable of them
(``observable_conflicts`` counts them; ldpc keeps the last one's).

``H`` is detectors x columns, ``O`` observables x columns, both uint8 0/1. A decoder that needs
the DEM's own decomposition (matching) takes the DEM, not these.

The reply of a decoder built from matrices is ``R e mod 2`` for its error estimate ``e``:
:func:`reply_matrix` makes ``R``, :func:`encode_reply_map` its native form, which
``backline/sdk/dem_reply.h`` reads. Bit layout of a reply, packed LSB first (bit ``i`` is bit
``i % 8`` of byte ``i // 8``):

- ``reply="observables"``: bit ``k`` = flip of observable ``k`` (``num_observables`` bits);
- ``reply="observables+detectors"``: those bits, then bit ``num_observables + d`` = flip of
  detector ``d`` caused by the committed part of the correction (``commit`` selects columns).

>>> import stim
>>> m = dem_matrices(stim.DetectorErrorModel("error(0.1) D0 L0\\nerror(0.2) D0 D1\\nerror(0.1) D0 L0"))
>>> m.h.tolist(), m.o.tolist(), m.priors.round(3).tolist()
([[1, 1], [0, 1]], [[1, 0]], [0.18, 0.2])
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import InvalidArgumentError
from ._hookspecs import REPLIES

if TYPE_CHECKING:  # stim is an optional dependency of the core: imported where a DEM is read
    import stim


#: A merged prior that reaches 1 (never from a valid DEM, but rounding) is held just below it.
_P_MAX = 1.0 - 1e-12


@dataclass(frozen=True, eq=False)
class DemMatrices:
    """``h`` (detectors x columns) and ``o`` (observables x columns), uint8 0/1, and ``priors``."""

    h: np.ndarray
    o: np.ndarray
    priors: np.ndarray
    #: mechanisms merged into a column that flip observables other than the column's
    observable_conflicts: int = 0

    @property
    def num_detectors(self) -> int:
        return int(self.h.shape[0])

    @property
    def num_observables(self) -> int:
        return int(self.o.shape[0])

    @property
    def num_columns(self) -> int:
        return int(self.h.shape[1])


def _binary(a: Any, name: str) -> np.ndarray:
    try:
        m = np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{name} is not a matrix: {exc}") from None
    if m.ndim != 2:
        raise InvalidArgumentError(f"{name} must be a 2-D 0/1 matrix, got shape {m.shape}")
    if m.size and not np.isin(m, (0, 1)).all():
        raise InvalidArgumentError(f"{name} must hold only 0 and 1; it holds {np.unique(m[~np.isin(m, (0, 1))])[:5].tolist()}")
    return np.ascontiguousarray(m, dtype=np.uint8)


def check_matrices(h: Any, o: Any, priors: Any = None, *, default_prior: float = 0.01) -> DemMatrices:
    """Explicit (H, O, priors) checked: binary, one column count, priors in (0, 1).

    ``priors`` None gives every column ``default_prior``. A code with no detectors or no
    observables is refused, as :func:`dem_matrices` refuses such a DEM."""
    h, o = _binary(h, "H"), _binary(o, "O")
    if h.shape[1] != o.shape[1]:
        raise InvalidArgumentError(f"H has {h.shape[1]} columns but O has {o.shape[1]}: both index the same "
                                   "error mechanisms")
    if h.shape[0] == 0 or h.shape[1] == 0:
        raise InvalidArgumentError(f"H has shape {h.shape}: a decoder needs at least one detector and one error "
                                   "mechanism")
    if o.shape[0] == 0:
        raise InvalidArgumentError("O has no rows: there is no observable to predict (give O, observables x columns)")
    if priors is None:
        p = np.full(h.shape[1], float(default_prior))
    else:
        try:
            p = np.asarray(priors, dtype=np.float64).ravel()
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"priors are not numbers: {exc}") from None
        if p.size != h.shape[1]:
            raise InvalidArgumentError(f"priors has {p.size} entries but H has {h.shape[1]} columns")
        if not (np.isfinite(p).all() and (p > 0).all() and (p < 1).all()):
            raise InvalidArgumentError("priors must all be in (0, 1)")
    return DemMatrices(h=h, o=o, priors=p)


def check_dem(dem: Any) -> stim.DetectorErrorModel:
    """``dem`` if it is a DEM a decoder can be built from: it has detectors and observables."""
    import stim

    if not isinstance(dem, stim.DetectorErrorModel):
        raise InvalidArgumentError(f"expected a stim.DetectorErrorModel, not {type(dem).__name__} "
                                   "(circuit.detector_error_model(decompose_errors=True) makes one)")
    if dem.num_detectors == 0:
        raise InvalidArgumentError("the detector error model has no detectors: there is nothing to decode")
    if dem.num_observables == 0:
        raise InvalidArgumentError("the detector error model has no observables (no OBSERVABLE_INCLUDE in the "
                                   "circuit): a decoder predicts observable flips, so give it one")
    return dem


def _xor(groups: list[list[int]]) -> frozenset[int]:
    out: set[int] = set()
    for group in groups:
        out.symmetric_difference_update(group)
    return frozenset(out)


def dem_matrices(dem: stim.DetectorErrorModel) -> DemMatrices:
    """The check matrix, observables matrix and priors of ``dem`` (see the module docstring)."""
    dem = check_dem(dem)
    columns: dict[frozenset[int], int] = {}
    priors: list[float] = []
    observables: list[frozenset[int]] = []
    best: list[float] = []
    conflicts = 0
    for inst in dem.flattened():
        if inst.type != "error":
            continue  # detector and logical_observable declarations carry no errors
        p = float(inst.args_copy()[0])
        if p <= 0.0:
            continue
        dets: list[list[int]] = [[]]
        obs: list[list[int]] = [[]]
        for t in inst.targets_copy():
            if t.is_separator():
                dets.append([])
                obs.append([])
            elif t.is_relative_detector_id():
                dets[-1].append(t.val)
            elif t.is_logical_observable_id():
                obs[-1].append(t.val)
        d, o = _xor(dets), _xor(obs)
        j = columns.get(d)
        if j is None:
            columns[d] = len(priors)
            priors.append(p)
            observables.append(o)
            best.append(p)
            continue
        q = priors[j]
        priors[j] = q * (1.0 - p) + p * (1.0 - q)
        if o != observables[j]:
            conflicts += 1
            if p > best[j]:
                observables[j], best[j] = o, p
    n = len(priors)
    if n == 0:
        raise InvalidArgumentError("the detector error model has no error mechanism of nonzero probability")
    h = np.zeros((dem.num_detectors, n), dtype=np.uint8)
    o = np.zeros((dem.num_observables, n), dtype=np.uint8)
    for d, j in columns.items():
        h[list(d), j] = 1
        o[list(observables[j]), j] = 1
    return DemMatrices(h=h, o=o, priors=np.minimum(np.asarray(priors, dtype=np.float64), _P_MAX),
                       observable_conflicts=conflicts)


def check_reply(reply: str) -> str:
    """``reply`` if it is one of :data:`REPLIES`."""
    if reply not in REPLIES:
        raise InvalidArgumentError(f"reply={reply!r}: choose one of {', '.join(map(repr, REPLIES))}")
    return reply


def reply_bits(num_detectors: int, num_observables: int, reply: str) -> int:
    """The width of a reply in bits (see the module docstring)."""
    return num_observables + (num_detectors if check_reply(reply) == "observables+detectors" else 0)


def reply_matrix(m: DemMatrices, reply: str = "observables", commit: Any = None) -> np.ndarray:
    """``R`` (reply bits x columns): a reply is ``R e mod 2`` for the error estimate ``e``.

    ``commit`` (a boolean mask of columns, or None for all) keeps only the committed columns:
    a window decoder's reply then says what its committed correction does."""
    r = m.o if check_reply(reply) == "observables" else np.vstack([m.o, m.h])
    if commit is not None:
        mask = np.asarray(commit, dtype=bool).ravel()
        if mask.size != m.num_columns:
            raise InvalidArgumentError(f"commit has {mask.size} entries but there are {m.num_columns} columns")
        r = r * mask[None, :].astype(np.uint8)
    return np.ascontiguousarray(r, dtype=np.uint8)


def encode_reply_map(r: np.ndarray) -> bytes:
    """``R`` as ``dem_reply.h`` reads it: ``u32 bits, u32 columns, u32 nnz, u32 col_ptr[columns + 1],
    u32 rows[nnz]`` little-endian (R in compressed-column form)."""
    r = _binary(r, "R")
    bits, columns = r.shape
    cols, rows = np.nonzero(r.T)  # column-major: rows of each column in order
    col_ptr = np.zeros(columns + 1, dtype="<u4")
    np.cumsum(np.bincount(cols, minlength=columns), out=col_ptr[1:])
    return struct.pack("<3I", bits, columns, len(rows)) + col_ptr.tobytes() + rows.astype("<u4").tobytes()
