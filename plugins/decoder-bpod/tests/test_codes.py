"""Tests for backline_decoder_bpod.codes: parameters of every construction, validation, GF(2)."""

from __future__ import annotations

import doctest
import itertools
from pathlib import Path

import numpy as np
import pytest
from backline_decoder_bpod import codes
from backline_decoder_bpod.codes import (
    CSSCode,
    bivariate_bicycle,
    css_logicals,
    gf2_nullspace,
    gf2_rank,
    gross_code,
    hypergraph_product,
    named_code,
    repetition_code,
    toric_code,
)

#: the test data: code matrices as .npz (see data/README.md)
CODES_DIR = Path(__file__).parent / "data"


def gf2_matmul(a, b):
    return (np.asarray(a, dtype=np.int64) @ np.asarray(b, dtype=np.int64)) & 1


def assert_css(code: CSSCode) -> None:
    assert code.hx.dtype == np.uint8 and code.hz.dtype == np.uint8
    assert code.hx.flags.c_contiguous and code.hz.flags.c_contiguous
    assert code.hx.shape[1] == code.hz.shape[1] == code.n
    assert not gf2_matmul(code.hx, code.hz.T).any()
    if code.lx is not None:
        assert not gf2_matmul(code.hz, code.lx.T).any()
    if code.lz is not None:
        assert not gf2_matmul(code.hx, code.lz.T).any()
    if code.lx is not None and code.lz is not None:
        assert code.lx.shape[0] == code.lz.shape[0] == code.k
        assert np.array_equal(gf2_matmul(code.lx, code.lz.T), np.eye(code.k, dtype=np.int64))


# ------------------------------------------------------------------------------------------
# Constructions: (n, k), commutation, logicals
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, n, k, d",
    [
        ("steane", 7, 1, 3),
        ("hgp13", 13, 1, 3),
        ("hgp-rep-2", 5, 1, 2),
        ("hgp-rep-3", 13, 1, 3),
        ("hgp-rep-5", 41, 1, 5),
        ("toric-2", 8, 2, 2),
        ("toric-3", 18, 2, 3),
        ("toric-4", 32, 2, 4),
        ("toric-7", 98, 2, 7),
        ("gross", 144, 12, 12),
        ("bb144", 144, 12, 12),
        ("  Toric-4 ", 32, 2, 4),
    ],
)
def test_named_code_parameters(name, n, k, d):
    code = named_code(name)
    assert (code.n, code.k, code.d) == (n, k, d)
    assert_css(code)


@pytest.mark.parametrize("bad", ["surface-3", "toric-1", "toric-", "hgp-rep-1", "hgp", "toric-x", ""])
def test_named_code_unknown_lists_valid_names(bad):
    with pytest.raises(ValueError, match="valid names") as info:
        named_code(bad)
    for valid in ("steane", "hgp13", "toric-", "hgp-rep-", "gross", "bb144"):
        assert valid in str(info.value)


def test_repetition_code():
    assert np.array_equal(repetition_code(2), [[1, 1]])
    H = repetition_code(5)
    assert H.shape == (4, 5) and H.dtype == np.uint8
    assert gf2_rank(H) == 4
    assert np.array_equal(gf2_nullspace(H), np.ones((1, 5), dtype=np.uint8))
    for bad in (1, 0, -3):
        with pytest.raises(ValueError):
            repetition_code(bad)
    with pytest.raises(TypeError):
        repetition_code(3.0)


@pytest.mark.parametrize("N", [2, 3, 4, 5, 6])
def test_hypergraph_product_of_repetition_codes(N):
    code = hypergraph_product(repetition_code(N), repetition_code(N))
    assert (code.n, code.k) == (N * N + (N - 1) ** 2, 1)
    assert code.hx.shape == code.hz.shape == (N * (N - 1), code.n)
    assert_css(code)


def test_hypergraph_product_shapes_for_unequal_codes():
    h1, h2 = repetition_code(3), repetition_code(4)  # (2, 3) and (3, 4)
    code = hypergraph_product(h1, h2)
    assert code.n == 3 * 4 + 2 * 3
    assert code.hx.shape == (2 * 4, code.n) and code.hz.shape == (3 * 3, code.n)
    # k = k1 k2 + k1^T k2^T = 1 * 1 + 0 * 0
    assert code.k == 1
    assert_css(code)


def test_hypergraph_product_layout():
    # Hx = [H1 (x) I_n2 | I_m1 (x) H2^T],  Hz = [I_n1 (x) H2 | H1^T (x) I_m2]
    h1 = np.array([[1, 1, 0], [0, 1, 1]], dtype=np.uint8)
    h2 = np.array([[1, 0, 1, 1]], dtype=np.uint8)
    code = hypergraph_product(h1, h2, name="x", d=2)
    assert code.name == "x" and code.d == 2
    assert np.array_equal(code.hx, np.hstack([np.kron(h1, np.eye(4)), np.kron(np.eye(2), h2.T)]))
    assert np.array_equal(code.hz, np.hstack([np.kron(np.eye(3), h2), np.kron(h1.T, np.eye(1))]))


def test_toric_code():
    for L in (2, 3, 5, 8):
        code = toric_code(L)
        assert (code.n, code.k, code.d, code.name) == (2 * L * L, 2, L, f"toric-{L}")
        # Every qubit is in two X checks and two Z checks; every check has weight 4.
        for h in (code.hx, code.hz):
            assert (h.sum(axis=0) == 2).all() and (h.sum(axis=1) == 4).all()
        assert (code.lx.sum(axis=1) == L).all() and (code.lz.sum(axis=1) == L).all()
        assert_css(code)
    with pytest.raises(ValueError):
        toric_code(1)


# Bravyi et al. 2024, Table 3: (l, m, A, B) -> [[n, k]].
BB_TABLE = [
    (6, 6, [("x", 3), ("y", 1), ("y", 2)], [("y", 3), ("x", 1), ("x", 2)], 72, 12),
    (15, 3, [("x", 9), ("y", 1), ("y", 2)], [("x", 0), ("x", 2), ("x", 7)], 90, 8),
    (9, 6, [("x", 3), ("y", 1), ("y", 2)], [("y", 3), ("x", 1), ("x", 2)], 108, 8),
    (12, 6, [("x", 3), ("y", 1), ("y", 2)], [("y", 3), ("x", 1), ("x", 2)], 144, 12),
    (12, 12, [("x", 3), ("y", 2), ("y", 7)], [("y", 3), ("x", 1), ("x", 2)], 288, 12),
]


@pytest.mark.parametrize("l, m, a, b, n, k", BB_TABLE)
def test_bivariate_bicycle_table(l, m, a, b, n, k):
    code = bivariate_bicycle(l, m, a, b)
    assert (code.n, code.k) == (n, k)
    # Weight-6 checks, every qubit in three X and three Z checks.
    for h in (code.hx, code.hz):
        assert (h.sum(axis=1) == 6).all() and (h.sum(axis=0) == 3).all()
    assert_css(code)


def test_bivariate_bicycle_convention():
    l, m = 3, 2
    S = lambda k: np.roll(np.eye(k, dtype=np.uint8), 1, axis=1)
    x = np.kron(S(l), np.eye(m, dtype=np.uint8))
    y = np.kron(np.eye(l, dtype=np.uint8), S(m))
    A = (x + y @ y @ x) % 2  # x + x y^2, given once as ("x", 1) and once as (1, 2)
    B = (np.eye(l * m, dtype=np.uint8) + y) % 2
    code = bivariate_bicycle(l, m, [("x", 1), (1, 2)], [("y", 0), ("y", 1)])
    assert np.array_equal(code.hx, np.hstack([A, B]))
    assert np.array_equal(code.hz, np.hstack([B.T, A.T]))
    assert code.name == "bb-l3-m2"


@pytest.mark.parametrize("terms", [[("z", 1)], [("x", 1.5)], [(1, 2, 3)], ["x"], [("x", True)], []])
def test_bivariate_bicycle_bad_terms(terms):
    with pytest.raises(ValueError):
        bivariate_bicycle(3, 3, terms, [("x", 1)])


def test_gross_code():
    code = gross_code()
    assert (code.n, code.k, code.d, code.name) == (144, 12, 12, "gross")
    assert code.hx.shape == code.hz.shape == (72, 144)
    assert_css(code)
    assert np.array_equal(code.hx, named_code("bb144").hx)


def test_css_logicals_are_paired_and_complete():
    for code in (gross_code(), toric_code(4), named_code("steane"),
                 bivariate_bicycle(*BB_TABLE[1][:4])):
        lx, lz = css_logicals(code.hx, code.hz)
        assert lx.shape == lz.shape == (code.k, code.n)
        # Accepted as the code's logicals: commute with the opposite checks, lx @ lz.T = I.
        assert_css(CSSCode(code.name, code.hx, code.hz, lx=lx, lz=lz))
        # Independent of the stabilizers: adding them to the checks raises the rank by k.
        assert gf2_rank(np.vstack([code.hx, lx])) == gf2_rank(code.hx) + code.k
        assert gf2_rank(np.vstack([code.hz, lz])) == gf2_rank(code.hz) + code.k


def _min_logical_weight_at_most(h, logicals, max_w):
    """Smallest weight <= max_w of an e with h e = 0 and logicals e != 0 (a nontrivial logical), else None."""
    n = h.shape[1]
    cols_h, cols_l = h.T.astype(np.int64), logicals.T.astype(np.int64)
    for w in range(1, max_w + 1):
        combos = np.array(list(itertools.combinations(range(n), w)), dtype=np.intp)
        synd = cols_h[combos].sum(axis=1) & 1
        flips = cols_l[combos].sum(axis=1) & 1
        if ((~synd.any(axis=1)) & flips.any(axis=1)).any():
            return w
    return None


@pytest.mark.parametrize("name", ["steane", "hgp13", "hgp-rep-4", "hgp-rep-5", "toric-3", "toric-4"])
def test_distance_by_brute_force(name):
    code = named_code(name)
    d = code.d
    # No nontrivial X (Z) logical of weight < d, and the given (paired, so nontrivial) ones
    # have weight d.
    assert _min_logical_weight_at_most(code.hz, code.lz, d - 1) is None
    assert _min_logical_weight_at_most(code.hx, code.lx, d - 1) is None
    assert code.lx.sum(axis=1).min() == code.lz.sum(axis=1).min() == d


# ------------------------------------------------------------------------------------------
# The .npz test data
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stem, n, k, d", [("steane", 7, 1, 3), ("hgp13", 13, 1, 3)])
def test_from_npz(stem, n, k, d):
    code = CSSCode.from_npz(CODES_DIR / f"{stem}.npz")
    assert (code.name, code.n, code.k, code.d) == (stem, n, k, d)
    assert code.lx is not None and code.lz is not None
    assert_css(code)
    # The constructed code of the same name is the same code, matrix for matrix.
    built = named_code(stem)
    for field in ("hx", "hz", "lx", "lz"):
        assert np.array_equal(getattr(built, field), getattr(code, field)), field
    assert CSSCode.from_npz(str(CODES_DIR / f"{stem}.npz"), name="other").name == "other"


def test_hgp13_npz_matches_hypergraph_product_parameters():
    code = CSSCode.from_npz(CODES_DIR / "hgp13.npz")
    built = hypergraph_product(repetition_code(3), repetition_code(3))
    assert (built.n, built.k) == (code.n, code.k) == (13, 1)


def test_from_npz_missing_keys_and_inconsistent_k(tmp_path):
    H = repetition_code(3)
    np.savez(tmp_path / "nohz.npz", Hx=H)
    with pytest.raises(ValueError, match="missing Hz"):
        CSSCode.from_npz(tmp_path / "nohz.npz")
    code = named_code("steane")
    np.savez(tmp_path / "badk.npz", Hx=code.hx, Hz=code.hz, k=2)
    with pytest.raises(ValueError, match="k=2"):
        CSSCode.from_npz(tmp_path / "badk.npz")
    np.savez(tmp_path / "plain.npz", Hx=code.hx, Hz=code.hz)
    plain = CSSCode.from_npz(tmp_path / "plain.npz")
    assert (plain.name, plain.lx, plain.lz, plain.d, plain.k) == ("plain", None, None, None, 1)


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------

STEANE_H = named_code("steane").hx


def test_non_binary_matrix_is_rejected():
    H = STEANE_H.astype(np.int64)
    H[1, 2] = 2
    H[2, 0] = -1
    with pytest.raises(ValueError, match=r"hz must be binary.*2 entries.*hz\[1, 2\] = 2"):
        CSSCode("x", hx=STEANE_H, hz=H)
    with pytest.raises(ValueError, match="hx must be binary"):
        CSSCode("x", hx=STEANE_H * 0.5, hz=STEANE_H)
    with pytest.raises(ValueError, match="lx must be binary"):
        CSSCode("x", hx=STEANE_H, hz=STEANE_H, lx=[[3, 0, 0, 0, 0, 0, 0]])


def test_non_2d_matrix_is_rejected():
    with pytest.raises(ValueError, match="hx must be a 2-D matrix, got a 1-D array"):
        CSSCode("x", hx=[1, 1, 0], hz=[[1, 1, 0]])
    with pytest.raises(ValueError, match="hz must be a 2-D matrix, got a 3-D array"):
        CSSCode("x", hx=[[1, 1, 0]], hz=np.zeros((1, 1, 3), dtype=np.uint8))


def test_column_mismatch_is_rejected():
    with pytest.raises(ValueError, match="hx has 7 columns but hz has 6"):
        CSSCode("x", hx=STEANE_H, hz=STEANE_H[:, :6])
    with pytest.raises(ValueError, match="hx has 7 columns but lz has 8"):
        CSSCode("x", hx=STEANE_H, hz=STEANE_H, lz=np.zeros((1, 8), dtype=np.uint8))


def test_non_commuting_checks_report_the_count():
    hz = STEANE_H.copy()
    hz[0, 5] ^= 1  # row 0 of hz now overlaps oddly with hx rows 1 and 2
    expected = int(gf2_matmul(STEANE_H, hz.T).sum())
    assert expected == 2
    with pytest.raises(ValueError, match=rf"do not commute: hx @ hz.T % 2 has {expected} nonzero entries \(of 3x3\)"):
        CSSCode("x", hx=STEANE_H, hz=hz)
    with pytest.raises(ValueError, match="has 1 nonzero entry "):
        CSSCode("x", hx=[[1, 1, 0]], hz=[[1, 0, 0]])


def test_bad_logicals_are_rejected():
    ok = named_code("steane")
    with pytest.raises(ValueError, match="lx does not commute with the Z checks"):
        CSSCode("x", hx=ok.hx, hz=ok.hz, lx=[[1, 0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="lz does not commute with the X checks"):
        CSSCode("x", hx=ok.hx, hz=ok.hz, lz=[[1, 0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="must be the identity"):
        CSSCode("x", hx=ok.hx, hz=ok.hz, lx=ok.lx, lz=np.vstack([ok.lz, ok.lz]))
    with pytest.raises(ValueError, match="d must be >= 0"):
        CSSCode("x", hx=ok.hx, hz=ok.hz, d=-1)


def test_code_is_frozen_and_owns_read_only_copies():
    H = STEANE_H.copy()
    code = CSSCode("x", hx=H, hz=H)
    assert code.hx is not H and H.flags.writeable
    with pytest.raises(ValueError):
        code.hx[0, 0] = 0
    with pytest.raises(AttributeError):
        code.name = "y"
    assert code.validate() is code
    assert "n=7, k=1" in repr(code)


# ------------------------------------------------------------------------------------------
# GF(2) helpers
# ------------------------------------------------------------------------------------------

def brute_force_rank(M):
    """log2 of the number of distinct vectors in the row space, enumerated."""
    M = np.asarray(M, dtype=np.int64) & 1
    m = M.shape[0]
    coeffs = np.array(list(itertools.product([0, 1], repeat=m)), dtype=np.int64).reshape(-1, m)
    span = {row.tobytes() for row in (coeffs @ M) & 1}
    return int(np.log2(len(span)))


def test_gf2_rank_against_brute_force():
    rng = np.random.default_rng(20240601)
    for _ in range(300):
        m, n = rng.integers(1, 8), rng.integers(1, 9)
        M = (rng.random((m, n)) < rng.uniform(0.1, 0.9)).astype(np.uint8)
        assert gf2_rank(M) == brute_force_rank(M), M


def test_gf2_rank_edge_cases():
    assert gf2_rank(np.zeros((0, 5), dtype=np.uint8)) == 0
    assert gf2_rank(np.zeros((4, 0), dtype=np.uint8)) == 0
    assert gf2_rank(np.zeros((3, 3), dtype=np.uint8)) == 0
    assert gf2_rank(np.eye(130, dtype=np.uint8)) == 130  # spans three 64-bit words
    assert gf2_rank(np.array([[True, False], [True, False]])) == 1
    assert gf2_rank([[3, 1], [1, 3]]) == 1  # entries mod 2
    assert isinstance(gf2_rank([[1]]), int)
    with pytest.raises(ValueError, match="2-D"):
        gf2_rank([1, 0, 1])
    with pytest.raises(TypeError, match="integers or bools"):
        gf2_rank(np.eye(2))


def test_gf2_rank_large_known_rank():
    # M = U D V with U, V invertible (unit triangular) and D = diag(1^r, 0) has rank exactly r.
    rng = np.random.default_rng(7)
    m, n, r = 700, 900, 613
    U = np.tril(rng.integers(0, 2, (m, m)), -1) + np.eye(m, dtype=np.int64)
    V = np.triu(rng.integers(0, 2, (n, n)), 1) + np.eye(n, dtype=np.int64)
    D = np.zeros((m, n))
    D[np.arange(r), np.arange(r)] = 1
    M = ((U.astype(np.float64) @ D @ V.astype(np.float64)) % 2).astype(np.uint8)
    assert gf2_rank(M) == r
    assert gf2_rank(M.T) == r
    N = gf2_nullspace(M)
    assert N.shape == (n - r, n)
    assert not (((M.astype(np.float64) @ N.T.astype(np.float64)) % 2).any())


def test_gf2_nullspace_vectors_are_in_the_kernel_and_independent():
    rng = np.random.default_rng(11)
    for _ in range(200):
        m, n = rng.integers(1, 12), rng.integers(1, 20)
        M = (rng.random((m, n)) < 0.4).astype(np.uint8)
        N = gf2_nullspace(M)
        assert N.dtype == np.uint8 and N.shape == (n - gf2_rank(M), n)
        assert not gf2_matmul(M, N.T).any()
        if N.shape[0]:
            assert gf2_rank(N) == N.shape[0]


def test_gf2_nullspace_edge_cases():
    assert np.array_equal(gf2_nullspace(np.zeros((0, 3), dtype=np.uint8)), np.eye(3, dtype=np.uint8))
    assert np.array_equal(gf2_nullspace(np.zeros((2, 3), dtype=np.uint8)), np.eye(3, dtype=np.uint8))
    assert gf2_nullspace(np.eye(5, dtype=np.uint8)).shape == (0, 5)
    assert gf2_nullspace(np.zeros((2, 0), dtype=np.uint8)).shape == (0, 0)


def test_module_doctests():
    result = doctest.testmod(codes, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 20
    assert result.failed == 0
