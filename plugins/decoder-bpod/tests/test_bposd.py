"""The native BP+OSD decoder: correctness against ldpc, the API, input checking, the
coprocessor function through the memcpy transport, the plugin entry points and both CLIs.

Measured agreement rates and logical error rates are printed (``-s``) and recorded through
the ``numbers`` fixture (``/tmp/bposd_numbers.json``). Nothing here asserts a timing.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

ldpc = pytest.importorskip("ldpc")

from backline_decoder_bpod import BpOsdDecoder, BpOsdParams, codes, css_bp_decoder
from backline_decoder_bpod.codes import CSSCode, css_logicals
from backline_decoder_bpod.native import LIBRARY
from backline_decoder_bpod.params import encode

from backline_core import (
    BoundFunction,
    Controller,
    Coprocessor,
    CoprocessorFunction,
    FunctionError,
    Placement,
    UnknownDecoderError,
    deploy,
    plugins,
)

steane_table = plugins.get("decoder", "steane").build  # the core's Steane lookup table

#: the test data: code matrices as .npz (see data/README.md)
CODES_DIR = Path(__file__).parent / "data"
SUBPROCESS_TIMEOUT_S = 180

NAMED = ["steane", "hgp13", "hgp-rep-5", "toric-4", "gross"]
FROM_NPZ = ["npz:steane", "npz:hgp13"]
ALL_CODES = NAMED + FROM_NPZ
#: codes whose Hx decoder (Z errors) is also checked
HX_SUBSET = ["hgp13", "toric-4", "gross"]
RATES = (0.01, 0.05, 0.1)
#: ldpc's name for each of our bp_methods
LDPC_BP = {"min_sum": "minimum_sum", "product_sum": "product_sum"}


@functools.cache
def _load(name: str) -> CSSCode:
    if name.startswith("npz:"):
        return CSSCode.from_npz(CODES_DIR / f"{name[4:]}.npz")
    return codes.named_code(name)


def load(name: str) -> CSSCode:
    return _load(name)


@functools.cache
def _logicals(name: str) -> tuple[np.ndarray, np.ndarray]:
    code = load(name)
    if code.lx is not None and code.lz is not None:
        return code.lx, code.lz
    return css_logicals(code.hx, code.hz)


def sample(h: np.ndarray, p: float, shots: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent bit flips at rate p and their syndromes under h, both 0/1 uint8."""
    rng = np.random.default_rng(seed)
    errors = (rng.random((shots, h.shape[1])) < p).astype(np.uint8)
    return errors, ((errors.astype(np.int64) @ h.T.astype(np.int64)) & 1).astype(np.uint8)


def syndromes_of(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) @ h.T.astype(np.int64)) & 1).astype(np.uint8)


def shots_for(name: str) -> int:
    return 2000 if name == "gross" else 5000


def seed_for(*parts: object) -> int:
    return sum(map(ord, "/".join(map(str, parts)))) * 7919 + 1


def ldpc_decode_all(dec, syndromes: np.ndarray) -> np.ndarray:
    return np.array([dec.decode(s) for s in syndromes], dtype=np.uint8).reshape(len(syndromes), -1)


def check_matrix_of(name: str, which: str) -> tuple[np.ndarray, np.ndarray]:
    """(H, the logicals that detect a residual of the errors H decodes).

    Hz syndromes come from X errors; an X residual is a logical error iff it anticommutes
    with some Z logical, so it is tested against lz (and a Z residual from Hx against lx)."""
    code = load(name)
    lx, lz = _logicals(name)
    return (code.hz, lz) if which == "hz" else (code.hx, lx)


def get(name: str) -> CSSCode:
    """The code named ``name`` (``npz:<stem>``: loaded from ``data/<stem>.npz``)."""
    return load(name)


# =============================================================================================
# Correctness
# =============================================================================================


@pytest.mark.parametrize("name, which", [(n, "hz") for n in ALL_CODES] + [(n, "hx") for n in HX_SUBSET])
def test_osd_output_always_satisfies_the_syndrome(name, which, numbers):
    h, _ = check_matrix_of(name, which)
    shots = 2000
    bp_failed = {}
    for p in RATES:
        _, syn = sample(h, p, shots, seed_for(name, which, p))
        packed = np.packbits(syn, axis=1, bitorder="little")
        # How often BP alone fails: those are the shots OSD answers.
        plain = BpOsdDecoder(h, error_rate=p, osd_method="none").decode_batch(syn)
        bp_failed[p] = float((syndromes_of(h, plain) != syn).any(axis=1).mean())
        for bp in ("min_sum", "product_sum"):
            for osd, order in (("osd0", 0), ("osd_cs", 4), ("osd_e", 4)):
                dec = BpOsdDecoder(h, error_rate=p, bp_method=bp, osd_method=osd, osd_order=order)
                out = np.unpackbits(dec.decode_batch_packed(packed), axis=1, count=h.shape[1], bitorder="little")
                bad = np.flatnonzero((syndromes_of(h, out) != syn).any(axis=1))
                assert bad.size == 0, f"{name} {which} p={p} {bp} {osd}: {bad.size} shots miss their syndrome"
    numbers.record("bp_alone_failure_rate", f"{name}/{which}", bp_failed)
    # The check means something only if OSD ran: BP alone fails on some shots at p = 0.1.
    assert bp_failed[0.1] > 0 or name.endswith("steane")


@pytest.mark.parametrize("p", RATES)
@pytest.mark.parametrize("name", ALL_CODES)
def test_min_sum_osd0_matches_ldpc_bit_for_bit(name, p, numbers):
    shots = shots_for(name)
    for which in ("hz", "hx") if name in HX_SUBSET else ("hz",):
        h, _ = check_matrix_of(name, which)
        _, syn = sample(h, p, shots, seed_for("ms", name, which, p))
        ours = BpOsdDecoder(h, error_rate=p, bp_method="min_sum", max_iter=10, ms_scaling_factor=0.625,
                            osd_method="osd0").decode_batch(syn)
        ref = ldpc.BpOsdDecoder(h, error_rate=p, bp_method="minimum_sum", max_iter=10, ms_scaling_factor=0.625,
                                osd_method="osd0")
        theirs = ldpc_decode_all(ref, syn)
        agree = float((ours == theirs).all(axis=1).mean())
        numbers.record("agreement_ms_osd0", f"{name}/{which}/p={p}", {"shots": shots, "agreement": agree})
        print(f"\nmin-sum+OSD-0 {name} {which} p={p}: agreement {agree:.4%} over {shots} shots")
        assert agree >= 0.999


@pytest.mark.parametrize("p", RATES)
@pytest.mark.parametrize("name", ALL_CODES)
def test_product_sum_osd_cs_logical_error_rate_matches_ldpc(name, p, numbers):
    shots = shots_for(name)
    for which in ("hz", "hx") if name in HX_SUBSET else ("hz",):
        h, logicals = check_matrix_of(name, which)
        errors, syn = sample(h, p, shots, seed_for("ps", name, which, p))
        settings = {"max_iter": 10, "osd_method": "osd_cs", "osd_order": 4}
        ours = BpOsdDecoder(h, error_rate=p, bp_method="product_sum", **settings).decode_batch(syn)
        theirs = ldpc_decode_all(ldpc.BpOsdDecoder(h, error_rate=p, bp_method="product_sum", **settings), syn)
        rates = []
        for out in (ours, theirs):
            residual = errors ^ out
            assert not syndromes_of(h, residual).any()  # OSD is on: every output meets its syndrome
            rates.append(float(((residual.astype(np.int64) @ logicals.T) & 1).any(axis=1).mean()))
        ler_o, ler_l = rates
        se = math.sqrt(ler_o * (1 - ler_o) / shots + ler_l * (1 - ler_l) / shots)
        agree = float((ours == theirs).all(axis=1).mean())
        numbers.record("ler_ps_osdcs4", f"{name}/{which}/p={p}",
                       {"shots": shots, "ler_ours": ler_o, "ler_ldpc": ler_l, "se": se, "agreement": agree})
        print(f"\nproduct-sum+OSD-CS4 {name} {which} p={p}: LER ours {ler_o:.4f} ldpc {ler_l:.4f} "
              f"(3 SE {3 * se:.4f}), agreement {agree:.4%}")
        assert abs(ler_o - ler_l) <= 3 * se + 1e-12


STEANE_SYNDROMES = [bytes([s]) for s in range(8)]


# At the default scaling 0.625, min-sum converges on syndrome 0b111 to a weight-4 solution
# (as ldpc does); test_steane_syndrome_seven_is_decoded_as_ldpc_decodes_it pins that.
@pytest.mark.parametrize("ms_scaling_factor", [1.0])
def test_steane_min_sum_equals_the_lookup_table(ms_scaling_factor):
    code = get("steane")
    fn = css_bp_decoder(code.hx, code.hz, bp_method="min_sum", ms_scaling_factor=ms_scaling_factor)
    with BoundFunction(steane_table()) as table, BoundFunction(fn) as ours:
        for decoder_id in (0, 1):
            for s in STEANE_SYNDROMES:
                assert ours(decoder_id, s) == table(decoder_id, s), (decoder_id, s)


def test_steane_syndrome_seven_is_decoded_as_ldpc_decodes_it(numbers):
    """With the defaults, 7 of 8 syndromes match the table; 0b111 (a flip of qubit 2) gets
    {1,2,3,5}, which differs from the table's {2} by the weight-3 logical {1,3,5}. ldpc gives
    the same: BP's first hard decision already satisfies the syndrome, so OSD never runs."""
    code = get("steane")
    fn = css_bp_decoder(code.hx, code.hz, bp_method="min_sum")
    with BoundFunction(steane_table()) as table, BoundFunction(fn) as ours:
        for decoder_id in (0, 1):
            differ = [s[0] for s in STEANE_SYNDROMES if ours(decoder_id, s) != table(decoder_id, s)]
            assert differ == [7]
            got, want = ours(decoder_id, bytes([7]))[0], table(decoder_id, bytes([7]))[0]
            assert (got, want) == (0b0101110, 0b0000100)
            logical = np.array([(got ^ want) >> q & 1 for q in range(7)], dtype=np.uint8)
            h = code.hz if decoder_id == 1 else code.hx
            other = code.lz if decoder_id == 1 else code.lx
            assert not syndromes_of(h, logical[None]).any() and (other @ logical % 2).any()
    for h in (code.hx, code.hz):
        ref = ldpc.BpOsdDecoder(h, error_rate=0.05, bp_method="minimum_sum", max_iter=10, ms_scaling_factor=0.625,
                                osd_method="osd0")
        mine = BpOsdDecoder(h, error_rate=0.05)
        s = np.ones(3, dtype=np.uint8)
        assert ref.decode(s).tolist() == mine.decode(s).tolist() == [0, 1, 1, 1, 0, 1, 0]
        assert ref.iter == mine.iterations == 1 and mine.converged
    numbers.record("steane_table", "default_min_sum_differs_on", [7])


# =============================================================================================
# API
# =============================================================================================


@pytest.mark.parametrize("name", ["hgp-rep-5", "gross"])
def test_the_four_decode_calls_agree(name):
    h = get(name).hz
    _, syn = sample(h, 0.1, 400, seed_for("api", name))
    syn[0] = 0
    dec = BpOsdDecoder(h, error_rate=0.1, osd_method="osd_cs", osd_order=3)
    single = np.array([dec.decode(s) for s in syn])
    packed_in = np.packbits(syn, axis=1, bitorder="little")
    packed_single = np.array([np.frombuffer(dec.decode_packed(row.tobytes()), dtype=np.uint8) for row in packed_in])
    assert np.array_equal(np.packbits(single, axis=1, bitorder="little"), packed_single)
    assert np.array_equal(dec.decode_batch(syn), single)
    assert np.array_equal(dec.decode_batch_packed(packed_in), packed_single)
    # decode_packed takes any bytes-like object
    assert dec.decode_packed(bytearray(packed_in[1])) == dec.decode_packed(memoryview(packed_in[1].tobytes()))
    assert dec.decode_batch(np.zeros((0, h.shape[0]), np.uint8)).shape == (0, h.shape[1])


@pytest.mark.parametrize("name", ["hgp13", "toric-4", "gross"])
def test_iterations_and_llrs_match_ldpc_on_converged_min_sum_shots(name, numbers):
    h = get(name).hz
    compared = llr_equal_all = 0
    for p in RATES:
        _, syn = sample(h, p, 500, seed_for("llr", name, p))
        ours = BpOsdDecoder(h, error_rate=p, bp_method="min_sum", osd_method="osd0")
        ref = ldpc.BpOsdDecoder(h, error_rate=p, bp_method="minimum_sum", max_iter=10, ms_scaling_factor=0.625,
                                osd_method="osd0")
        for s in syn:
            if not s.any():
                continue
            a, b = ours.decode(s), ref.decode(s)
            assert ours.converged == bool(ref.converge)
            same_llr = np.array_equal(ours.log_prob_ratios, np.asarray(ref.log_prob_ratios))
            llr_equal_all += same_llr
            if ours.converged:
                compared += 1
                assert ours.iterations == ref.iter
                assert same_llr, "posterior LLRs differ on a converged shot"
                assert np.array_equal(a, b)
                assert np.array_equal(a, (ours.log_prob_ratios <= 0).astype(np.uint8))
    assert compared > 100
    numbers.record("llr_exact", name, {"converged_shots_compared": compared, "llr_equal_any_shot": llr_equal_all})


def test_product_sum_nan_posteriors_match_ldpc_and_osd_still_solves(numbers):
    """A tanh product that rounds to +-1 makes log((1+x)/(1-x)) infinite, and a bit that
    receives +inf and -inf a NaN posterior -- in ldpc 2.4.1 exactly as here. OSD orders NaNs
    last (as numpy does), so the result is still deterministic and satisfies the syndrome."""
    h = get("gross").hz
    _, syn = sample(h, 0.05, 3000, 2)
    dec = BpOsdDecoder(h, error_rate=0.05, bp_method="product_sum", max_iter=50, osd_method="osd_cs", osd_order=4)
    ref = ldpc.BpOsdDecoder(h, error_rate=0.05, bp_method="product_sum", max_iter=50, osd_method="osd_cs",
                            osd_order=4)
    nan_shots = 0
    for s in syn:
        c = dec.decode(s)
        ref.decode(s)
        ours_nan = np.isnan(dec.log_prob_ratios)
        assert np.array_equal(ours_nan, np.isnan(np.asarray(ref.log_prob_ratios)))  # ldpc has the same NaNs
        assert np.array_equal((h @ c) % 2, s)
        if ours_nan.any():
            nan_shots += 1
            assert np.array_equal(c, dec.decode(s)), "a NaN shot must decode the same way every time"
    numbers.record("product_sum_nan_llr_shots", "gross/hz/p=0.05/max_iter=50", {"shots": 3000, "nan": nan_shots})


@pytest.mark.parametrize("bp", ["min_sum", "product_sum"])
def test_osd_none_returns_bp_hard_decision(bp):
    h = get("toric-4").hz
    _, syn = sample(h, 0.1, 1000, seed_for("none", bp))
    ours = BpOsdDecoder(h, error_rate=0.1, bp_method=bp, osd_method="none")
    ref = ldpc.BpDecoder(h, error_rate=0.1, bp_method=LDPC_BP[bp], max_iter=10, ms_scaling_factor=0.625)
    failed = 0
    for s in syn:
        out = ours.decode(s)
        assert np.array_equal(out, ref.decode(s))
        if s.any():
            assert np.array_equal(out, (ours.log_prob_ratios <= 0).astype(np.uint8))
        meets = not (syndromes_of(h, out[None]) != s).any()
        assert meets == ours.converged
        assert ours.last_status == (0 if meets else 2)
        failed += not meets
    assert failed > 0  # some shots exercised the "BP failed, no OSD" path


def test_max_iter_zero_means_n_iterations():
    h = get("gross").hz
    n = h.shape[1]
    _, syn = sample(h, 0.1, 300, seed_for("maxiter0"))
    zero = BpOsdDecoder(h, error_rate=0.1, max_iter=0)
    full = BpOsdDecoder(h, error_rate=0.1, max_iter=n)
    ref = ldpc.BpOsdDecoder(h, error_rate=0.1, bp_method="minimum_sum", max_iter=0, ms_scaling_factor=0.625,
                            osd_method="osd0")
    unconverged = 0
    for s in syn:
        a, b, c = zero.decode(s), full.decode(s), ref.decode(s)
        assert np.array_equal(a, b) and np.array_equal(a, c)
        assert zero.iterations == full.iterations == ref.iter if s.any() else zero.iterations == 0
        if not zero.converged:
            unconverged += 1
            assert zero.iterations == n
    assert unconverged > 0


@pytest.mark.parametrize("osd", ["none", "osd0", "osd_cs", "osd_e"])
def test_zero_syndrome_gives_zero_correction(osd):
    h = get("gross").hz
    dec = BpOsdDecoder(h, error_rate=0.3, osd_method=osd, osd_order=2 if osd in ("osd_cs", "osd_e") else 0)
    dec.decode(np.eye(1, h.shape[0], 5, dtype=np.uint8)[0])  # leave state behind first
    assert not dec.decode(np.zeros(h.shape[0], np.uint8)).any()
    assert dec.iterations == 0 and dec.converged
    assert dec.decode_packed(bytes(dec.syndrome_bytes)) == bytes(dec.correction_bytes)
    assert not dec.decode_batch_packed(np.zeros((3, dec.syndrome_bytes), np.uint8)).any()


def test_params_and_aliases():
    p = BpOsdParams(bp_method="ms", osd_method="osd-cs", osd_order=2)
    assert (p.bp_method, p.osd_method) == ("min_sum", "osd_cs")
    assert BpOsdParams(bp_method="minimum_sum").bp_method == "min_sum"
    assert BpOsdParams(channel_probs=[0.1, 0.2], error_rate=None).probs(2).tolist() == [0.1, 0.2]
    dec = BpOsdDecoder(get("hgp13").hz, channel_probs=np.linspace(0.01, 0.2, 13))
    ref = ldpc.BpOsdDecoder(get("hgp13").hz, error_channel=list(np.linspace(0.01, 0.2, 13)),
                            bp_method="minimum_sum", max_iter=10, ms_scaling_factor=0.625, osd_method="osd0")
    _, syn = sample(dec.h, 0.1, 300, 5)
    assert all(np.array_equal(dec.decode(s), ref.decode(s)) for s in syn)


# =============================================================================================
# Input checking
# =============================================================================================

H13 = codes.named_code("hgp13").hz


@pytest.mark.parametrize("h, match", [
    (np.array([[1, 2, 0], [0, 1, 1]]), "binary"),
    (np.array([[1, 0, -1]]), "binary"),
    (np.array([[0.5, 1, 0]]), "binary"),
    (np.array([1, 1, 0]), "2-D"),
    (np.zeros((2, 2, 2), np.uint8), "2-D"),
    (np.zeros((3, 0), np.uint8), "no columns"),
])
def test_bad_matrices_are_rejected(h, match):
    with pytest.raises(ValueError, match=match):
        BpOsdDecoder(h)
    with pytest.raises(ValueError, match=match):
        css_bp_decoder(h, h)


def test_css_checks():
    code = get("hgp13")
    with pytest.raises(ValueError, match="Hx has 13 columns but Hz has 12"):
        css_bp_decoder(code.hx, code.hz[:, :12])
    hz = code.hz.copy()
    hz[0, :] = 0
    hz[0, 0] = 1  # a weight-1 Z check on qubit 0 meets the X checks on qubit 0 oddly
    with pytest.raises(ValueError, match="anticommute"):
        css_bp_decoder(code.hx, hz)
    with pytest.raises(ValueError, match="platform"):
        css_bp_decoder(code.hx, code.hz, platform="fpga")


@pytest.mark.parametrize("settings, match", [
    ({"bp_method": "belief"}, "bp_method='belief'"),
    ({"bp_method": None}, "bp_method"),
    ({"osd_method": "osd_9"}, "osd_method='osd_9'"),
    ({"max_iter": -1}, "max_iter"),
    ({"max_iter": 2.5}, "max_iter"),
    ({"max_iter": True}, "max_iter"),
    ({"max_iter": "5"}, "max_iter"),
    ({"osd_order": -1}, "osd_order"),
    ({"osd_order": 61}, "osd_order"),
    ({"ms_scaling_factor": 1.5}, "ms_scaling_factor"),
    ({"error_rate": 0.0}, "error_rate"),
    ({"error_rate": 1.0}, "error_rate"),
    ({"error_rate": None}, "error_rate"),
    ({"channel_probs": [0.1] * 12}, "channel_probs has 12 entries but the code has 13"),
    ({"channel_probs": [0.1] * 12 + [0.0]}, "channel_probs must all be in"),
])
def test_bad_settings_are_rejected(settings, match):
    with pytest.raises(ValueError, match=match):
        BpOsdDecoder(H13, **settings)
    with pytest.raises(ValueError, match=match):
        css_bp_decoder(H13 * 0, H13, **settings)  # all-zero Hx commutes with anything


def test_bad_syndromes_are_rejected_and_the_decoder_keeps_working():
    dec = BpOsdDecoder(H13, error_rate=0.05)  # 6 checks: 1 byte, 2 bits of padding
    good = np.array([1, 0, 0, 0, 0, 0], np.uint8)
    want = dec.decode(good)
    for bad, match in ((np.zeros(5, np.uint8), "vector of 6"), (np.zeros(7, np.uint8), "vector of 6"),
                       (np.zeros((1, 6), np.uint8), "vector of 6"), (np.array([1, 0, 2, 0, 0, 0]), "not 0 or 1")):
        with pytest.raises(ValueError, match=match):
            dec.decode(bad)
        assert np.array_equal(dec.decode(good), want)
    for bad, match in ((b"", "0 bytes"), (b"\x01\x00", "2 bytes"), (b"\xc0", "beyond its 6 checks")):
        with pytest.raises(ValueError, match=match):
            dec.decode_packed(bad)
    with pytest.raises(ValueError, match=r"shape \(shots, 1\)"):
        dec.decode_batch_packed(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match=r"shape \(shots, 6\)"):
        dec.decode_batch(np.zeros((2, 5), np.uint8))
    with pytest.raises(ValueError, match="bad syndrome in batch"):
        dec.decode_batch_packed(np.array([[1], [0x40]], np.uint8))
    assert np.array_equal(dec.decode(good), want)


def test_decode_batch_rejects_non_binary_syndromes_as_decode_does():
    dec = BpOsdDecoder(H13, error_rate=0.05)
    bad = np.array([[2, 0, 0, 0, 0, 0]], np.uint8)
    with pytest.raises(ValueError, match="not 0 or 1"):
        dec.decode(bad[0])
    raised = False
    try:
        dec.decode_batch(bad)
    except ValueError:
        raised = True
    assert raised, "decode_batch accepted a syndrome entry of 2 (decoded as if it were 1)"


# =============================================================================================
# Through the memcpy transport
# =============================================================================================


def _shm_for(key: str) -> list[str]:
    """memcpy's segments of ``key`` (its per-user directory; see docs/wire-format.md)."""
    folder = os.environ.get("BACKLINE_MEMCPY_DIR") or f"/dev/shm/backline-{os.geteuid()}"
    return [n for n in os.listdir(folder) if n.startswith(key)] if os.path.isdir(folder) else []


def _hgp13_placement(runs_in: str, fn, **init_args) -> tuple[Placement, str]:
    key = f"bposd-{runs_in}-{uuid.uuid4().hex[:10]}"
    return Placement(controller=Controller(), transport="memcpy",
                     coprocessors=[Coprocessor(name=key, coprocessor_fn=fn, runs_in=runs_in,
                                               init_args=init_args)]), key


@pytest.mark.parametrize("runs_in", ["thread", "process"])
def test_css_function_through_memcpy_equals_local_decoder(runs_in):
    code = get("hgp13")
    settings = {"osd_method": "osd_cs", "osd_order": 4, "error_rate": 0.1}
    fn = css_bp_decoder(code.hx, code.hz, **settings)
    placement, key = _hgp13_placement(runs_in, fn)
    local = {0: BpOsdDecoder(code.hx, **settings), 1: BpOsdDecoder(code.hz, **settings)}
    every = [bytes([s]) for s in range(64)]  # all syndromes of 6 checks
    rounds = 0
    with deploy(placement, in_bytes=1, out_bytes=2) as d:
        ctl = d.session()
        for decoder_id in (0, 1, 1, 0):  # interleaved ids on one session
            for s in every:
                assert ctl.round(s, decoder_id) == local[decoder_id].decode_packed(s), (decoder_id, s)
                rounds += 1
    assert rounds == 4 * 64
    assert not _shm_for(key)


@pytest.mark.parametrize("runs_in", ["thread", "process"])
def test_bad_syndrome_in_a_live_session_is_an_error_reply(runs_in):
    code = get("hgp13")
    placement, key = _hgp13_placement(runs_in, css_bp_decoder(code.hx, code.hz))
    ok = BpOsdDecoder(code.hz).decode_packed(b"\x05")
    with deploy(placement, in_bytes=4, out_bytes=2) as d:
        ctl = d.session()
        for bad in (b"\x01\x00", b"\x01\x00\x00\x00", b"", b"\xff"):  # too long, too short, padding bits set
            with pytest.raises(FunctionError, match=r"decoder_id 1 failed .*returned 1[13]\)"):
                ctl.round(bad, 1)
            assert ctl.round(b"\x05", 1) == ok  # the next round works
        with pytest.raises(UnknownDecoderError):
            ctl.round(b"\x05", 2)
        assert ctl.round(b"\x05", 1) == ok
    assert not _shm_for(key)


def test_bound_function_reports_bad_ids_and_lengths():
    code = get("hgp13")
    with BoundFunction(css_bp_decoder(code.hx, code.hz)) as fn:
        for decoder_id, payload, rc in ((2, b"\x01", 10), (0, b"\x01\x00", 11), (0, b"\x01", None),
                                        (1, b"\x80", 13)):
            if rc is None:
                assert len(fn(decoder_id, payload)) == 2
                continue
            with pytest.raises(FunctionError, match=f"returned {rc} "):
                fn(decoder_id, payload)
        with pytest.raises(FunctionError, match="returned 12 "):
            fn(0, b"\x01", out_cap=1)  # the reply needs 2 bytes


def test_coprocessor_process_with_a_large_code():
    code = codes.named_code("hgp-rep-45")  # n = 3961: a 142 kB context, 284 kB as hex
    # css_bp_decoder's function, built without its commutation check (an int64 matmul taking ~10 s here)
    fn = CoprocessorFunction(name="bposd", library=LIBRARY, symbol="bpod_css_fn", init_symbol="bpod_css_init",
                             fini_symbol="bpod_css_fini", context=encode([code.hx, code.hz], BpOsdParams()),
                             decoder_ids=(0, 1))
    assert 2 * len(fn.context) > 131072
    # a 3961-bit correction needs slots larger than the default 256 bytes
    placement, key = _hgp13_placement("process", fn, slot_bytes=1024)
    syndrome_bytes, correction_bytes = (code.hz.shape[0] + 7) // 8, (code.n + 7) // 8
    try:
        with deploy(placement, in_bytes=syndrome_bytes, out_bytes=correction_bytes) as d:
            e = np.zeros(code.n, np.uint8)
            e[[3, 100]] = 1
            s = np.packbits(syndromes_of(code.hz, e[None])[0], bitorder="little").tobytes()
            assert d.session().round(s, 1) == BpOsdDecoder(code.hz).decode_packed(s)
            assert _shm_for(key)  # the check below looks where the segment really is
    finally:
        assert not _shm_for(key)


# =============================================================================================
# Plugin entry points
# =============================================================================================


@pytest.mark.parametrize("name", ["steane", "hgp13", "toric-4"])
def test_css_function_declares_its_reply_width(name):
    code = get(name)
    fn = css_bp_decoder(code.hx, code.hz)
    assert fn.reply_bits == code.hx.shape[1] == code.n  # the correction mask of n qubits
    assert CoprocessorFunction.from_dict(fn.to_dict()).reply_bits == code.n
    assert plugins.get("decoder", "bposd").build(hx=code.hx, hz=code.hz).reply_bits == code.n


def test_plugin_entry_points():
    code = get("hgp13")
    assert {"bposd", "bp"} <= set(plugins.names("decoder"))
    bposd = plugins.get("decoder", "bposd").build(hx=code.hx, hz=code.hz)
    assert (bposd.name, tuple(bposd.decoder_ids)) == ("bposd", (0, 1))
    assert bposd.context == css_bp_decoder(code.hx, code.hz).context
    bp = plugins.get("decoder", "bp").build(hx=code.hx, hz=code.hz)
    assert bp.name == "bp" and bp.context == css_bp_decoder(code.hx, code.hz, osd_method="none").context
    with pytest.raises(ValueError, match="no post-processing"):
        plugins.get("decoder", "bp").build(hx=code.hx, hz=code.hz, osd_method="osd0")
    # --decoder-param values arrive as text
    text = plugins.get("decoder", "bposd").build(hx=code.hx, hz=code.hz, max_iter="5", osd_order="3",
                                                 osd_method="osd_cs", ms_scaling_factor="0.5", error_rate="0.1")
    assert text.context == css_bp_decoder(code.hx, code.hz, max_iter=5, osd_order=3, osd_method="osd_cs",
                                          ms_scaling_factor=0.5, error_rate=0.1).context
    assert plugins.get("decoder", "bp").build(hx=code.hx, hz=code.hz, max_iter="5", osd_method="none").context == \
        css_bp_decoder(code.hx, code.hz, max_iter=5, osd_method="none").context
    with pytest.raises(ValueError):
        plugins.get("decoder", "bposd").build(hx=code.hx, hz=code.hz, max_iter="five")
    # the built function decodes
    with BoundFunction(text) as fn:
        assert fn(1, b"\x05") == BpOsdDecoder(code.hz, max_iter=5, osd_order=3, osd_method="osd_cs",
                                              ms_scaling_factor=0.5, error_rate=0.1).decode_packed(b"\x05")


# =============================================================================================
# Command lines
# =============================================================================================


@pytest.fixture
def hgp13_npz() -> Path:
    return CODES_DIR / "hgp13.npz"


@pytest.mark.parametrize("runs_in, extra", [
    ("thread", []),
    ("process", ["--decoder-id", "1", "--decoder-param", "max_iter=5", "--decoder-param", "osd_method=osd_cs",
                 "--decoder-param", "osd_order=3"]),
])
def test_backline_bench_with_bposd(runs_in, extra, hgp13_npz, tmp_path):
    before = set(_shm_for(""))
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "backline_core", "bench", "--coprocessor-fn", "bposd", "--code", str(hgp13_npz),
         "--runs-in", runs_in, "--rounds", "20000", "--block", "5000", "--no-progress", "--json", str(out), *extra],
        check=False, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert data["lost"] == 0 and data["mismatched"] == 0
    assert data["config"]["coprocessor_fn"] == "bposd" and data["config"]["runs_in"] == runs_in
    assert data["config"]["payload_bytes"] == 1 and data["rounds"] == 20000
    assert set(_shm_for("")) <= before


@pytest.mark.parametrize("decoder_id, says", [(2, "--decoder-id 2: bposd serves decoder ids 0, 1")])
def test_backline_bench_with_bposd_refuses_a_decoder_id_it_does_not_serve(decoder_id, says, hgp13_npz):
    result = subprocess.run(
        [sys.executable, "-m", "backline_core", "bench", "--coprocessor-fn", "bposd", "--code", str(hgp13_npz),
         "--decoder-id", str(decoder_id), "--rounds", "100", "--no-progress"],
        check=False, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and says in lines[0], result.stderr


def test_bench_payloads_are_syndromes_of_the_code_the_decoder_id_names(hgp13_npz):
    from backline_decoder_bpod.plugin import bench_payloads

    from backline_core.sdk import PayloadSpec

    with np.load(hgp13_npz) as data:
        hx, hz = data["Hx"].astype(np.uint8), data["Hz"].astype(np.uint8)
    made = {}
    for decoder_id, h in ((0, hx), (1, hz)):
        spec = PayloadSpec(decoder_id=decoder_id, payload_bytes=8, count=64, seed=3, error_rate=0.2,
                           params={"hx": hx, "hz": hz})
        made[decoder_id] = bench_payloads(None, spec)
        assert made[decoder_id].replies is None  # the replies: the decoder called locally
        assert len(made[decoder_id].requests) == 64
        assert {len(r) for r in made[decoder_id].requests} == {-(-h.shape[0] // 8)}
    # the same errors (one seed) through Hx and through Hz, which differ
    assert made[0].requests != made[1].requests


def test_backline_bench_decoder_command(tmp_path):
    out = tmp_path / "dec.json"
    result = subprocess.run([sys.executable, "-m", "backline_core", "bench-decoder", "--code", "hgp13", "--circuit",
                             "color-d5-r4", "--shots", "300", "--repeats", "1", "--json", str(out)],
                            check=False, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(out.read_text())
    bposd = [r for r in rows if r["decoder"] == "bposd"]
    assert [r["case"] for r in bposd] == ["hgp13 p=0.05", "color-d5-r4"]
    for row in bposd:  # the same predictions as ldpc's sinter path, timed in the same run
        assert row["shots"] == 300 and row["agreement"] == 1.0
        assert row["us_per_shot"] > 0 and row["reference_us_per_shot"] > 0 and row["ratio"] > 0
    assert "ratio" in result.stdout


@pytest.mark.parametrize("args, says", [
    (["--shots", "0"], "--shots 0"), (["--p", "0.7"], "--p 0.7"), (["--code", "nosuch"], "unknown code"),
    (["--circuit", "nosuch"], "invalid choice"),
])
def test_backline_bench_decoder_errors_are_one_line(args, says):
    result = subprocess.run([sys.executable, "-m", "backline_core", "bench-decoder", *args], check=False,
                            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("task, d", [("surface_code:rotated_memory_x", 3), ("color_code:memory_xyz", 3)])
@pytest.mark.parametrize("bp", ["min_sum", "product_sum"])
def test_osd_candidates_match_ldpc_on_circuit_level_dems(task, d, bp):
    """OSD-CS and OSD-E take each candidate from OSD-0's solution by linearity and sum its cost over its
    own columns: on circuit-level DEMs (unequal priors, many more columns than checks, so many
    candidates and near-ties) every correction equals ldpc's."""
    stim = pytest.importorskip("stim")
    from backline_core import dem_matrices

    circuit = stim.Circuit.generated(task, distance=d, rounds=d, after_clifford_depolarization=0.01,
                                     before_measure_flip_probability=0.01)
    dem = circuit.detector_error_model(decompose_errors=False)
    m = dem_matrices(dem)
    syn = dem.compile_sampler(seed=5).sample(300)[0].astype(np.uint8)
    for osd, order in (("osd_cs", 4), ("osd_cs", 10), ("osd_e", 5)):
        settings = {"max_iter": 5, "osd_method": osd, "osd_order": order, "ms_scaling_factor": 0.625}
        ours = BpOsdDecoder(m.h, channel_probs=m.priors, bp_method=bp, **settings).decode_batch(syn)
        ref = ldpc.BpOsdDecoder(m.h, error_channel=list(m.priors),
                                bp_method="minimum_sum" if bp == "min_sum" else bp, **settings)
        theirs = ldpc_decode_all(ref, syn)
        differ = np.flatnonzero((ours != theirs).any(axis=1))
        assert differ.size == 0, f"{task} {bp} {osd} {order}: {differ.size} of {len(syn)} shots differ from ldpc"
