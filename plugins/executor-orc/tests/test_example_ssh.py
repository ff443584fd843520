"""examples/ghz_executor_ssh.py against the test sshd: Listing 3 with the decoder in an SSH executor."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ghz_executor_ssh.py"


def test_ghz_over_an_ssh_executor_gives_the_in_process_samples(sshd, capsys):
    pytest.importorskip("pennylane", reason="the example uses the PennyLane frontend (backline-compiler[frontend])")
    spec = importlib.util.spec_from_file_location("ghz_executor_ssh", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    argv = ["--host", sshd.host, "--user", sshd.user, "--port", str(sshd.port), "--identity-file",
            sshd.identity_file, "--remote-python", sys.executable, *(f"--ssh-arg={a}" for a in sshd.ssh_options)]
    status = example.main(argv)
    out = capsys.readouterr().out
    print(out)
    assert status == 0 and "samples identical" in out
