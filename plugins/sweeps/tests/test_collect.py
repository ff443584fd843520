"""`backline collect`: sinter's rows and strong ids, the embedded cluster, a real scheduler and workers,
resume, a merge with real `sinter collect` output, bad input, Ctrl-C, a worker killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sinter
import stim

from backline_core.sdk import free_port
from backline_core.testing import one_line
from backline_sweeps.batches import BatchSizer
from backline_sweeps.tasks import read_tasks
from backline_sweeps.testing import (SINTER, Child, alive, collect_argv, dask_cluster, descendants, run_collect,
                                     write_circuits)

DECODER = "backline:pymatching"


def totals(path: Path) -> dict[str, sinter.TaskStats]:
    out: dict[str, sinter.TaskStats] = {}
    for s in sinter.read_stats_from_csv_files(path):
        out[s.strong_id] = out[s.strong_id] + s if s.strong_id in out else s
    return out


def test_strong_ids_are_sinters(circuits: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(circuits)
    for meta in (False, True):
        specs = read_tasks(["d=*.stim"], [DECODER, "pymatching"], metadata_from_filename=meta)
        assert len(specs) == 4
        for spec in specs:
            circuit = stim.Circuit.from_file(spec.path)
            # what sinter's own collection computes: its DEM rule, the metadata sinter collect gives
            dem = circuit.detector_error_model(decompose_errors=True, approximate_disjoint_errors=True)
            md = sinter.comma_separated_key_values(spec.path) if meta else {"path": spec.path}
            assert spec.json_metadata == md
            assert spec.strong_id == sinter.Task(circuit=circuit, decoder=spec.decoder, detector_error_model=dem,
                                                 json_metadata=md).strong_id()


def test_batch_sizer_ramps_as_sinter() -> None:
    s = BatchSizer(target_seconds=1.0, max_shots=1 << 16)
    s.update(1, 0.0001)
    assert s.shots == 16  # four doublings at most per batch
    s.update(16, 0.5)
    assert s.shots == 16  # over 30 % of the target: no more doubling
    s.update(16, 2.0)
    assert s.shots == 8  # over 130 %: halved
    for _ in range(20):
        s.update(s.shots, 1e-6)
    assert s.shots == 1 << 16


def test_embedded_local_cluster_resume_and_plot(circuits: Path) -> None:
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--metadata-from-filename", "--max-shots", "3000",
                    "--save-resume-filepath", "stats.csv", "--workers", "2", "--plot", "plot.png", cwd=circuits)
    assert r.returncode == 0, r.stderr
    assert "local cluster of 2 worker processes" in r.stderr and "tasks 2/2 done" in r.stderr
    assert "Traceback" not in r.stderr
    got = totals(circuits / "stats.csv")
    want = {s.strong_id for s in read_tasks([str(circuits / "d=*.stim")], [DECODER], metadata_from_filename=True)}
    assert set(got) == want and all(s.shots == 3000 for s in got.values())
    assert (circuits / "plot.png").stat().st_size > 1000
    # resume: the rows there count toward --max-shots; a third run has nothing left to do
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--metadata-from-filename", "--max-shots", "5000",
                    "--save-resume-filepath", "stats.csv", "--workers", "1", "--no-progress", cwd=circuits)
    assert r.returncode == 0, r.stderr
    assert all(s.shots == 5000 for s in totals(circuits / "stats.csv").values())
    rows = len(sinter.read_stats_from_csv_files(circuits / "stats.csv"))
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--metadata-from-filename", "--max-shots", "5000",
                    "--save-resume-filepath", "stats.csv", "--workers", "1", "--no-progress", cwd=circuits)
    assert r.returncode == 0, r.stderr
    assert len(sinter.read_stats_from_csv_files(circuits / "stats.csv")) == rows
    # sinter plots it too
    p = subprocess.run([SINTER, "plot", "--in", "stats.csv", "--x_func", "metadata['p']", "--out", "s.png"],
                       cwd=circuits, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_rows_merge_with_sinter_collect(circuits: Path) -> None:
    s = subprocess.run([SINTER, "collect", "--circuits", "d=3,p=0.01.stim", "d=3,p=0.02.stim", "--decoders", DECODER,
                        "--custom_decoders_module_function", "backline_core.sinter:sinter_decoders", "--max_shots",
                        "2000", "--processes", "1", "--save_resume_filepath", "sinter.csv"],
                       cwd=circuits, capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    # sinter's default metadata ({'path': ...}), the paths as typed, here as the glob gives them
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--max-shots", "3000", "--save-resume-filepath",
                    "ours.csv", "--workers", "1", "--no-progress", cwd=circuits)
    assert r.returncode == 0, r.stderr
    ours, theirs = totals(circuits / "ours.csv"), totals(circuits / "sinter.csv")
    assert set(ours) == set(theirs) and len(ours) == 2
    c = subprocess.run([SINTER, "combine", "sinter.csv", "ours.csv"], cwd=circuits, capture_output=True, text=True,
                       timeout=300)
    assert c.returncode == 0, c.stderr
    (circuits / "merged.csv").write_text(c.stdout)
    merged = sinter.read_stats_from_csv_files(circuits / "merged.csv")
    assert len(merged) == 2  # rows with one strong id merged into one
    for m in merged:
        assert m.shots == 5000 and m.errors == ours[m.strong_id].errors + theirs[m.strong_id].errors
        assert m.json_metadata == theirs[m.strong_id].json_metadata


def test_a_real_scheduler_and_two_workers(circuits: Path) -> None:
    with dask_cluster(2) as cluster:
        r = run_collect("--circuits", "d=*.stim", "--decoders", f"{DECODER},backline:lut", "--metadata-from-filename",
                        "--max-shots", "4000", "--max-errors", "40", "--save-resume-filepath", "stats.csv",
                        "--scheduler", cluster.address, cwd=circuits)
        assert r.returncode == 0, r.stderr
        assert f"scheduler {cluster.address}, workers tcp://127.0.0.1:" in r.stderr
    got = totals(circuits / "stats.csv")
    assert len(got) == 4
    for s in got.values():
        assert s.shots <= 4000
        assert s.shots == 4000 or s.errors >= 40  # sinter's stopping rules


def test_a_worker_killed_mid_run_counts_each_batch_once(tmp_path: Path) -> None:
    write_circuits(tmp_path, ps=(0.005,), d=5, kind="surface")
    max_shots = 4_000_000  # about 200k shots/s a worker here: the run outlives the kill by seconds
    with dask_cluster(2) as cluster:
        run = Child(collect_argv("--circuits", "d=*.stim", "--decoders", DECODER, "--max-shots", str(max_shots),
                                 "--save-resume-filepath", "stats.csv", "--scheduler", cluster.address, "--seed", "3"),
                    cwd=tmp_path)
        try:
            deadline = time.monotonic() + 240
            # both workers busy: the first rows are written once batches of a second or so come back
            while len(sinter.read_stats_from_csv_files(tmp_path / "stats.csv")
                      if (tmp_path / "stats.csv").exists() else []) < 1:
                assert time.monotonic() < deadline and run.proc.poll() is None, "".join(run.seen)
                time.sleep(0.2)
            cluster.workers[0].kill(signal.SIGKILL)
            assert run.proc.wait(300) == 0, "".join(run.seen)
        finally:
            run.stop()
        run.wait_for("worker threads 2 -> 1; the batches of those that left run again elsewhere", 10)
        run.wait_for("tasks 1/1 done", 10)
    (stat,) = totals(tmp_path / "stats.csv").values()
    # every batch counted once: exactly the shots asked for, neither a lost batch nor one counted twice
    assert stat.shots == max_shots


def test_ctrl_c_saves_rows_and_leaves_nothing_running(circuits: Path) -> None:
    run = Child(collect_argv("--circuits", "d=*.stim", "--decoders", DECODER, "--max-shots", "1e12",
                             "--save-resume-filepath", "stats.csv", "--workers", "2"), cwd=circuits)
    try:
        deadline = time.monotonic() + 240
        while not (circuits / "stats.csv").exists() or len(sinter.read_stats_from_csv_files(circuits / "stats.csv")) < 1:
            assert time.monotonic() < deadline and run.proc.poll() is None, "".join(run.seen)
            time.sleep(0.2)
        below = descendants(run.proc.pid)
        assert len(below) >= 2  # the local cluster's worker processes
        time.sleep(1.0)  # rows in memory that are not yet written: Ctrl-C must save them
        os.kill(run.proc.pid, signal.SIGINT)
        assert run.proc.wait(120) == 130, "".join(run.seen)
        run.wait_for("interrupted; the rows so far are in stats.csv", 10)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in below) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in below if alive(p)], "processes left running"
    finally:
        run.stop()
    got = totals(circuits / "stats.csv")
    assert got and all(s.shots > 0 for s in got.values())
    assert "Traceback" not in "".join(run.seen)


def test_bad_input_is_one_line_and_status_2(circuits: Path) -> None:
    (circuits / "bad.stim").write_text("H 0\nNOT_A_GATE 1\n")
    r = run_collect("--circuits", "bad.stim", "--decoders", DECODER, "--max-shots", "10", cwd=circuits)
    assert r.returncode == 2 and "bad.stim" in one_line(r.stderr)
    r = run_collect("--circuits", "d=*.stim", "--decoders", "backline:nope", "--max-shots", "10", cwd=circuits)
    assert r.returncode == 2 and "unknown decoder 'backline:nope'" in one_line(r.stderr)
    r = run_collect("--circuits", "none-*.stim", "--decoders", DECODER, "--max-shots", "10", cwd=circuits)
    assert r.returncode == 2 and "matches no file" in one_line(r.stderr)
    (circuits / "junk.csv").write_text("not,a,sinter,csv\n1,2\n")
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--max-shots", "10", "--save-resume-filepath",
                    "junk.csv", cwd=circuits)
    assert r.returncode == 2 and "junk.csv" in one_line(r.stderr)
    port = free_port("127.0.0.1")  # nothing listens there
    t0 = time.monotonic()
    r = run_collect("--circuits", "d=*.stim", "--decoders", DECODER, "--max-shots", "10", "--scheduler",
                    f"tcp://127.0.0.1:{port}", "--connect-timeout", "3", cwd=circuits, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"--scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered within 3 s" in one_line(r.stderr)
    assert time.monotonic() - t0 < 120


def test_the_documented_command(tmp_path: Path) -> None:
    """docs/sweeps.md's first example, as written, in a folder of circuits named as it expects."""
    (tmp_path / "circuits").mkdir()
    write_circuits(tmp_path / "circuits", ps=(0.02, 0.05))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", "-c", "backline collect --circuits circuits/*.stim --decoders backline:pymatching,backline:lut --metadata-from-filename --max-shots 100000 --max-errors 200 --save-resume-filepath stats.csv --workers 2 --plot threshold.png"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = totals(tmp_path / "stats.csv")
    assert len(got) == 4 and all(s.errors >= 200 or s.shots >= 100000 for s in got.values())
    assert (tmp_path / "threshold.png").stat().st_size > 1000
