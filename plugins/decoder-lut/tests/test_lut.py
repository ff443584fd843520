"""The lookup-table decoder: CUDA-Q QEC's rules on random H, a surface-code DEM, rounds equal to
batches, and bad input refused in one line."""

from __future__ import annotations

import itertools
import resource
import struct
from typing import Any

import numpy as np
import pytest

from backline_core import BoundFunction, InvalidArgumentError, plugins
from backline_core.sdk import check_matrices
from backline_decoder_lut import LutDecoder, lut_function
from backline_decoder_lut.decoder import encode, estimate
from backline_decoder_lut.native import ffi, last_error, lib
from backline_decoder_lut.params import SCHEMA

stim = pytest.importorskip("stim")


# -- cudaqx's rules restated in plain Python (from docs/decoder-lut.md; NVIDIA/cudaqx
# libs/qec/lib/decoders/lut.cpp, class multi_error_lut): slow and literal on purpose ------------

def prev_permutation(a: list[int]) -> bool:
    """std::prev_permutation: ``a`` becomes the previous permutation in lexicographic order;
    False (and ``a`` the largest permutation) when it was the smallest."""
    i = len(a) - 1
    while i > 0 and a[i - 1] <= a[i]:
        i -= 1
    if i == 0:
        a.reverse()
        return False
    j = len(a) - 1
    while a[j] >= a[i - 1]:
        j -= 1
    a[i - 1], a[j] = a[j], a[i - 1]
    a[i:] = reversed(a[i:])
    return True


def build_table(h: np.ndarray, depth: int) -> dict[str, list[int]]:
    """Syndrome string -> error list, inserted as cudaqx does (the first pattern of a syndrome stays)."""
    rows, n = h.shape
    table: dict[str, list[int]] = {}
    for k in range(1, depth + 1):
        bitmask = [1] * k + [0] * (n - k)  # the leading k entries set
        while True:
            sig = ["0"] * rows
            errors = []
            for q in range(n):
                if bitmask[q]:
                    for r in np.flatnonzero(h[:, q]):
                        sig[r] = "1" if sig[r] == "0" else "0"
                    errors.append(q)
            table.setdefault("".join(sig), errors)
            if not prev_permutation(bitmask):
                break
    return table


def decode(table: dict[str, list[int]], n: int, syndrome: np.ndarray) -> tuple[list[int], bool]:
    """(result, converged) of multi_error_lut.decode on a hard syndrome."""
    result = [0] * n
    s = "".join("1" if b else "0" for b in syndrome)
    if "1" not in s:
        return result, True
    errors = table.get(s)
    if errors is None:
        return result, False
    for q in errors:
        result[q] = 1 - result[q]
    return result, True


def all_syndromes(m: int) -> np.ndarray:
    return np.array(list(itertools.product((0, 1), repeat=m)), dtype=np.uint8)


def random_h(rng: np.random.Generator, m: int, n: int, density: float) -> np.ndarray:
    return (rng.random((m, n)) < density).astype(np.uint8)


def surface_dem(p: float = 0.001) -> Any:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p).detector_error_model(decompose_errors=True)


# -- cudaqx's rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("seed", range(12))
def test_every_syndrome_decodes_as_cudaqx_does(depth: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(2, 9)), int(rng.integers(depth, 12))
    # sparse and dense matrices; a dense one gives ties, repeated and empty columns
    h = random_h(rng, m, n, density=(0.2, 0.5, 0.8)[seed % 3])
    if seed % 4 == 0:
        h[:, n // 2] = h[:, 0]  # two equal columns: the lower index wins
    table = build_table(h, depth)
    syndromes = all_syndromes(m)
    want = [decode(table, n, s) for s in syndromes]
    errors, converged = LutDecoder(h, depth=depth).decode_batch(syndromes)
    assert errors.tolist() == [w[0] for w in want]
    assert converged.tolist() == [w[1] for w in want]


def test_ties_go_to_the_lower_weight_then_the_first_tuple() -> None:
    # columns: 0 = d0, 1 = d1, 2 = d0 d1, 3 = d0
    h = np.array([[1, 0, 1, 1], [0, 1, 1, 0]], dtype=np.uint8)
    dec = LutDecoder(h, depth=2)
    assert dec.decode([1, 0])[0].tolist() == [1, 0, 0, 0]  # column 0 before column 3
    assert dec.decode([1, 1])[0].tolist() == [0, 0, 1, 0]  # the single column before (0, 1)
    assert dec.decode([0, 1])[0].tolist() == [0, 1, 0, 0]
    # weight 2 only: (0, 1) and (1, 3) and (2, 3)... give d0 d1; the first tuple (0, 1) wins
    h2 = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=np.uint8)
    assert LutDecoder(h2, depth=2).decode([1, 1, 0])[0].tolist() == [1, 1, 0, 0]


def test_a_miss_is_the_empty_estimate_and_not_converged() -> None:
    h = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 1]], dtype=np.uint8)  # columns: d0, d0 d1, d1 d2
    dec = LutDecoder(h, depth=1)
    errors, converged = dec.decode([1, 0, 1])  # columns 1 and 2: weight 2
    assert errors.tolist() == [0, 0, 0] and converged is False
    errors, converged = LutDecoder(h, depth=2).decode([1, 0, 1])
    assert errors.tolist() == [0, 1, 1] and converged is True
    errors, converged = LutDecoder(h, depth=2).decode([0, 0, 1])  # weight 3: columns 0, 1 and 2
    assert errors.tolist() == [0, 0, 0] and converged is False
    assert LutDecoder(h, depth=3).decode([0, 0, 1])[0].tolist() == [1, 1, 1]


def test_a_zero_syndrome_is_the_empty_estimate_and_converged() -> None:
    h = np.array([[1, 1, 0], [0, 0, 0]], dtype=np.uint8)  # columns 0 and 1 together flip nothing
    dec = LutDecoder(h, depth=2)
    errors, converged = dec.decode([0, 0])
    assert errors.tolist() == [0, 0, 0] and converged is True
    assert dec.entries == 1  # d0 only: zero syndromes are never stored


def test_the_table_holds_each_nonzero_syndrome_once() -> None:
    rng = np.random.default_rng(7)
    h = random_h(rng, 6, 10, 0.4)
    table = build_table(h, 2)
    assert LutDecoder(h, depth=2).entries == len([s for s in table if "1" in s])


# -- a detector error model --------------------------------------------------------------------

def test_a_d3_surface_code_dem_decodes_with_fewer_logical_errors() -> None:
    dem = surface_dem(0.004)
    dets, obs, _ = dem.compile_sampler(seed=2).sample(20000)
    undecoded = obs.any(axis=1).mean()
    rates = []
    for depth in (1, 2):
        fn = plugins.get("decoder", "lut").build_from_dem(dem, depth=depth)
        rates.append((fn.decode_batch(dets) != obs).any(axis=1).mean())
    assert rates[0] < undecoded / 2 and rates[1] < rates[0], (undecoded, rates)


def test_the_detectors_reply_is_the_syndrome_of_the_estimate() -> None:
    dem = surface_dem()
    fn = plugins.get("decoder", "lut").build_from_dem(dem, reply="observables+detectors", depth=2)
    dets = dem.compile_sampler(seed=4).sample(3000)[0].astype(np.uint8)
    replies = fn.decode_batch(dets)
    flipped = replies[:, dem.num_observables:]
    hit = (flipped == dets).all(axis=1)
    # every converged shot is explained by its estimate; a miss flips nothing
    assert hit.mean() > 0.95
    assert not flipped[~hit].any()


def test_rounds_answer_what_batches_answer() -> None:
    dem = surface_dem(0.004)
    for reply in ("observables", "observables+detectors"):
        fn = plugins.get("decoder", "lut").build_from_dem(dem, reply=reply, depth=2)
        packed = dem.compile_sampler(seed=9).sample(500, bit_packed=True)[0]
        batch = fn.decode_batch_packed(packed)
        with BoundFunction(fn) as bound:
            rounds = [bound(0, row.tobytes()) for row in packed]
        assert rounds == [row.tobytes() for row in batch]


def test_padding_bits_past_the_last_detector_are_no_detectors() -> None:
    h = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=np.uint8)  # 3 detectors: 5 padding bits
    fn = plugins.get("decoder", "lut").build(h=h)
    with BoundFunction(fn) as bound:
        for s in range(8):
            assert bound(0, bytes([s | 0b10101000])) == bound(0, bytes([s])) == fn.decode_batch_packed(
                np.array([[s | 0xF8]], np.uint8))[0].tobytes()


def test_build_from_h_replies_with_the_per_column_estimate() -> None:
    h = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=np.uint8)
    fn = plugins.get("decoder", "lut").build(h=h, depth="2")  # text, as from --decoder-param
    assert fn.reply_bits == 4 and fn.num_detectors == 3
    syndromes = all_syndromes(3)
    table = build_table(h, 2)
    assert fn.decode_batch(syndromes).tolist() == [decode(table, 4, s)[0] for s in syndromes]
    with BoundFunction(fn) as bound:
        assert bound(0, bytes([0b011])) == bytes([0b0010])


# -- bad input ---------------------------------------------------------------------------------

def test_a_syndrome_of_the_wrong_width_is_a_clear_error() -> None:
    fn = plugins.get("decoder", "lut").build_from_dem(surface_dem())
    with pytest.raises(InvalidArgumentError, match=r"shape \(shots, 3\) bit-packed for 24 detectors"):
        fn.decode_batch_packed(np.zeros((5, 4), np.uint8))
    with pytest.raises(InvalidArgumentError, match=r"shape \(shots, 24\)"):
        fn.decode_batch(np.zeros((5, 23), np.uint8))
    with BoundFunction(fn) as bound:
        for width in (0, 2, 4):
            with pytest.raises(Exception) as info:
                bound(0, bytes(width))
            assert type(info.value).__name__ == "FunctionError"
        assert bound(0, bytes(3)) == b"\0"  # still serving
    dec = LutDecoder([[1, 0], [0, 1]])
    with pytest.raises(InvalidArgumentError, match=r"shape \(shots, 2\)"):
        dec.decode_batch(np.zeros((1, 3)))
    with pytest.raises(InvalidArgumentError, match="only 0 and 1"):
        dec.decode([2, 0])


def test_a_too_large_table_is_refused_with_its_estimate_before_anything_is_built() -> None:
    h = np.zeros((100, 2000), dtype=np.uint8)
    h[np.arange(2000) % 100, np.arange(2000)] = 1
    need, patterns = estimate(100, 2000, 3)
    assert patterns == 2000 + 2000 * 1999 // 2 + 2000 * 1999 * 1998 // 6
    m = check_matrices(h, np.ones((1, 2000), np.uint8))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for build in (lambda: LutDecoder(h, depth=3), lambda: lut_function(m, depth=3),
                  lambda: plugins.get("decoder", "lut").build(h=h, depth=3)):
        with pytest.raises(InvalidArgumentError) as info:
            build()
        assert str(info.value) == (
            f"lut: depth 3 over 2,000 columns needs about {need / 1e9:.1f} GB ({patterns:,} patterns); "
            "the limit is max_table_bytes=1073741824: lower depth or raise it")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 20_000  # kB: no table, no identity
    with pytest.raises(InvalidArgumentError, match=r"needs about .* the limit is max_table_bytes=1000:"):
        lut_function(m, depth=1, max_table_bytes=1000)
    # the native side refuses the same on its own, as the bound function's init does
    blob = encode(h, m.o, 3, 1 << 30)
    assert lib.lut_create(blob, len(blob)) == ffi.NULL
    assert "needs about" in last_error() and "max_table_bytes=1073741824" in last_error()


def test_depth_out_of_range_is_refused() -> None:
    record = plugins.get("decoder", "lut")
    dem = surface_dem()
    for depth in (0, SCHEMA["properties"]["depth"]["maximum"] + 1):
        with pytest.raises(InvalidArgumentError, match=f"parameter depth={depth}"):
            record.build_from_dem(dem, depth=depth)
        with pytest.raises(InvalidArgumentError, match=f"depth={depth} must be an integer in"):
            LutDecoder([[1, 1]], depth=depth)
    with pytest.raises(InvalidArgumentError, match="depth=3 exceeds the 2 columns of H"):
        LutDecoder([[1, 1]], depth=3)
    with pytest.raises(InvalidArgumentError, match="parameter max_table_bytes=0"):
        record.build_from_dem(dem, max_table_bytes=0)
    with pytest.raises(InvalidArgumentError, match="unknown parameter 'lut_error_depth'"):
        record.build(h=[[1, 1]], lut_error_depth=1)


def test_the_schema_and_the_header_agree() -> None:
    assert SCHEMA["properties"]["depth"]["maximum"] == lib.LUT_MAX_DEPTH
    blob = encode(np.array([[1, 1]], np.uint8), np.eye(2, dtype=np.uint8), 1, 1 << 20)
    assert blob[:4] == b"BLUT" and struct.unpack_from("<I", blob, 4)[0] == lib.LUT_VERSION
    for offset, value in ((0, 0x12345678), (4, 2), (8, 0), (8, lib.LUT_MAX_DEPTH + 1)):
        bad = bytearray(blob)
        struct.pack_into("<I", bad, offset, value)
        assert lib.lut_create(bytes(bad), len(bad)) == ffi.NULL
    assert lib.lut_create(blob[:-4], len(blob) - 4) == ffi.NULL
    assert "reply map" in last_error()
