"""Tiered decoding: a primary decoder for most windows, an auxiliary one on its own coprocessor for the
windows the escalation criterion flags (docs/streaming.md, "Tiered decoding")."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stim

from backline_core import Controller, Coprocessor, InvalidArgumentError, Placement, plugins
from backline_qec import SlidingWindowDecoder
from backline_qec.stream import stream
from backline_qec.tiered import TieredWindowDecoder, parse_escalate_when


def _surface(d: int, rounds: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p, before_round_data_depolarization=p)


@pytest.fixture(scope="module")
def small() -> tuple[stim.Circuit, np.ndarray, np.ndarray]:
    circuit = _surface(3, 12, 0.004)
    dets, obs = circuit.compile_detector_sampler(seed=3).sample(120, separate_observables=True)
    return circuit, dets.astype(np.uint8), obs


def _offline(circuit: stim.Circuit, dets: np.ndarray, escalated: np.ndarray, threshold: int) -> np.ndarray:
    """Window by window, what the chosen tier's window decoder gives offline, on the events it would see."""
    primary = SlidingWindowDecoder(circuit, "bp", window=6, commit=3)
    auxiliary = SlidingWindowDecoder(circuit, "bposd", window=6, commit=3)
    num_obs = primary.num_observables
    pred = np.zeros((len(dets), num_obs), np.uint8)
    for s in range(len(dets)):
        work = dets[s].copy()
        for k, model in enumerate(primary.models):
            events = work[model.detectors]
            assert escalated[s, k] == (events.sum() > threshold)
            tier = auxiliary if escalated[s, k] else primary
            reply = tier.decoders[tier.shape[k]].decode_batch(events[None, :])[0]
            pred[s] ^= reply[:num_obs]
            work[model.handed_on] ^= reply[num_obs:]
    return pred


def test_each_window_gets_what_the_chosen_decoder_gives_offline(small: tuple[stim.Circuit, np.ndarray,
                                                                              np.ndarray]) -> None:
    circuit, dets, obs = small
    result = stream(circuit, "bp", detectors=dets, observables=obs, window=6, commit=3, escalate_to="bposd",
                    escalate_when="syndrome-weight>2")
    assert 0 < result.escalated.mean() < 1  # both tiers answered windows here
    assert (result.predictions == _offline(circuit, dets, result.escalated, 2)).all()
    report = result.to_json()
    assert report["escalated"] == pytest.approx(result.escalated.mean())
    tiers = report["tiers"]
    assert tiers["primary"]["windows"] + tiers["auxiliary"]["windows"] == len(dets) * report["windows_per_shot"]
    assert tiers["primary"]["placement"]["runs_in"] == "thread"
    assert tiers["auxiliary"]["placement"]["runs_in"] == "process"
    assert tiers["primary"]["decoder"]["name"] == "bp" and tiers["auxiliary"]["decoder"]["name"] == "bposd"
    assert tiers["primary"]["latency_ns"]["p50"] > 0 and tiers["auxiliary"]["latency_ns"]["p99"] > 0


@pytest.mark.parametrize("threshold, only", [(-1, "bposd"), (10**6, "bp")])
def test_all_or_nothing_escalated_is_one_decoder_alone(small: tuple[stim.Circuit, np.ndarray, np.ndarray],
                                                       threshold: int, only: str) -> None:
    circuit, dets, obs = small
    result = stream(circuit, "bp", detectors=dets, observables=obs, window=6, commit=3, escalate_to="bposd",
                    escalate_when=f"syndrome-weight>{threshold}", reference=False)
    alone = SlidingWindowDecoder(circuit, only, window=6, commit=3).decode_batch(dets)
    assert (result.predictions == alone).all()
    assert result.to_json()["escalated"] == (1.0 if only == "bposd" else 0.0)


def test_the_logical_error_rate_is_the_auxiliary_decoders_within_noise() -> None:
    # K = 1: BP alone fails on many low-weight surface-code syndromes (docs/streaming.md, "Tiered
    # decoding"), so only windows of at most one detection event stay with it here
    circuit = _surface(5, 10, 0.003)
    dets, obs = circuit.compile_detector_sampler(seed=17).sample(3000, separate_observables=True)
    tiered, up = TieredWindowDecoder(circuit, "bp", "bposd", threshold=1, window=10, commit=5).decode_batch(dets)
    aux = SlidingWindowDecoder(circuit, "bposd", window=10, commit=5).decode_batch(dets)
    a, b, n = int((tiered != obs).any(axis=1).sum()), int((aux != obs).any(axis=1).sum()), len(dets)
    assert a > 0 and b > 0 and 0 < up.mean() < 1
    pooled = (a + b) / (2 * n)
    assert abs((a - b) / n / math.sqrt(2 * pooled * (1 - pooled) / n)) < 4, (a, b, up.mean())


@pytest.mark.parametrize("text, says", [("not-converged-ish", "expected not-converged or syndrome-weight>K"),
                                        ("weight>3", "expected not-converged or syndrome-weight>K"),
                                        ("syndrome-weight>x", "expected not-converged or syndrome-weight>K")])
def test_a_bad_criterion_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        parse_escalate_when(text)
    assert parse_escalate_when("syndrome-weight>-1") == -1
    assert parse_escalate_when(" not-converged ") is None


def test_a_window_reply_can_carry_the_events_its_estimate_explains(small: tuple[stim.Circuit, np.ndarray,
                                                                                   np.ndarray]) -> None:
    circuit, dets, _ = small
    plain = SlidingWindowDecoder(circuit, "bposd", window=6, commit=3)
    full = SlidingWindowDecoder(circuit, "bposd", window=6, commit=3, reply_syndrome=True)
    num_obs = plain.num_observables
    for k, model in enumerate(full.models):
        events = dets[:, model.detectors]
        reply = full.decoders[full.shape[k]].decode_batch(events)
        head = num_obs + len(model.handed_on)
        assert reply.shape[1] == head + len(model.detectors)
        # OSD's estimate always explains the events; the reply's head is the plain window reply
        assert (reply[:, head:] == events).all()
        assert (reply[:, :head] == plain.decoders[plain.shape[k]].decode_batch(events)).all()
    assert (full.decode_batch(dets) == plain.decode_batch(dets)).all()


def _offline_converged(circuit: stim.Circuit, dets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Window by window: BP, and where its estimate does not explain the events, BP+OSD instead."""
    primary = SlidingWindowDecoder(circuit, "bp", window=6, commit=3, reply_syndrome=True)
    auxiliary = SlidingWindowDecoder(circuit, "bposd", window=6, commit=3)
    num_obs = primary.num_observables
    pred = np.zeros((len(dets), num_obs), np.uint8)
    up = np.zeros((len(dets), len(primary.models)), bool)
    for s in range(len(dets)):
        work = dets[s].copy()
        for k, model in enumerate(primary.models):
            events = work[model.detectors]
            head = num_obs + len(model.handed_on)
            reply = primary.decoders[primary.shape[k]].decode_batch(events[None, :])[0]
            if (reply[head:] != events).any():
                up[s, k] = True
                reply = auxiliary.decoders[auxiliary.shape[k]].decode_batch(events[None, :])[0]
            pred[s] ^= reply[:num_obs]
            work[model.handed_on] ^= reply[num_obs:head]
    return pred, up


def test_not_converged_escalates_the_windows_bp_does_not_explain(small: tuple[stim.Circuit, np.ndarray,
                                                                                 np.ndarray]) -> None:
    circuit, dets, obs = small
    result = stream(circuit, "bp", detectors=dets, observables=obs, window=6, commit=3, escalate_to="bposd")
    pred, up = _offline_converged(circuit, dets)
    assert result.to_json()["escalate_when"] == "not-converged"
    assert 0 < result.escalated.mean() < 1
    assert (result.escalated == up).all() and (result.predictions == pred).all()
    report = result.to_json()
    tiers = report["tiers"]
    # every window had the primary's round; the escalated ones the auxiliary's too
    assert tiers["primary"]["windows"] == len(dets) * report["windows_per_shot"]
    assert tiers["auxiliary"]["windows"] == int(up.sum())
    assert report["latency_escalated_ns"]["p50"] > report["tiers"]["auxiliary"]["latency_ns"]["p50"] * 0.999


def test_a_primary_that_always_explains_the_syndrome_never_escalates(small: tuple[stim.Circuit, np.ndarray,
                                                                                    np.ndarray]) -> None:
    circuit, dets, obs = small
    tw = TieredWindowDecoder(circuit, "pymatching", "bposd", threshold=None, window=6, commit=3)
    pred, up = tw.decode_batch(dets)
    assert not up.any()
    assert (pred == SlidingWindowDecoder(circuit, "pymatching", window=6, commit=3).decode_batch(dets)).all()


def test_not_converged_gives_the_auxiliary_decoders_logical_error_rate() -> None:
    circuit = _surface(5, 10, 0.003)
    dets, obs = circuit.compile_detector_sampler(seed=17).sample(2000, separate_observables=True)
    tiered, up = TieredWindowDecoder(circuit, "bp", "bposd", threshold=None, window=10, commit=5).decode_batch(dets)
    aux = SlidingWindowDecoder(circuit, "bposd", window=10, commit=5).decode_batch(dets)
    primary = SlidingWindowDecoder(circuit, "bp", window=10, commit=5).decode_batch(dets)
    a, b, c = ((x != obs).any(axis=1).sum() for x in (tiered, aux, primary))
    assert 0 < up.mean() < 1 and b > 0
    pooled, n = (a + b) / (2 * len(dets)), len(dets)
    assert abs((a - b) / n / math.sqrt(2 * pooled * (1 - pooled) / n)) < 4, (a, b, up.mean())
    assert c > a  # BP alone is worse: what escalation is for


def _backline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_the_command_runs_tiered_decoding_and_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 12, 0.004)))
    # the placement's function is replaced by the auxiliary's window function
    echo = plugins.get("decoder", "echo").build()
    (tmp_path / "aux.json").write_text(Placement(controller=Controller(), transport="memcpy", coprocessors=[
        Coprocessor(name="aux", coprocessor_fn=echo, runs_in="thread")]).to_json())
    proc = _backline("qec", "stream", "c.stim", "--decoder", "bp", "--escalate-to", "bposd", "--escalate-when",
                     "syndrome-weight>2", "--escalate-placement", "aux.json", "--escalate-param", "osd_order=2",
                     "--shots", "40", "--seed", "2", "--window", "6", "--commit", "3", "--json", "r.json",
                     "--predictions", "p.b8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert 0 <= report["escalated"] <= 1 and set(report["tiers"]) == {"primary", "auxiliary"}
    assert report["tiers"]["auxiliary"]["placement"]["coprocessor"] == "aux"
    assert report["tiers"]["auxiliary"]["decoder"]["params"]["osd_order"] == 2
    assert "escalated" in proc.stdout and (tmp_path / "p.b8").stat().st_size == 40


@pytest.mark.parametrize("args, says", [
    (["--decoder", "nosuch", "--escalate-to", "bposd", "--escalate-when", "syndrome-weight>3"], "unknown decoder"),
    (["--decoder", "bp", "--escalate-to", "nosuch", "--escalate-when", "syndrome-weight>3"], "unknown decoder"),
    (["--decoder", "bp", "--escalate-to", "bposd", "--escalate-when", "weight>3"], "expected not-converged or"),
    (["--decoder", "bp", "--escalate-when", "syndrome-weight>3"], "go with --escalate-to"),
    (["--decoder", "bp", "--escalate-placement", "x.json"], "go with --escalate-to"),
    (["--decoder", "bp", "--escalate-to", "bposd", "--escalate-when", "syndrome-weight>3", "--parallel-windows",
      "--window", "7", "--commit", "3"], "not supported with --parallel-windows"),
])
def test_bad_tiered_options_are_one_line_and_status_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 12, 0.004)))
    proc = _backline("qec", "stream", "c.stim", "--shots", "10", *args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# the documented command's words; run without a shell
DOC_COMMAND = "backline qec stream memory.stim --decoder bp --escalate-to bposd --escalate-when not-converged --window 10 --commit 5 --shots 1000 --json report.json"  # noqa: E501


def test_the_documented_command(tmp_path: Path) -> None:
    (tmp_path / "memory.stim").write_text(str(_surface(3, 15, 0.002)))
    backline = str(Path(sys.executable).parent / "backline")
    proc = subprocess.run([backline, *DOC_COMMAND.split()[1:]], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["shots"] == 1000 and 0 < report["escalated"] < 1
