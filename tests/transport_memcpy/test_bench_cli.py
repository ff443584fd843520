"""The ``backline`` command line: bench runs end to end (report, JSON, plot), bad input,
``plugins`` and ``coprocessor serve``. Every command runs as a subprocess with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TIMEOUT_S = 300
SHORT_TIMEOUT_S = 60

BENCH_RUNS = {
    "thread-echo": ["--locality", "thread", "--coprocessor-fn", "echo"],
    "process-steane": ["--locality", "process", "--coprocessor-fn", "steane", "--payload-bytes", "1"],
    "python-driver": ["--locality", "thread", "--driver", "python"],
    "random-delayed": ["--locality", "thread", "--cadence", "random-delayed", "--gap-ns", "500",
                       "--gap-span", "0x3ff"],
}


def backline(*args: str, timeout: float = SHORT_TIMEOUT_S, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core.cli", *args], capture_output=True, text=True,
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
    assert data["config"]["locality"] == extra[1]
    assert out_png.exists() and out_png.stat().st_size > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_unknown_cadence_is_an_argparse_error():
    result = backline("bench", "--cadence", "weird")
    assert result.returncode == 2
    assert "--cadence" in result.stderr and "weird" in result.stderr and "b2b" in result.stderr


@pytest.mark.parametrize("args,fragments", [
    (["--rounds", "1"], ["--rounds 1", "at least 2"]),
    (["--coprocessor-fn", "steane"], ["steane", "--payload-bytes 1"]),
    (["--rounds", "100", "--seed", "0"], ["--seed 0"]),
    (["--rounds", "100", "--payload-bytes", "0"], ["--payload-bytes 0"]),
], ids=["rounds-1", "steane-payload-8", "seed-0", "payload-0"])
def test_bench_bad_values(args, fragments, no_new_shm):
    result = backline("bench", "--no-progress", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("backline: error:"), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_bench_unknown_transport(no_new_shm):
    result = backline("bench", "--no-progress", "--rounds", "100", "--transport", "nosuch")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("backline: error:"), result.stderr
    assert "nosuch" in result.stderr and "memcpy" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_unknown_locality(no_new_shm):
    result = backline("bench", "--no-progress", "--rounds", "100", "--locality", "nowhere")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("backline: error:"), result.stderr
    assert "locality" in result.stderr and "nowhere" in result.stderr
    assert "Traceback" not in result.stderr


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
    assert result.returncode != 0
    assert "backline: error:" in result.stderr and "nosuch" in result.stderr, result.stderr
    assert "echo" in result.stderr and "steane" in result.stderr  # it lists what is installed
    assert "Traceback" not in result.stderr
    assert "ready" not in result.stdout


def test_serve_bad_import_path(key):
    result = backline("coprocessor", "serve", "--fn", "no_such_module_xyz:fn", "--key", key)
    assert result.returncode == 2
    assert "backline: error:" in result.stderr and "no_such_module_xyz" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_bad_config(key):
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--config", "slots=3")
    assert result.returncode == 2
    assert "backline: error:" in result.stderr and "slots=3" in result.stderr


def test_serve_for_a_duration_then_exits_cleanly(key):
    result = backline("coprocessor", "serve", "--fn", "echo", "--key", key, "--duration", "0.2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ready key={key}")


def test_unknown_driver_lists_the_installed_ones():
    proc = subprocess.run([sys.executable, "-m", "backline_core.cli", "bench", "--driver", "warp", "--rounds", "100",
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown driver 'warp'" in proc.stderr
