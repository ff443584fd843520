"""Parallel windows: the decomposition, its logical error rate against sliding windows, the stream
over one and two workers, and workers that die or stall mid-stream (docs/streaming.md)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stim

from backline_core import InvalidArgumentError, plugins
from backline_qec import ParallelWindowDecoder, SlidingWindowDecoder, plan_parallel_windows
from backline_qec.rounds import detector_rounds
from backline_qec.stream import stream, worker_name
from backline_qec.windows import _mechanisms, window_dependencies

NOISE = dict(after_clifford_depolarization=0.003, before_measure_flip_probability=0.003,
             after_reset_flip_probability=0.003, before_round_data_depolarization=0.003)


def _surface(d: int, rounds: int, p: float = 0.003) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                  **{k: p for k in NOISE})


def _colour(d: int, rounds: int) -> stim.Circuit:
    # its mechanisms span three rounds of detectors: the layer-B windows reach two rounds into the next core
    return stim.Circuit.generated("color_code:memory_xyz", distance=d, rounds=rounds, **NOISE)


@pytest.mark.parametrize("circuit, window, commit", [(_surface(3, 20), 7, 3), (_surface(3, 9), 5, 1),
                                                     (_colour(3, 14), 8, 2), (_surface(3, 4), 9, 3)])
def test_each_mechanism_is_committed_once_and_each_window_sees_what_it_needs(circuit: stim.Circuit, window: int,
                                                                           commit: int) -> None:
    record = plugins.get("decoder", "bposd")
    pw = ParallelWindowDecoder(circuit, "bposd", window=window, commit=commit)
    assert not record.decomposed_dem
    rounds, mechanisms = detector_rounds(circuit), _mechanisms(pw.dem)
    # every round lies in exactly one commit region
    cover = np.zeros(pw.num_rounds, int)
    for w in pw.windows:
        cover[w.commit_from:w.commit_end] += 1
    assert (cover == 1).all()
    # every error mechanism's flips are committed by exactly one window
    committed_by = np.full(len(mechanisms), -1)
    for k, model in enumerate(pw.models):
        assert (committed_by[model.committed] == -1).all()
        committed_by[model.committed] = k
    live = np.array([p > 0 for p, _ in mechanisms])
    assert (committed_by[live] >= 0).all() and (committed_by[~live] == -1).all()
    # each window's detection events are explained by the mechanisms it decodes, once the commits
    # it waits for are applied: so a decoder that finds the true errors predicts the true flips
    touching: dict[int, list[int]] = {}
    for m, (_, parts) in enumerate(mechanisms):
        for ds, _ in parts:
            for d in ds:
                touching.setdefault(d, []).append(m)
    for k, model in enumerate(pw.models):
        decoded = set(model.decoded.tolist())
        for d in model.detectors.tolist():
            for m in touching.get(d, []):
                if not live[m] or m in decoded:
                    continue
                owner = committed_by[m]
                assert owner in pw.after[k], (k, d, m, owner)
                assert d in pw.models[owner].handed_on, (k, d, m, owner)
        # what this window's commit flips in a later window's events is handed on
        for j in (j for j, a in enumerate(pw.after) if k in a):
            later = set(pw.models[j].detectors.tolist())
            for m in model.committed.tolist():
                flips = {d for ds, _ in mechanisms[m][1] for d in ds}
                assert flips & later <= set(pw.models[k].handed_on.tolist())
        assert (rounds[model.detectors] >= model.window.start).all()


def test_the_plan_alternates_layers_and_layer_b_waits_for_both_neighbours() -> None:
    windows = plan_parallel_windows(30, 9, 3)
    assert [(w.start, w.end, w.commit_from, w.commit_end, w.open_start) for w in windows] == [
        (0, 6, 0, 3, True), (3, 10, 3, 9, False), (6, 15, 9, 12, True), (12, 19, 12, 18, False),
        (15, 24, 18, 21, True), (21, 28, 21, 27, False), (24, 30, 27, 30, True)]
    assert window_dependencies(windows) == [(), (0, 2), (), (2, 4), (), (4, 6), ()]
    assert windows[2].hand_back == 1 and windows[-1].last


@pytest.mark.parametrize("window, commit, says", [(6, 3, "must be even"), (5, 5, "must be even"),
                                                  (None, 3, "need --window and --commit"), (7, 0, "at least 1")])
def test_a_bad_plan_is_one_clear_error(window: Any, commit: Any, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        plan_parallel_windows(20, window, commit)


def _two_proportion_z(a: int, b: int, n: int) -> float:
    pooled = (a + b) / (2 * n)
    return 0.0 if pooled in (0.0, 1.0) else (a - b) / n / math.sqrt(2 * pooled * (1 - pooled) / n)


def test_the_logical_error_rate_agrees_with_sequential_sliding_windows() -> None:
    d = 5
    circuit = _surface(d, 10 * d)
    dets, obs = circuit.compile_detector_sampler(seed=11).sample(3000, separate_observables=True)
    parallel = ParallelWindowDecoder(circuit, "pymatching", window=3 * d, commit=d).decode_batch(dets)
    sliding = SlidingWindowDecoder(circuit, "pymatching", window=2 * d, commit=d).decode_batch(dets)
    a, b = int((parallel != obs).any(axis=1).sum()), int((sliding != obs).any(axis=1).sum())
    assert a > 0 and b > 0
    assert abs(_two_proportion_z(a, b, len(dets))) < 4, (a, b)


@pytest.fixture(scope="module")
def small() -> tuple[stim.Circuit, np.ndarray, np.ndarray]:
    circuit = _surface(3, 17)
    dets, obs = circuit.compile_detector_sampler(seed=5).sample(150, separate_observables=True)
    return circuit, dets, obs


@pytest.mark.parametrize("decoder", ["pymatching", "bposd"])  # a Python and a native window decoder
def test_one_and_two_workers_predict_the_same_as_the_windows_in_process(
        small: tuple[stim.Circuit, np.ndarray, np.ndarray], decoder: str) -> None:
    circuit, dets, obs = small
    expected = ParallelWindowDecoder(circuit, decoder, window=7, commit=3).decode_batch(dets)
    reports = []
    for n in (1, 2):
        result = stream(circuit, decoder, detectors=dets, observables=obs, window=7, commit=3,
                        parallel_windows=True, workers=n, runs_in="process", reference=False)
        assert (result.predictions == expected).all()
        reports.append(result.to_json())
    one, two = reports
    assert one["workers"] == 1 and two["workers"] == 2 and one["ler"] == two["ler"]
    for report in reports:
        assert sum(report["windows_per_worker"].values()) == len(dets) * report["windows_per_shot"]
        assert report["worker_failures"] == [] and report["deadline_misses"] == 0 and report["windows_per_s"] > 0
        assert {w["layer"] for w in report["parallel_windows"]} == {"A", "B"}


def _faulty_run(small: tuple[stim.Circuit, np.ndarray, np.ndarray], sig: signal.Signals,
                timeout_ms: int) -> tuple[Any, list[int]]:
    circuit, dets, obs = small
    pids: list[int] = []

    def fault(done: int, deployment: Any) -> None:
        if done == 40:
            pid = deployment.processes[worker_name(1)].pid
            pids.append(pid)
            os.kill(pid, sig)

    try:
        result = stream(circuit, "pymatching", detectors=dets, observables=obs, window=7, commit=3,
                        parallel_windows=True, workers=2, runs_in="process", round_timeout_ms=timeout_ms,
                        on_progress=fault)
    finally:
        for pid in pids:  # the dispatcher ends a stalled worker; this only guards a failing run
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return result, pids


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is gone too
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_killed_worker_hands_its_window_on_and_nothing_is_lost_or_counted_twice(
        small: tuple[stim.Circuit, np.ndarray, np.ndarray], capfd: pytest.CaptureFixture[str]) -> None:
    circuit, dets, _ = small
    result, pids = _faulty_run(small, signal.SIGKILL, 2000)
    expected = ParallelWindowDecoder(circuit, "pymatching", window=7, commit=3).decode_batch(dets)
    assert (result.predictions == expected).all()
    report = result.to_json()
    assert [f["worker"] for f in report["worker_failures"]] == [worker_name(1)]
    assert (result.window_worker >= 0).all()  # every window committed, each by one worker
    assert sum(report["windows_per_worker"].values()) == len(dets) * report["windows_per_shot"]
    assert f"worker {worker_name(1)} failed" in capfd.readouterr().err
    assert pids and _gone(pids[0])


def test_a_stalled_worker_is_a_deadline_miss_and_the_stream_goes_on(
        small: tuple[stim.Circuit, np.ndarray, np.ndarray]) -> None:
    circuit, dets, _ = small
    result, pids = _faulty_run(small, signal.SIGSTOP, 1000)
    expected = ParallelWindowDecoder(circuit, "pymatching", window=7, commit=3).decode_batch(dets)
    assert (result.predictions == expected).all()
    report = result.to_json()
    assert report["deadline_misses"] == 1
    assert [(f["worker"], f["deadline_miss"]) for f in report["worker_failures"]] == [(worker_name(1), True)]
    assert "DeadlineError" in report["worker_failures"][0]["error"]
    assert pids and _gone(pids[0])


def _backline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_the_command_runs_parallel_windows_and_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 12)))
    proc = _backline("qec", "stream", "c.stim", "--decoder", "bposd", "--shots", "60", "--seed", "2", "--window",
                     "7", "--commit", "3", "--parallel-windows", "--workers", "2", "--json", "r.json",
                     "--predictions", "p.b8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["workers"] == 2 and report["placement"]["runs_in"] == "process"
    assert "windows/s" in proc.stdout and (tmp_path / "p.b8").stat().st_size == 60


@pytest.mark.parametrize("args, says", [
    (["--workers", "2"], "go with --parallel-windows"),
    (["--parallel-windows", "--workers", "0", "--window", "7", "--commit", "3"], "at least 1 worker"),
    (["--parallel-windows", "--window", "6", "--commit", "3"], "must be even"),
    (["--parallel-windows"], "needs --window W --commit C"),
    (["--parallel-windows", "--window", "7", "--commit", "3", "--cycle-us", "5"], "--cycle-us is not supported"),
])
def test_bad_parallel_options_are_one_line_and_status_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 12)))
    proc = _backline("qec", "stream", "c.stim", "--decoder", "bposd", "--shots", "10", *args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


DOC_COMMAND = "backline qec stream memory.stim --decoder bposd --shots 2000 --seed 1 --window 15 --commit 5 --parallel-windows --workers 2 --json report.json"  # noqa: E501


def test_the_documented_command(tmp_path: Path) -> None:
    (tmp_path / "memory.stim").write_text(str(_surface(3, 30, 0.002)))
    proc = subprocess.run(["bash", "-c", DOC_COMMAND], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["shots"] == 2000 and report["workers"] == 2 and report["worker_failures"] == []
