"""Demos 2 and 2a (examples/explicit_decode_hgp13.py): an explicitly written [[13, 1, 3]]
hgp13 round, decoded by BP+OSD on a memcpy coprocessor with ``decode`` (demo 2) and with
runtime calls (demo 2a), run on stim."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pennylane")
pytest.importorskip("jax")
pytest.importorskip("stim")
pytest.importorskip("backline_device_stim")
pytest.importorskip("backline_decoder_bpod")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "explicit_decode_hgp13.py"
SEED = 2026
SWEEP_SHOTS = 4
NOISY_SHOTS = 600


@pytest.fixture(scope="module")
def demo():
    name = "_backline_example_explicit_decode_hgp13"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def code(demo):
    return demo.load_code()


@pytest.fixture(scope="module")
def sweeps(demo, code):
    """basis -> demo -> (the round, its single-qubit-error sweep), noiseless, same seed."""
    out = {}
    for basis in demo.BASES:
        out[basis] = {}
        for which in demo.DEMOS:
            rnd = demo.build(which, basis=basis, shots=SWEEP_SHOTS, seed=SEED, code=code)
            out[basis][which] = (rnd, demo.single_error_sweep(rnd))
    return out


def test_encoder_spans_the_checks(demo, code):
    for h in (code.hx, code.hz):
        rows, pivots = demo.rref_gf2(h)
        assert len(pivots) == h.shape[0] == 6  # full rank: sum over rowspace(h) has 2^6 terms
        assert all(rows[i, p] == 1 and rows[:, p].sum() == 1 for i, p in enumerate(pivots))
        assert len(demo.rref_gf2(np.vstack([h, rows]))[1]) == 6  # the same row space over GF(2)
        for pivot, targets in demo.encoder(h):  # no CNOT targets a pivot: the CNOTs commute
            assert not set(targets) & set(pivots) and pivot in pivots


@pytest.mark.parametrize("which", ["2", "2a"])
@pytest.mark.parametrize("basis", ["Z", "X"])
def test_no_error_round_is_trivial(demo, code, sweeps, basis, which):
    rnd, _ = sweeps[basis][which]
    res = demo.run(rnd)
    assert not res.x_syn.any() and not res.z_syn.any()
    assert not res.corr_x.any() and not res.corr_z.any()
    assert not res.logical.any()
    # the readout is a codeword of the checks of the readout basis
    checks = code.hz if basis == "Z" else code.hx
    assert not (res.data @ checks.T % 2).any()
    if which == "2a":
        assert res.statuses.shape == (SWEEP_SHOTS, 6) and not res.statuses.any()


@pytest.mark.parametrize("basis", ["Z", "X"])
def test_every_single_qubit_error_is_corrected(demo, code, sweeps, basis):
    """X errors on each data qubit of |0_L> (basis Z), Z errors on each of |+_L> (basis X)."""
    _, sweep = sweeps[basis]["2"]
    assert sweep["corrected_failures"] == []
    # without the correction, exactly the errors on the logical operator's support flip it
    support = code.lz if basis == "Z" else code.lx
    assert sweep["uncorrected_failures"] == np.flatnonzero(support).tolist()
    for q, (fixed, raw) in sweep["results"].items():
        for res in (fixed, raw):
            # the syndrome flags the error: decoder 1 gets the Hz syndrome of an X error,
            # decoder 0 the Hx syndrome of a Z error; the other syndrome stays 0
            if basis == "Z":
                assert (res.z_syn == code.hz[:, q]).all() and not res.x_syn.any()
                assert (res.corr_x @ code.hz.T % 2 == res.z_syn).all() and not res.corr_z.any()
            else:
                assert (res.x_syn == code.hx[:, q]).all() and not res.z_syn.any()
                assert (res.corr_z @ code.hx.T % 2 == res.x_syn).all() and not res.corr_x.any()


@pytest.mark.parametrize("basis", ["Z", "X"])
def test_demo_2a_equals_demo_2_shot_by_shot(demo, sweeps, basis):
    (_, two), (_, two_a) = sweeps[basis]["2"], sweeps[basis]["2a"]
    assert two_a["corrected_failures"] == [] and two_a["uncorrected_failures"] == two["uncorrected_failures"]
    assert demo.same_records(two, two_a)
    # the readout is random (a random codeword), so equal records mean equal randomness
    data = np.vstack([res.data for pair in two["results"].values() for res in pair])
    assert len({row.tobytes() for row in data}) > 1


@pytest.fixture(scope="module")
def noisy(demo, code):
    """demo -> runs of |0_L> with noise, stored 20 steps, same seed: demo 2 corrected and
    uncorrected, demo 2a corrected (its first run draws the same randomness as demo 2's)."""
    out = {}
    for which in demo.DEMOS:
        rnd = demo.build(which, basis="Z", shots=NOISY_SHOTS, noise=0.001, idle=20, seed=SEED, code=code)
        out[which] = [demo.run(rnd, correct=True)]
        if which == "2":
            out[which].append(demo.run(rnd, correct=False))
    return out


def test_noisy_demo_2a_equals_demo_2(noisy):
    a, b = noisy["2"][0], noisy["2a"][0]
    assert np.array_equal(a.record(), b.record())
    assert np.array_equal(a.logical, b.logical)
    fixed = noisy["2"][0]
    assert fixed.x_syn.any() and fixed.z_syn.any() and fixed.corr_x.any()  # the noise did something


def test_correction_lowers_the_logical_error_rate(demo, noisy):
    fixed, raw = noisy["2"]
    # ~0.01 against ~0.05 (what one round of a d=3 code can do: see the example's docstring)
    assert 0 < fixed.ler < raw.ler, (fixed.ler, raw.ler)
    assert raw.ler - fixed.ler > 0.01, (fixed.ler, raw.ler)
    # the run's statistics the demo prints
    for res in noisy["2"] + noisy["2a"]:
        rtt = res.rtt[demo.COPROCESSOR]
        assert rtt["rounds"] == 2 * NOISY_SHOTS and 0 < rtt["median_us"] <= rtt["max_us"]
        assert res.us_per_shot > 0 and res.timings["compile_s"] > 0
