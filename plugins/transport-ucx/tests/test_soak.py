"""Soaks of the ucx transport: 1,000,000 rounds each with echo and with steane over UCX shared
memory, and 100,000 over TCP, through `backline bench` (which checks every reply and runs the
bare UCX floor beside it). The assertions are on correctness only -- nothing lost, nothing
mismatched -- never on time: the ratios it prints are for the reader (run with -s)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CASES = [
    ("shm", "echo", 8, 1_000_000),
    ("shm", "steane", 1, 1_000_000),
    ("tcp", "steane", 1, 100_000),
]


@pytest.mark.parametrize("tls,fn,payload,rounds", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_soak_loses_and_mismatches_nothing(tls: str, fn: str, payload: int, rounds: int, tmp_path) -> None:
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "-m", "backline_core", "bench", "--transport", "ucx", "--transport-arg", f"tls={tls}",
           "--coprocessor-fn", fn, "--payload-bytes", str(payload), "--rounds", str(rounds), "--no-progress",
           "--json", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    data = json.loads(out.read_text())
    assert data["rounds"] == rounds
    assert (data["lost"], data["mismatched"]) == (0, 0), data
