"""A decoder pool with deadlines: K patches streamed together, their sliding windows decoded on N
workers earliest deadline first, with and without admission control (docs/streaming.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stim

from backline_core import InvalidArgumentError
from backline_qec import SlidingWindowDecoder
from backline_qec.pool import PoolStreamResult, predict_completion
from backline_qec.stream import stream

P = 0.003
WINDOW, COMMIT = 6, 3


def _surface(d: int, rounds: int) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                  after_clifford_depolarization=P, before_measure_flip_probability=P,
                                  after_reset_flip_probability=P, before_round_data_depolarization=P)


@pytest.fixture(scope="module")
def shots() -> tuple[stim.Circuit, np.ndarray, np.ndarray, np.ndarray]:
    """3 patches x 4 shots of d = 3, 8 rounds; the sequential sliding windows' predictions of the same shots."""
    circuit = _surface(3, 8)
    dets, obs = circuit.compile_detector_sampler(seed=9).sample(12, separate_observables=True)
    expected = SlidingWindowDecoder(circuit, "pymatching", window=WINDOW, commit=COMMIT).decode_batch(dets)
    return circuit, dets, obs, expected.reshape(3, 4, -1)


def _run(shots: Any, workers: int, cycle_us: float, admission: bool = True) -> PoolStreamResult:
    circuit, dets, obs, _ = shots
    return stream(circuit, "pymatching", detectors=dets, observables=obs, window=WINDOW, commit=COMMIT, patches=3,
                  workers=workers, cycle_us=cycle_us, admission=admission, runs_in="process", reference=False,
                  round_timeout_ms=5000)


def _every_window_once(result: PoolStreamResult) -> None:
    # every window of every patch answered by exactly one worker (the dispatcher refuses a second answer)
    assert result.window_worker.shape == (3, 4, result.windows_per_shot)
    assert (result.window_worker >= 0).all()
    report = result.to_json()
    assert sum(report["windows_per_worker"].values()) == report["windows"] == result.window_worker.size
    assert report["worker_failures"] == []


@pytest.mark.parametrize("workers, cycle_us", [(1, 0.0), (2, 0.0), (2, 2.0)])
def test_every_patch_predicts_what_sequential_sliding_windows_predict(shots: Any, workers: int,
                                                                       cycle_us: float) -> None:
    # admission off: at 2 us a round some windows are late, and admission control would shed them
    result = _run(shots, workers, cycle_us, admission=False)
    assert (result.predictions == shots[3]).all()
    _every_window_once(result)
    report = result.to_json()
    assert report["patches"] == 3 and report["shots"] == 4 and report["workers"] == workers
    obs = shots[2].reshape(3, 4, -1)
    wrong = (shots[3] != obs).any(axis=2).sum(axis=1)
    assert [p["logical_errors"] for p in report["per_patch"]] == wrong.tolist()
    if cycle_us == 0:  # every round at once: no deadlines, and the dispatch gives the sustainable cycle
        assert report["deadline_misses"] == 0 and report["sustainable_cycle_ns"] > 0


def test_a_cycle_far_above_the_sustainable_one_misses_nothing(shots: Any) -> None:
    # 20 ms a round: a window has 60 ms (3 commit rounds) for a decode of well under a millisecond
    result = _run(shots, 2, 20000.0)
    assert (result.predictions == shots[3]).all()
    _every_window_once(result)
    report = result.to_json()
    assert report["deadline_misses"] == 0 and report["rejected_at_admission"] == 0
    assert report["max_queue"] <= 3  # each patch's windows go in order: at most one a patch waits


def test_a_cycle_far_below_it_counts_every_miss(shots: Any) -> None:
    # 1 ns a round: every window's deadline (3 ns after it is ready) is gone before any worker can answer.
    # Admission control sees that with the warm-up's round trips and sheds every window: counted at once,
    # sent to no worker, no correction committed. Without it every window is decoded, and each is late.
    on = _run(shots, 2, 0.001, admission=True)
    off = _run(shots, 2, 0.001, admission=False)
    assert (off.predictions == shots[3]).all()
    _every_window_once(off)
    assert (on.predictions == 0).all() and (on.window_worker == -1).all()
    a, b = on.to_json(), off.to_json()
    total = a["windows"]
    assert a["rejected_at_admission"] == a["deadline_misses"] == total and a["late_completions"] == 0
    assert sum(a["windows_per_worker"].values()) == 0 and a["max_queue"] == 0
    assert b["rejected_at_admission"] == 0 and b["late_completions"] == b["deadline_misses"] == total
    assert b["max_queue"] <= 3
    assert sum(p["deadline_misses"] for p in a["per_patch"]) == total
    # the shed windows' cost shows in the logical error rate: no shot of patch 0 was corrected
    assert a["per_patch"][0]["logical_errors"] == int(shots[2].reshape(3, 4, -1)[0].any(axis=1).sum())


def test_admission_predicts_completion_from_the_busy_workers_and_the_windows_ahead() -> None:
    # a pure function of the state at admission: no clock is read, so nothing depends on this machine's speed
    assert predict_completion(1000, 100.0, [None, None], 0) == 1100  # an idle worker: started now
    assert predict_completion(1000, 100.0, [None, None], 1) == 1100  # the one ahead takes the other worker
    assert predict_completion(1000, 100.0, [None, None], 3) == 1200  # 3 ahead on 2 workers: it starts 1 round later
    # a worker in its round since 950 frees up at 1050; one running past the estimate is taken to free up now
    assert predict_completion(1000, 100.0, [950, 400], 0) == 1100
    assert predict_completion(1000, 100.0, [950, 400], 1) == 1150
    assert predict_completion(1000, 100.0, [950], 2) == 1350  # one live worker (the other retired): in series


def test_bad_pool_arguments_are_one_clear_error(shots: Any) -> None:
    circuit, dets, obs, _ = shots
    with pytest.raises(InvalidArgumentError, match="not a positive multiple of patches=5"):
        stream(circuit, "pymatching", detectors=dets, observables=obs, window=WINDOW, commit=COMMIT, patches=5)
    with pytest.raises(InvalidArgumentError, match="goes with patches"):
        stream(circuit, "pymatching", shots=4, window=WINDOW, commit=COMMIT, admission=False)
    with pytest.raises(InvalidArgumentError, match="not supported with --parallel-windows"):
        stream(circuit, "pymatching", shots=4, window=7, commit=3, patches=2, parallel_windows=True)


def _backline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_the_command_runs_the_pool_and_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 8)))
    proc = _backline("qec", "stream", "c.stim", "--decoder", "pymatching", "--shots", "5", "--seed", "2", "--window",
                     str(WINDOW), "--commit", str(COMMIT), "--patches", "2", "--workers", "2", "--cycle-us", "0.001",
                     "--admission", "off", "--json", "r.json", "--predictions", "p.b8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["patches"] == 2 and report["workers"] == 2 and report["admission"] is False
    assert report["shots"] == 5 and len(report["per_patch"]) == 2
    assert report["deadline_misses"] == report["windows"] == 2 * 5 * report["windows_per_shot"]
    assert "deadline misses" in proc.stdout and (tmp_path / "p.b8").stat().st_size == 10


@pytest.mark.parametrize("args, says", [
    (["--admission", "on"], "--admission goes with --patches"),
    (["--patches", "0"], "at least 1 patch"),
    (["--patches", "2", "--workers", "0"], "at least 1 worker"),
    (["--patches", "2", "--parallel-windows"], "not supported with --parallel-windows"),
    (["--patches", "2", "--escalate-to", "bposd", "--escalate-when", "syndrome-weight>1"], "--escalate-to"),
    (["--patches", "2", "--plot", "x.png"], "--plot is not supported with --patches"),
    (["--patches", "2", "--admission", "maybe"], "invalid choice"),
    (["--workers", "2"], "go with --parallel-windows or --patches"),
])
def test_bad_pool_options_are_one_line_and_status_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "c.stim").write_text(str(_surface(3, 8)))
    proc = _backline("qec", "stream", "c.stim", "--decoder", "pymatching", "--shots", "4", "--window", str(WINDOW),
                     "--commit", str(COMMIT), *args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


DOC_COMMAND = "backline qec stream memory.stim --decoder pymatching --shots 20 --seed 1 --window 6 --commit 3 --patches 4 --workers 2 --cycle-us 1000 --json report.json"  # noqa: E501


def test_the_documented_command(tmp_path: Path) -> None:
    (tmp_path / "memory.stim").write_text(str(_surface(3, 12)))
    proc = subprocess.run(["bash", "-c", DOC_COMMAND], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["patches"] == 4 and report["shots"] == 20 and report["workers"] == 2
    assert report["windows"] == 4 * 20 * report["windows_per_shot"] and report["worker_failures"] == []
