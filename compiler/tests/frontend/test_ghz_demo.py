"""The GHZ demo (Listing 3): correction lowers the logical error rate over 2000 noisy shots,
and the same QNode gives the same shots when only the placement changes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pennylane")
pytest.importorskip("backline_device_stim")

from backline_compiler.demos import ghz_steane as demo  # noqa: E402

SHOTS = 2000
P = 0.002
SEED = 7


@pytest.fixture(scope="module")
def corrected() -> demo.Outcome:
    return demo.run(demo.device("default.clifford", noise=P, seed=SEED), SHOTS)


def test_noiseless_listing_3_gives_ghz_samples_and_records_every_round() -> None:
    out = demo.run(demo.device("default.clifford", seed=SEED), 200)
    assert out.samples.shape == (200, 3)
    rows = {tuple(r) for r in out.samples.tolist()}
    assert rows == {(0, 0, 0), (1, 1, 1)}
    # an X and a Z decode per block a gate touches -- H: 1 block, each CNOT: 2 -- so 10, plus
    # one decode per logical readout: 13 rounds per shot
    rtt = out.rtt[demo.DECODER_NODE]
    assert rtt["rounds"] == 200 * 13
    assert 0 < rtt["median_us"] < 1e4


def test_correction_lowers_the_logical_error_rate(corrected: demo.Outcome) -> None:
    raw = demo.run(demo.device("default.clifford", noise=P, apply_correction=False, seed=SEED), SHOTS)
    (r1, h1), (r0, h0) = corrected.ler, raw.ler
    print(f"\nGHZ demo, p={P}, {SHOTS} shots: LER corrected {r1:.4f} ± {h1:.4f}, uncorrected {r0:.4f} ± {h0:.4f}")
    assert r1 < r0
    assert corrected.rtt[demo.DECODER_NODE]["rounds"] == SHOTS * 13


@pytest.mark.parametrize("placement", ["bposd", "process", "local"])
def test_only_the_placement_changes(corrected: demo.Outcome, placement: str) -> None:
    if placement == "bposd":
        pytest.importorskip("backline_decoder_bpod")
        dev = demo.device("default.clifford", coprocessor_fn=demo.steane_bposd(), noise=P, seed=SEED)
    elif placement == "process":
        dev = demo.device("default.clifford", runs_in="process", noise=P, seed=SEED)
    else:  # no placement: the encoded program decodes in the controller
        dev = demo.device("default.clifford", coprocessor_fn=None, noise=P, seed=SEED)
    out = demo.run(dev, SHOTS)
    np.testing.assert_array_equal(out.samples, corrected.samples)


def test_only_the_placement_changes_in_an_executor(corrected: demo.Outcome) -> None:
    handle = pytest.importorskip("backline_executor_orc.handle", reason="needs the backline-executor-orc plugin")
    with handle.Executor.local() as ex:
        out = demo.run(demo.device("default.clifford", noise=P, seed=SEED, executor=ex), SHOTS)
    np.testing.assert_array_equal(out.samples, corrected.samples)
    assert out.rtt[demo.DECODER_NODE]["rounds"] == SHOTS * 13


def test_demo_command_compares_the_executor_with_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("backline_executor_orc.handle", reason="needs the backline-executor-orc plugin")
    from backline_core._cli import main

    assert main(["demo", "ghz", "--shots", "200", "--skip-placements", "--executor", "local", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "in an executor on this machine" in out
    assert "samples identical (seed 2026)" in out
    assert out.count("rounds/s, RTT median") == 2


def test_demo_command_compare_needs_an_executor(capsys: pytest.CaptureFixture[str]) -> None:
    from backline_compiler.demos.ghz_steane import main

    with pytest.raises(SystemExit) as exc:
        main(["--compare"])
    assert exc.value.code == 2
    assert ("--compare compares another placement with the in-process run: give --executor local or --transport rdma "
            "or ucx") in capsys.readouterr().err


def test_demo_command_refuses_an_executor_and_rdma_together(capsys: pytest.CaptureFixture[str]) -> None:
    from backline_compiler.demos.ghz_steane import main

    with pytest.raises(SystemExit) as exc:
        main(["--executor", "local", "--transport", "rdma"])
    assert exc.value.code == 2
    assert "separate placements" in capsys.readouterr().err


def test_demo_command_runs() -> None:
    from backline_core._cli import main

    assert main(["demo", "ghz", "--shots", "300", "--skip-placements"]) == 0


def test_demo_command_rejects_an_unknown_demo(capsys: pytest.CaptureFixture[str]) -> None:
    from backline_core._cli import main

    assert main(["demo", "nope"]) == 2
    assert "unknown demo 'nope'; available: ghz" in capsys.readouterr().err


def test_every_round_trip_is_recorded() -> None:
    out = demo.run(demo.device("null.qubit"), 25)
    rtt = out.rtt[demo.DECODER_NODE]
    assert rtt["rounds"] == rtt["recorded"] == 25 * 13
