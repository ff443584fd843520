"""The GHZ demo with fault-tolerant (flag) extraction: ``Backline(..., extraction="flag")`` builds the
coprocessor's decoder from each compiled program's detector error model, the samples are the same on
every placement, and ``backline demo ghz --extraction flag --json`` writes the figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pennylane")
pytest.importorskip("backline_device_stim")
pytest.importorskip("backline_decoder_lut")

import pennylane as qml  # noqa: E402

from backline_compiler import Backline  # noqa: E402
from backline_compiler.demos import ghz_steane as demo  # noqa: E402
from backline_core import Controller, Coprocessor  # noqa: E402
from backline_core._errors import PlacementError  # noqa: E402

P = 0.002
SEED = 5
FLAG = {"extraction": "flag", "coprocessor_fn": "lut", "decoder_params": {"depth": 2}}


def test_noiseless_flag_ghz_gives_ghz_samples_one_decode_per_shot() -> None:
    out = demo.run(demo.device("default.clifford", seed=SEED, **FLAG), 200)
    assert {tuple(r) for r in out.samples.tolist()} == {(0, 0, 0), (1, 1, 1)}
    assert out.rtt[demo.DECODER_NODE]["rounds"] == 200  # the shot is decoded once, at its last measurement


def test_the_same_samples_in_a_thread_and_in_its_own_process() -> None:
    thread = demo.run(demo.device("default.clifford", noise=P, seed=SEED, **FLAG), 400)
    process = demo.run(demo.device("default.clifford", noise=P, seed=SEED, runs_in="process", **FLAG), 400)
    np.testing.assert_array_equal(thread.samples, process.samples)
    assert demo.logical_error_rate(thread.samples)[0] > 0  # noisy enough to have errors to agree on


def test_demo_command_writes_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "flag.json"
    assert demo.main(["--extraction", "flag", "--noise", str(P), "--shots", "1500", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "flag extraction" in out and "lut, own process" in out and "samples identical to 2." in out
    figures = json.loads(path.read_text())
    assert {"extraction", "noise", "shots", "ler_corrected", "ler_uncorrected", "ler_corrected_ci95",
            "ler_uncorrected_ci95"} <= set(figures)
    assert figures["extraction"] == "flag" and figures["noise"] == P and figures["shots"] == 1500
    low, high = figures["ler_corrected_ci95"]
    assert low <= figures["ler_corrected"] <= high
    # measured 0.016 against 0.087 (2,000 shots): the bar sits more than 5 sigma from both
    assert figures["ler_corrected"] < 0.5 * figures["ler_uncorrected"]


def controller() -> Controller:
    return Controller(hardware="cpu", device=qml.device("default.clifford", wires=3))


@pytest.mark.parametrize("kwargs, says", [
    ({"extraction": "flag"}, "give one, e.g. Coprocessor"),
    ({"extraction": "flag", "coprocessors": [Coprocessor(coprocessor_fn="steane")]},
     "name a decoder plugin that builds from one"),
    ({"extraction": "steane", "coprocessors": [Coprocessor(coprocessor_fn="lut")]}, "verified ancilla block is not "
                                                                                    "built"),
    ({"extraction": "flag", "qec_code": None, "coprocessors": [Coprocessor(coprocessor_fn="lut")]}, "needs a qec_code"),
    ({"decoder_params": {"depth": 2}}, "decoder_params are for decoders built from a detector error model"),
    ({"extraction": "flag", "coprocessors": [Coprocessor(coprocessor_fn="lut")], "decoder_params": {"depth": 0}},
     "decoder 'lut' did not build"),
])
def test_bad_settings_are_refused_at_once(kwargs: dict, says: str) -> None:
    settings = {"qec_code": "steane", **kwargs}
    with pytest.raises(PlacementError, match=says) as info:
        Backline(controller=controller(), **settings)
    assert "\n" not in str(info.value)


def test_demo_command_refuses_bad_noise(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--extraction", "flag", "--noise", "1.5"])
    assert exc.value.code == 2
    assert "--noise 1.5 is not a probability in [0, 1]" in capsys.readouterr().err
