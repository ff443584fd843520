"""CSS codes as dense ``uint8`` parity-check matrices, and the GF(2) algebra they need.

Everything here is pure numpy. A code is a :class:`CSSCode`: an ``hx`` matrix whose rows
are the X checks, an ``hz`` matrix whose rows are the Z checks, both over the same ``n``
qubits, optionally with logical operators ``lx``, ``lz`` (``lx @ lz.T = I`` over GF(2), the
convention of the project's ``data/codes/*.npz``) and a distance ``d``.

Constructors:

- :func:`repetition_code` -- the ``(n-1) x n`` check matrix of a length-``n`` repetition code.
- :func:`hypergraph_product` -- the hypergraph product of two classical codes.
- :func:`toric_code` -- the ``[[2L^2, 2, L]]`` toric code.
- :func:`bivariate_bicycle` and :func:`gross_code` -- the bivariate bicycle codes of
  Bravyi et al. 2024, among them the ``[[144, 12, 12]]`` gross code.
- :func:`named_code` -- any of the above by name (``"steane"``, ``"toric-4"``, ...).

Example:

    >>> from backline_decoder_bpod.codes import named_code
    >>> code = named_code("hgp13")
    >>> code
    CSSCode(name='hgp13', n=13, k=1, d=3, hx=6x13, hz=6x13, lx=1x13, lz=1x13)
    >>> code.hx.dtype, code.hx.flags.c_contiguous
    (dtype('uint8'), True)
    >>> int((code.hx @ code.hz.T % 2).sum())
    0
"""

from __future__ import annotations

import dataclasses
import operator
import os
import re
from collections.abc import Iterable, Sequence
from functools import cached_property

import numpy as np

__all__ = [
    "CSSCode",
    "bivariate_bicycle",
    "css_memory_circuit",
    "css_logicals",
    "gf2_nullspace",
    "gf2_rank",
    "gross_code",
    "hypergraph_product",
    "named_code",
    "repetition_code",
    "toric_code",
]


# --------------------------------------------------------------------------------------------
# GF(2) linear algebra
# --------------------------------------------------------------------------------------------

def _as_gf2(M, what: str = "M") -> np.ndarray:
    """``M`` as a 2-D ``uint8`` array of its entries mod 2 (integer or bool input only)."""
    arr = np.asarray(M)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-D matrix, got a {arr.ndim}-D array of shape {arr.shape}")
    if arr.dtype.kind not in "biu":
        raise TypeError(f"{what} must hold integers or bools, got dtype {arr.dtype}")
    return (arr & 1).astype(np.uint8, copy=False)


def _eliminate(M: np.ndarray, *, reduced: bool) -> tuple[np.ndarray, list[int]]:
    """Gaussian elimination over GF(2) on bit-packed rows.

    ``M`` is a 2-D 0/1 ``uint8`` array. Returns ``(B, pivots)``: ``B`` holds the echelon form
    (row-reduced when ``reduced``) as big-endian packed bytes, one row per row of ``M``
    (``np.unpackbits(B, axis=1, count=n)`` restores it), and ``pivots`` lists the pivot
    column of rows ``0 .. len(pivots)-1``. The pivots are the greedy left-to-right choice, so
    the pivot columns of ``M`` are the first maximal independent set of its columns.
    """
    m, n = M.shape
    words = max(1, -(-n // 64))
    B = np.zeros((m, words * 8), dtype=np.uint8)
    B[:, : (n + 7) // 8] = np.packbits(M, axis=1)
    P = B.view(np.uint64)  # XOR 64 columns at a time; B and P share memory.
    pivots: list[int] = []
    r = 0
    for j in range(n):
        if r == m:
            break
        byte, shift, word = j >> 3, 7 - (j & 7), j >> 6
        hits = np.flatnonzero((B[r:, byte] >> shift) & 1)
        if hits.size == 0:
            continue
        p = r + int(hits[0])
        if p != r:
            P[[r, p]] = P[[p, r]]
        # After the swap, rows r+hits[1:] are exactly the other rows at or below r with bit j.
        rows = r + hits[1:]
        if reduced:
            rows = np.concatenate([np.flatnonzero((B[:r, byte] >> shift) & 1), rows])
        if rows.size:
            # Row r is zero left of column j, so only words from j's onward change.
            P[rows, word:] ^= P[r, word:]
        pivots.append(j)
        r += 1
    return B, pivots


def gf2_rank(M) -> int:
    """The rank of a binary matrix over GF(2).

    Entries are taken mod 2. Rows are bit-packed into 64-bit words, so a 1000 x 1000
    matrix takes a few tens of milliseconds.

    Args:
        M: a 2-D array-like of integers or bools.

    Returns:
        The GF(2) rank, as a Python ``int``.

    Examples:
        >>> from backline_decoder_bpod.codes import gf2_rank
        >>> gf2_rank([[1, 1, 0], [0, 1, 1], [1, 0, 1]])  # rows sum to zero mod 2
        2
        >>> gf2_rank([[1, 0], [0, 1]])
        2
        >>> gf2_rank([[2, 4]])  # even entries are zero over GF(2)
        0
    """
    A = _as_gf2(M)
    if A.shape[0] > A.shape[1]:
        A = A.T  # the loop runs over columns; rank(M) = rank(M^T)
    return len(_eliminate(A, reduced=False)[1])


def gf2_nullspace(M) -> np.ndarray:
    """A basis of the right kernel ``{x : M @ x = 0 (mod 2)}`` of a binary matrix.

    Args:
        M: a 2-D array-like of integers or bools, shape ``(m, n)``.

    Returns:
        A ``uint8`` array of shape ``(n - rank(M), n)`` whose rows are the basis vectors:
        one per non-pivot column ``f`` of the reduced row echelon form, with a 1 at ``f``.

    Examples:
        >>> import numpy as np
        >>> from backline_decoder_bpod.codes import gf2_nullspace, repetition_code
        >>> H = repetition_code(3)
        >>> N = gf2_nullspace(H)
        >>> N
        array([[1, 1, 1]], dtype=uint8)
        >>> int((H @ N.T % 2).sum())
        0
        >>> gf2_nullspace(np.eye(2, dtype=np.uint8)).shape
        (0, 2)
    """
    A = _as_gf2(M)
    n = A.shape[1]
    B, pivots = _eliminate(A, reduced=True)
    r = len(pivots)
    R = np.unpackbits(B[:r], axis=1, count=n)
    free = np.setdiff1d(np.arange(n), pivots)
    N = np.zeros((free.size, n), dtype=np.uint8)
    N[np.arange(free.size), free] = 1
    N[:, pivots] = R[:, free].T
    return N


def _gf2_inverse(M: np.ndarray) -> np.ndarray:
    k = M.shape[0]
    aug = np.hstack([M, np.eye(k, dtype=np.uint8)])
    B, pivots = _eliminate(aug, reduced=True)
    if pivots[:k] != list(range(k)):
        raise ValueError("matrix is singular over GF(2)")
    return np.unpackbits(B, axis=1, count=2 * k)[:, k:]


def _gf2_product_nonzeros(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices ``(i, j)`` where ``a[i] . b[j]`` is odd, for 0/1 matrices ``a``, ``b``."""
    if a.shape[1] < 2**24:  # float32 sums of 0/1 products are exact below 2^24 terms
        prod = a.astype(np.float32) @ b.T.astype(np.float32)
        odd = prod.astype(np.int64) & 1
    else:  # uint8 wraps mod 256, which keeps the parity
        odd = (a @ b.T) & 1
    return np.argwhere(odd)


def css_logicals(hx, hz) -> tuple[np.ndarray, np.ndarray]:
    """Logical operators ``(lx, lz)`` of the CSS code ``(hx, hz)``, paired so ``lx @ lz.T = I``.

    ``lx`` rows lie in ker(hz) outside the row space of ``hx``; ``lz`` rows lie in ker(hx)
    outside the row space of ``hz``; there are ``k`` of each. They are a basis, not a
    minimum-weight choice.

    Examples:
        >>> import numpy as np
        >>> from backline_decoder_bpod.codes import css_logicals, toric_code
        >>> code = toric_code(3)
        >>> lx, lz = css_logicals(code.hx, code.hz)
        >>> lx.shape, lz.shape
        ((2, 18), (2, 18))
        >>> print(lx @ lz.T % 2)
        [[1 0]
         [0 1]]
    """
    hx, hz = _as_gf2(hx, "hx"), _as_gf2(hz, "hz")

    def reps(h_same, h_other):
        # Greedily extend the row space of h_same by kernel vectors of h_other.
        kernel = gf2_nullspace(h_other)
        stack = np.vstack([h_same, kernel])
        pivots = _eliminate(np.ascontiguousarray(stack.T), reduced=False)[1]
        return kernel[[p - h_same.shape[0] for p in pivots if p >= h_same.shape[0]]]

    lx, lz = reps(hx, hz), reps(hz, hx)
    pairing = (lx.astype(np.int64) @ lz.T.astype(np.int64) & 1).astype(np.uint8)
    lz = (_gf2_inverse(pairing).T.astype(np.int64) @ lz & 1).astype(np.uint8)
    return lx, lz


# --------------------------------------------------------------------------------------------
# CSSCode
# --------------------------------------------------------------------------------------------

def _check_binary_matrix(x, label: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{label} must be a 2-D matrix, got a {arr.ndim}-D array of shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{label} must be a numeric 0/1 matrix, got dtype {arr.dtype}")
    bad = np.argwhere((arr != 0) & (arr != 1))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"{label} must be binary (0/1): {len(bad)} entries are not, "
            f"the first is {label}[{i}, {j}] = {arr[i, j].item()!r}"
        )
    return arr


def _frozen_uint8(arr: np.ndarray) -> np.ndarray:
    out = np.array(arr, dtype=np.uint8, order="C", copy=True)
    out.setflags(write=False)
    return out


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CSSCode:
    """A CSS code given by its X- and Z-check matrices.

    Construction validates (see :meth:`validate`) and stores C-contiguous, read-only
    ``uint8`` copies of the matrices. Instances compare by identity.

    Attributes:
        name: a label for reports.
        hx: the X checks, shape ``(mx, n)``; row ``i`` is the support of X stabilizer ``i``.
        hz: the Z checks, shape ``(mz, n)``.
        lx: optional X logical operators, shape ``(kx, n)``, each in ker(hz).
        lz: optional Z logical operators, shape ``(kz, n)``, each in ker(hx); when both are
            given, ``lx @ lz.T`` must be the identity mod 2.
        d: the distance if known, else ``None``.

    Examples:
        >>> from backline_core.sdk import STEANE_H
        >>> from backline_decoder_bpod.codes import CSSCode
        >>> code = CSSCode("steane", hx=STEANE_H, hz=STEANE_H, d=3)
        >>> code.n, code.k, code.d
        (7, 1, 3)
        >>> CSSCode("bad", hx=[[1, 1, 0]], hz=[[1, 0, 0]])
        Traceback (most recent call last):
            ...
        ValueError: hx and hz do not commute: hx @ hz.T % 2 has 1 nonzero entry (of 1x1), the first at hx row 0, hz row 0
    """

    name: str
    hx: np.ndarray
    hz: np.ndarray
    lx: np.ndarray | None = None
    lz: np.ndarray | None = None
    d: int | None = None

    def __post_init__(self) -> None:
        for field in ("hx", "hz", "lx", "lz"):
            value = getattr(self, field)
            if value is None and field in ("lx", "lz"):
                continue
            object.__setattr__(self, field, _frozen_uint8(_check_binary_matrix(value, field)))
        if self.d is not None:
            if isinstance(self.d, bool):
                raise ValueError(f"d must be an int or None, got {self.d!r}")
            object.__setattr__(self, "d", operator.index(self.d))
        self._check_structure()

    @property
    def n(self) -> int:
        """The number of physical qubits (columns of ``hx``)."""
        return int(self.hx.shape[1])

    @cached_property
    def k(self) -> int:
        """The number of logical qubits, ``n - rank(hx) - rank(hz)`` over GF(2)."""
        return self.n - gf2_rank(self.hx) - gf2_rank(self.hz)

    def validate(self) -> CSSCode:
        """Check the code and return it.

        Raises:
            ValueError: a matrix is not 2-D or not 0/1; ``hx``, ``hz`` (and ``lx``, ``lz`` if
                given) have different column counts; ``hx @ hz.T % 2`` is not zero (the
                message gives the number of nonzero entries); a logical operator does not
                commute with the opposite checks; ``lx @ lz.T % 2`` is not the identity;
                ``d`` is negative.
        """
        for field in ("hx", "hz", "lx", "lz"):
            value = getattr(self, field)
            if value is not None:
                _check_binary_matrix(value, field)
        self._check_structure()
        return self

    def _check_structure(self) -> None:
        hx, hz, lx, lz = self.hx, self.hz, self.lx, self.lz
        n = hx.shape[1]
        for label, mat in (("hz", hz), ("lx", lx), ("lz", lz)):
            if mat is not None and mat.shape[1] != n:
                raise ValueError(
                    f"hx has {n} columns but {label} has {mat.shape[1]}; "
                    "all must act on the same n qubits"
                )
        for a_label, a, b_label, b, what in (
            ("hx", hx, "hz", hz, "hx and hz do not commute"),
            ("hz", hz, "lx", lx, "lx does not commute with the Z checks"),
            ("hx", hx, "lz", lz, "lz does not commute with the X checks"),
        ):
            if b is None:
                continue
            bad = _gf2_product_nonzeros(a, b)
            if len(bad):
                i, j = (int(v) for v in bad[0])
                entries = "entry" if len(bad) == 1 else "entries"
                raise ValueError(
                    f"{what}: {a_label} @ {b_label}.T % 2 has {len(bad)} nonzero {entries} "
                    f"(of {a.shape[0]}x{b.shape[0]}), the first at {a_label} row {i}, {b_label} row {j}"
                )
        if lx is not None and lz is not None:
            pairing = (lx.astype(np.int64) @ lz.T.astype(np.int64)) & 1
            if pairing.shape[0] != pairing.shape[1] or not np.array_equal(
                pairing, np.eye(pairing.shape[0], dtype=np.int64)
            ):
                raise ValueError(
                    f"lx @ lz.T % 2 must be the identity (paired logicals), got a "
                    f"{pairing.shape[0]}x{pairing.shape[1]} matrix that is not"
                )
        if self.d is not None and self.d < 0:
            raise ValueError(f"d must be >= 0, got {self.d}")

    @classmethod
    def from_npz(cls, path: str | os.PathLike, name: str | None = None) -> CSSCode:
        """Load a code from an ``.npz`` with keys ``Hx``, ``Hz`` and optional ``Lx``, ``Lz``, ``d``.

        If the file also holds ``n`` or ``k``, they must match the matrices. ``name``
        defaults to the file's stem.

        Raises:
            ValueError: a required key is missing, the code is invalid, or ``n``/``k`` disagree.
        """
        with np.load(path, allow_pickle=False) as data:
            missing = [key for key in ("Hx", "Hz") if key not in data.files]
            if missing:
                raise ValueError(f"{path}: missing {', '.join(missing)}; it holds {sorted(data.files)}")
            arrays = {key: data[key] for key in data.files}
        code = cls(
            name=name if name is not None else os.path.splitext(os.path.basename(os.fspath(path)))[0],
            hx=arrays["Hx"],
            hz=arrays["Hz"],
            lx=arrays.get("Lx"),
            lz=arrays.get("Lz"),
            d=int(arrays["d"]) if "d" in arrays else None,
        )
        for key, actual in (("n", lambda: code.n), ("k", lambda: code.k)):
            if key in arrays and int(arrays[key]) != actual():
                raise ValueError(f"{path}: stores {key}={int(arrays[key])} but the matrices give {key}={actual()}")
        return code

    def __repr__(self) -> str:
        def shape(a):
            return "None" if a is None else f"{a.shape[0]}x{a.shape[1]}"

        return (
            f"CSSCode(name={self.name!r}, n={self.n}, k={self.k}, d={self.d}, "
            f"hx={shape(self.hx)}, hz={shape(self.hz)}, lx={shape(self.lx)}, lz={shape(self.lz)})"
        )


# --------------------------------------------------------------------------------------------
# Constructions
# --------------------------------------------------------------------------------------------

def _positive_int(value, what: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {value!r}")
    value = operator.index(value)
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


def repetition_code(n: int) -> np.ndarray:
    """The ``(n-1) x n`` check matrix of the length-``n`` repetition code (checks ``x_i + x_{i+1}``).

    Examples:
        >>> from backline_decoder_bpod.codes import repetition_code
        >>> print(repetition_code(4))
        [[1 1 0 0]
         [0 1 1 0]
         [0 0 1 1]]
    """
    n = _positive_int(n, "n", 2)
    H = np.zeros((n - 1, n), dtype=np.uint8)
    i = np.arange(n - 1)
    H[i, i] = 1
    H[i, i + 1] = 1
    return H


def _cyclic_repetition_code(L: int) -> np.ndarray:
    """The ``L x L`` circulant check matrix ``1 + x`` (checks ``x_i + x_{i+1 mod L}``)."""
    return (np.eye(L, dtype=np.uint8) + np.roll(np.eye(L, dtype=np.uint8), 1, axis=1)) & 1


def hypergraph_product(h1, h2, *, name: str = "hypergraph-product", d: int | None = None) -> CSSCode:
    """The hypergraph product of the classical codes with check matrices ``h1`` and ``h2``.

    With ``h1`` of shape ``(m1, n1)`` and ``h2`` of shape ``(m2, n2)``, the code has
    ``n = n1*n2 + m1*m2`` qubits (the ``n1 x n2`` grid first, row-major, then the
    ``m1 x m2`` grid) and

        Hx = [H1 (x) I_n2 | I_m1 (x) H2^T],    Hz = [I_n1 (x) H2 | H1^T (x) I_m2].

    The distance is not computed; pass ``d`` if it is known.

    Examples:
        >>> from backline_decoder_bpod.codes import hypergraph_product, repetition_code
        >>> code = hypergraph_product(repetition_code(3), repetition_code(3))
        >>> code.n, code.k, code.hx.shape, code.hz.shape
        (13, 1, (6, 13), (6, 13))
        >>> hypergraph_product(repetition_code(5), repetition_code(5)).n
        41
    """
    h1 = _check_binary_matrix(h1, "h1").astype(np.uint8)
    h2 = _check_binary_matrix(h2, "h2").astype(np.uint8)
    (m1, n1), (m2, n2) = h1.shape, h2.shape

    def eye(k):
        return np.eye(k, dtype=np.uint8)

    hx = np.hstack([np.kron(h1, eye(n2)), np.kron(eye(m1), h2.T)])
    hz = np.hstack([np.kron(eye(n1), h2), np.kron(h1.T, eye(m2))])
    return CSSCode(name=name, hx=hx, hz=hz, d=d)


def _grid_logicals(n1: int, n2: int, m1: int, m2: int):
    """Weight-``n2`` X and weight-``n1`` Z logicals of the product of two codes whose
    all-ones vectors are codewords (repetition codes): ``e_0 (x) 1`` and ``1 (x) e_0``."""
    n = n1 * n2 + m1 * m2
    lx = np.zeros(n, dtype=np.uint8)
    lz = np.zeros(n, dtype=np.uint8)
    lx[:n2] = 1                 # row 0 of the n1 x n2 grid
    lz[: n1 * n2 : n2] = 1      # column 0 of the n1 x n2 grid
    return lx, lz


def toric_code(L: int) -> CSSCode:
    """The ``[[2L^2, 2, L]]`` toric code on an ``L x L`` torus, with paired weight-``L`` logicals.

    Built as the hypergraph product of two cyclic length-``L`` repetition codes
    (``L x L`` circulant ``1 + x``): qubits ``0 .. L^2-1`` are one edge orientation,
    ``L^2 .. 2L^2-1`` the other.

    Examples:
        >>> from backline_decoder_bpod.codes import toric_code
        >>> toric_code(4)
        CSSCode(name='toric-4', n=32, k=2, d=4, hx=16x32, hz=16x32, lx=2x32, lz=2x32)
    """
    L = _positive_int(L, "L", 2)
    C = _cyclic_repetition_code(L)
    base = hypergraph_product(C, C)
    # X: e0 (x) 1 on the first sector and 1 (x) e0 on the second; Z: the transposed pair.
    lx1, lz1 = _grid_logicals(L, L, 0, 0)
    zeros = np.zeros(L * L, dtype=np.uint8)
    lx = np.vstack([np.concatenate([lx1, zeros]), np.concatenate([zeros, lz1])])
    lz = np.vstack([np.concatenate([lz1, zeros]), np.concatenate([zeros, lx1])])
    return CSSCode(name=f"toric-{L}", hx=base.hx, hz=base.hz, lx=lx, lz=lz, d=L)


def _hgp_repetition(N: int, name: str) -> CSSCode:
    N = _positive_int(N, "N", 2)
    H = repetition_code(N)
    base = hypergraph_product(H, H)
    lx, lz = _grid_logicals(N, N, N - 1, N - 1)
    return CSSCode(name=name, hx=base.hx, hz=base.hz, lx=lx[None, :], lz=lz[None, :], d=N)


def _monomial(term, l: int, m: int) -> np.ndarray:
    ok = isinstance(term, (tuple, list)) and len(term) == 2
    if ok and term[0] in ("x", "y") and isinstance(term[1], (int, np.integer)) and not isinstance(term[1], bool):
        i, j = (int(term[1]), 0) if term[0] == "x" else (0, int(term[1]))
    elif ok and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in term):
        i, j = int(term[0]), int(term[1])
    else:
        raise ValueError(f"bad term {term!r}: expected ('x', p), ('y', p) or (i, j) meaning x^i y^j")
    # x^i y^j = (S_l (x) I_m)^i (I_l (x) S_m)^j = S_l^i (x) S_m^j, with S_k^p[r, (r + p) % k] = 1.
    return np.kron(np.roll(np.eye(l, dtype=np.uint8), i, axis=1), np.roll(np.eye(m, dtype=np.uint8), j, axis=1))


def _polynomial(terms: Iterable, l: int, m: int, what: str) -> np.ndarray:
    terms = list(terms)
    if not terms:
        raise ValueError(f"{what} needs at least one term")
    acc = np.zeros((l * m, l * m), dtype=np.uint8)
    for term in terms:
        acc ^= _monomial(term, l, m)
    return acc


def bivariate_bicycle(
    l: int,
    m: int,
    a_terms: Sequence,
    b_terms: Sequence,
    *,
    name: str | None = None,
    d: int | None = None,
) -> CSSCode:
    """A bivariate bicycle code (Bravyi et al. 2024, "High-threshold and low-overhead
    fault-tolerant quantum memory").

    ``x = S_l (x) I_m`` and ``y = I_l (x) S_m``, where ``S_k`` is the ``k x k`` cyclic shift
    (``S_k[i, (i+1) % k] = 1``). ``A`` and ``B`` are sums (mod 2) of monomials, each written
    ``("x", p)`` for ``x^p``, ``("y", p)`` for ``y^p``, or ``(i, j)`` for ``x^i y^j``;
    ``("x", 0)`` is the identity. Then ``Hx = [A | B]``, ``Hz = [B^T | A^T]`` and
    ``n = 2 l m``.

    Examples:
        >>> from backline_decoder_bpod.codes import bivariate_bicycle
        >>> code = bivariate_bicycle(6, 6, [("x", 3), ("y", 1), ("y", 2)], [("y", 3), ("x", 1), ("x", 2)])
        >>> code.n, code.k   # the [[72, 12, 6]] code of the paper's Table 3
        (72, 12)
    """
    l = _positive_int(l, "l", 1)
    m = _positive_int(m, "m", 1)
    A = _polynomial(a_terms, l, m, "A")
    B = _polynomial(b_terms, l, m, "B")
    hx = np.hstack([A, B])
    hz = np.hstack([B.T, A.T])
    return CSSCode(name=name if name is not None else f"bb-l{l}-m{m}", hx=hx, hz=hz, d=d)


def gross_code() -> CSSCode:
    """The ``[[144, 12, 12]]`` gross code: ``l=12, m=6, A = x^3 + y + y^2, B = y^3 + x + x^2``.

    Examples:
        >>> from backline_decoder_bpod.codes import gross_code
        >>> gross_code()
        CSSCode(name='gross', n=144, k=12, d=12, hx=72x144, hz=72x144, lx=None, lz=None)
    """
    return bivariate_bicycle(
        12, 6, [("x", 3), ("y", 1), ("y", 2)], [("y", 3), ("x", 1), ("x", 2)], name="gross", d=12
    )


def _steane() -> CSSCode:
    """The Steane code from its one source (backline/steane.h, through the SDK)."""
    from backline_core.sdk import STEANE_H, STEANE_LOGICAL

    h = np.array(STEANE_H, dtype=np.uint8)
    logical = np.zeros((1, h.shape[1]), dtype=np.uint8)
    logical[0, list(STEANE_LOGICAL)] = 1
    return CSSCode("steane", hx=h, hz=h, lx=logical, lz=logical, d=3)

_NAMES_HELP = (
    "'steane', 'hgp13', 'toric-<L>' (L >= 2, e.g. 'toric-4'), "
    "'hgp-rep-<N>' (N >= 2, e.g. 'hgp-rep-5'), 'gross' (alias 'bb144')"
)


def named_code(name: str) -> CSSCode:
    """A code by name (case-insensitive); every code is constructed, none is loaded.

    =================  ===================================================================
    ``steane``         [[7,1,3]] Steane code (the matrix of ``backline/steane.h``)
    ``hgp13``          [[13,1,3]] hypergraph product of two length-3 repetition codes
    ``hgp-rep-<N>``    [[N^2+(N-1)^2, 1, N]] hypergraph product of two length-N repetition codes
    ``toric-<L>``      [[2L^2, 2, L]] toric code
    ``gross``          [[144,12,12]] gross bivariate bicycle code (alias ``bb144``)
    =================  ===================================================================

    Examples:
        >>> from backline_decoder_bpod.codes import named_code
        >>> [(c.n, c.k, c.d) for c in map(named_code, ["steane", "hgp-rep-5", "toric-3", "bb144"])]
        [(7, 1, 3), (41, 1, 5), (18, 2, 3), (144, 12, 12)]
        >>> named_code("surface-3")
        Traceback (most recent call last):
            ...
        ValueError: unknown code 'surface-3'; valid names: 'steane', 'hgp13', 'toric-<L>' (L >= 2, e.g. 'toric-4'), 'hgp-rep-<N>' (N >= 2, e.g. 'hgp-rep-5'), 'gross' (alias 'bb144')
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip().lower()
    if key == "steane":
        return _steane()
    if key == "hgp13":
        return _hgp_repetition(3, "hgp13")
    if key in ("gross", "bb144"):
        return gross_code()
    match = re.fullmatch(r"toric-(\d+)", key)
    if match and int(match.group(1)) >= 2:
        return toric_code(int(match.group(1)))
    match = re.fullmatch(r"hgp-rep-(\d+)", key)
    if match and int(match.group(1)) >= 2:
        return _hgp_repetition(int(match.group(1)), key)
    raise ValueError(f"unknown code {name!r}; valid names: {_NAMES_HELP}")


def css_memory_circuit(code: CSSCode, *, rounds: int, p: float) -> "stim.Circuit":  # noqa: F821
    """A Z-basis memory experiment of ``code`` as a stim circuit: ``rounds`` rounds measuring its Z
    checks with one ancilla each (CNOTs in column order), then the data qubits.

    Noise: each round depolarizes every data qubit with ``p``, every CNOT is followed by a
    two-qubit depolarization of ``p``, and every measurement is flipped with ``p``. Detectors
    carry ``(check, 0, round)``; the observables are the code's Z logicals.

    Examples:
        >>> c = css_memory_circuit(named_code("toric-3"), rounds=2, p=0.001)
        >>> c.num_detectors, c.num_observables
        (27, 2)
    """
    import stim

    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r}: give at least 1")
    hz = np.asarray(code.hz, dtype=np.uint8)
    lz = code.lz if code.lz is not None else css_logicals(code.hx, code.hz)[1]
    n, m = code.n, hz.shape[0]
    data, anc = list(range(n)), list(range(n, n + m))
    c = stim.Circuit()
    c.append("R", data + anc)
    for t in range(rounds):
        c.append("DEPOLARIZE1", data, p)
        for j in range(n):
            for i in np.flatnonzero(hz[:, j]):
                c.append("CX", [j, n + int(i)])
                c.append("DEPOLARIZE2", [j, n + int(i)], p)
        c.append("X_ERROR", anc, p)
        c.append("MR", anc)
        for i in range(m):
            recs = [stim.target_rec(-m + i)] + ([stim.target_rec(-2 * m + i)] if t else [])
            c.append("DETECTOR", recs, [i, 0, t])
    c.append("X_ERROR", data, p)
    c.append("M", data)
    for i in range(m):
        recs = [stim.target_rec(-n + int(j)) for j in np.flatnonzero(hz[i])] + [stim.target_rec(-n - m + i)]
        c.append("DETECTOR", recs, [i, 0, rounds])
    for k, row in enumerate(np.asarray(lz, dtype=np.uint8)):
        c.append("OBSERVABLE_INCLUDE", [stim.target_rec(-n + int(j)) for j in np.flatnonzero(row)], k)
    return c
