"""The ``backline`` command line: bench runs end to end (report, JSON, plot), bad input
(always one line on stderr and status 2), ``plugins`` and ``coprocessor serve``. Every
command runs as a subprocess with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TIMEOUT_S = 300
SHORT_TIMEOUT_S = 60

BENCH_RUNS = {
    "thread-echo": ["--runs-in", "thread", "--coprocessor-fn", "echo"],
    "process-steane": ["--runs-in", "process", "--coprocessor-fn", "steane", "--payload-bytes", "1"],
    "python-driver": ["--runs-in", "thread", "--driver", "python"],
    "random-delayed": ["--runs-in", "thread", "--cadence", "random-delayed", "--gap-ns", "500",
                       "--gap-span", "0x3ff"],
}
STEANE_NPZ = os.path.join(os.path.dirname(__file__), os.pardir, "core", "data", "steane.npz")


def backline(*args: str, timeout: float = SHORT_TIMEOUT_S, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def cpu_args() -> list[str]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        return ["--controller-cpu", str(cpus[0]), "--coprocessor-cpu", str(cpus[1])]
    return ["--controller-cpu", "none", "--coprocessor-cpu", "none"]


def dig(data: dict, dotted: str):
    for part in dotted.split("."):
        assert isinstance(data, dict) and part in data, f"JSON lacks {dotted!r}"
        data = data[part]
    return data


@pytest.mark.parametrize("extra", list(BENCH_RUNS.values()), ids=list(BENCH_RUNS))
def test_bench_runs_and_reports(extra, tmp_path, no_new_shm):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = backline("bench", "--rounds", "20000", "--block", "5000", "--no-progress", "--json", str(out_json),
                      "--plot", str(out_png), *cpu_args(), *extra, timeout=TIMEOUT_S, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    for needle in ("round 0", "median", "framework/floor"):
        assert needle in text, f"{needle!r} missing from:\n{text}"
    assert "lost: 0" in text and "mismatched replies: 0" in text
    if "--driver" in extra:
        assert "python driver adds" in text and "python driver" in text and "native driver" in text
    data = json.loads(out_json.read_text())
    for dotted in ("steady.median_ns", "steady.p99_ns", "steady.p999_ns", "floor.median_ns", "floor.p99_ns"):
        value = dig(data, dotted)
        assert isinstance(value, (int, float)) and value > 0, (dotted, value)
    assert isinstance(data["round0_ns"], int) and data["round0_ns"] > 0
    assert data["lost"] == 0
    assert data["mismatched"] == 0
    assert data["rounds"] == 20000
    assert data["steady"]["rounds"] == 19999 and data["floor"]["rounds"] == 19999
    if "--driver" in extra:
        assert data["native"]["rounds"] == 19999 and "driver_adds_median_ns" in data
    assert data["config"]["runs_in"] == extra[1]
    assert out_png.exists() and out_png.stat().st_size > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_progress_in_a_log_is_a_few_plain_lines(no_new_shm):
    # stderr is a pipe here: no bar, no carriage returns, a line per quarter of the run
    result = backline("bench", "--rounds", "4000", "--block", "500", "--runs-in", "thread", *cpu_args(),
                      timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\r" not in result.stderr
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 4 and lines[-1].startswith("4,000/4,000 rounds"), result.stderr


def test_bench_progress_on_a_terminal_is_a_bar(no_new_shm):
    import pty
    import select

    main_fd, child_fd = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "backline_core", "bench", "--rounds", "4000", "--block", "500",
                                 "--runs-in", "thread", *cpu_args()], stdout=subprocess.PIPE, stderr=child_fd,
                                text=True)
        os.close(child_fd)
        child_fd = -1
        seen = b""
        while True:  # read the terminal until the bench closes it (its exit), within the deadline
            ready, _, _ = select.select([main_fd], [], [], TIMEOUT_S)
            if not ready:
                proc.kill()
                pytest.fail(f"no output on the terminal within {TIMEOUT_S} s")
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # EIO: every writer has closed it
                break
            if not chunk:
                break
            seen += chunk
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        os.close(main_fd)
        if child_fd >= 0:
            os.close(child_fd)
    assert proc.returncode == 0, out
    text = seen.decode()
    assert text.count("\r[") >= 2 and "100.0%" in text and "4,000/4,000 rounds" in text, text


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Status 2 and one line on stderr, ``backline: error: ...``, holding every fragment."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, f"want one line on stderr, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("backline: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} missing from {lines[0]!r}"
    return lines[0]


def test_bench_unknown_cadence_is_an_argparse_error():
    result = backline("bench", "--cadence", "weird")
    assert_one_line_error(result, "--cadence", "weird", "b2b")


@pytest.mark.parametrize("args,fragments", [
    (["--rounds", "1"], ["--rounds 1", "at least 2"]),
    (["--coprocessor-fn", "steane"], ["steane", "--payload-bytes 1"]),
    (["--rounds", "100", "--seed", "0"], ["--seed 0"]),
    (["--rounds", "100", "--payload-bytes", "0"], ["--payload-bytes 0"]),
], ids=["rounds-1", "steane-payload-8", "seed-0", "payload-0"])
def test_bench_bad_values(args, fragments, no_new_shm):
    result = backline("bench", "--no-progress", *args)
    assert_one_line_error(result, *fragments)


def test_bench_unknown_transport(no_new_shm):
    # the list of installed transports was several lines
    result = backline("bench", "--no-progress", "--rounds", "100", "--transport", "nosuch")
    assert_one_line_error(result, "nosuch", "memcpy")


def test_bench_unknown_runs_in(no_new_shm):
    result = backline("bench", "--no-progress", "--rounds", "100", "--runs-in", "nowhere")
    assert_one_line_error(result, "--runs-in", "nowhere", "process")


def test_bench_payload_past_the_default_slot_runs(no_new_shm):
    # 1000 bytes do not fit the default 256-byte slot: the bench sizes its slots to the payload
    # (it was a BL_ETOOBIG "raise slot_bytes on the coprocessor" the bench has no option for)
    result = backline("bench", "--rounds", "2000", "--block", "1000", "--no-progress", "--payload-bytes", "1000",
                      "--runs-in", "process", *cpu_args(), timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "payload=1000 B" in result.stdout and "lost: 0  mismatched replies: 0" in result.stdout


def test_bench_payload_past_what_the_floor_carries_is_one_line(no_new_shm):
    # the floor (bl_bench_floor) refuses more than it carries: a ZeroDivisionError at the report
    result = backline("bench", "--rounds", "20", "--block", "10", "--no-progress", "--payload-bytes", "16777184",
                      *cpu_args(), timeout=TIMEOUT_S)
    assert_one_line_error(result, "--payload-bytes 16777184", "floor")


def test_bench_with_a_code_file(no_new_shm):
    pytest.importorskip("backline_decoder_bpod")
    result = backline("bench", "--rounds", "2000", "--block", "1000", "--no-progress", "--coprocessor-fn", "bposd",
                      "--code", STEANE_NPZ, "--decoder-id", "1", *cpu_args(), timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "code=steane.npz" in result.stdout and "lost: 0  mismatched replies: 0" in result.stdout


@pytest.mark.defect("a --code matrix with NaN became an all-zero code and the bench passed")
def test_bench_code_with_a_nan_is_refused_not_run(tmp_path, no_new_shm):
    # NaN cast to uint8 was 0: an all-zero code that the bench ran, and passed
    import numpy as np

    with np.load(STEANE_NPZ) as data:
        hx = data["Hx"].astype(float)
        hz = data["Hz"]
    hx[2, 3] = np.nan
    path = tmp_path / "nan.npz"
    np.savez(path, Hx=hx, Hz=hz)
    result = backline("bench", "--rounds", "2000", "--no-progress", "--coprocessor-fn", "bposd", "--code",
                      str(path), *cpu_args())
    assert_one_line_error(result, "Hx[2, 3]", "nan")


def test_plugins_lists_memcpy_and_builtin_decoders():
    result = backline("plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("memcpy", "echo", "steane"):
        assert any(line.split() and line.split()[0] == name for line in lines), result.stdout
    assert "transports:" in result.stdout and "decoders:" in result.stdout
    data = json.loads(backline("plugins", "--json").stdout)
    names = {(row["kind"], row["name"]) for row in data}
    assert {("transport", "memcpy"), ("decoder", "echo"), ("decoder", "steane")} <= names


def test_serve_unknown_function(key):
    result = backline("coprocessor", "serve", "--fn", "nosuch", "--key", key)
    line = assert_one_line_error(result, "nosuch")
    assert "echo" in line and "steane" in line  # it lists what is installed, on its one line
    assert "ready" not in result.stdout


def test_serve_unknown_transport(key):
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--transport", "nosuch")
    assert_one_line_error(result, "unknown transport 'nosuch'", "memcpy")
    assert "ready" not in result.stdout


@pytest.mark.parametrize("spec", ["echo@-1", "echo@x", "echo@300"])
def test_serve_bad_decoder_ids(key, spec):
    # echo@-1 was an OverflowError traceback from cffi, after the session was open
    result = backline("coprocessor", "serve", "--fn", spec, "--key", key)
    assert_one_line_error(result, spec)
    assert "ready" not in result.stdout


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_serve_bad_duration(key, value):
    # these reached select() after "ready" (OverflowError / ValueError tracebacks)
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--duration", value)
    assert_one_line_error(result, "--duration", value)
    assert "ready" not in result.stdout


def test_serve_bad_import_path(key):
    result = backline("coprocessor", "serve", "--fn", "no_such_module_xyz:fn", "--key", key)
    assert_one_line_error(result, "no_such_module_xyz")


def test_serve_bad_config(key):
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--config", "slots=3")
    assert_one_line_error(result, "slots=3")


def test_serve_for_a_duration_then_exits_cleanly(key):
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--duration", "0.2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ready key={key}")


def test_unknown_driver_lists_the_installed_ones():
    proc = subprocess.run([sys.executable, "-m", "backline_core", "bench", "--driver", "warp", "--rounds", "100",
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert_one_line_error(proc, "unknown driver 'warp'")
