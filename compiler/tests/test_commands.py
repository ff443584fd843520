"""The compiler's commands are command records like any plugin's: ``backline demo`` and
``backline opt`` (the core names no compiler command)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backline_core import plugins


def _backline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=300)


def test_demo_and_opt_are_records_of_backline_compiler():
    records = {r.name: r for r in plugins.listing() if r.kind == "command"}
    assert records["demo"].distribution == records["opt"].distribution == "backline-compiler"


def test_backline_opt_is_backline_opt(tmp_path):
    source = tmp_path / "empty.mlir"
    source.write_text("builtin.module {\n}\n")
    proc = _backline("opt", str(source))
    assert proc.returncode == 0, proc.stderr
    assert "builtin.module" in proc.stdout


def test_demo_errors_are_one_line():
    for args, words in ((["demo"], "give a demo: ghz"), (["demo", "nosuch"], "unknown demo 'nosuch'")):
        proc = _backline(*args)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.defect("backline-opt /dev/zero read without end, and a FIFO waited for a writer forever")
def test_opt_reads_only_a_bounded_regular_file(tmp_path):
    fifo = tmp_path / "ir.mlir"
    os.mkfifo(fifo)
    for path, says in ((str(fifo), "is a FIFO (named pipe), not a regular file"),
                       ("/dev/zero", "is a character device, not a regular file"),
                       (str(tmp_path / "missing.mlir"), "no such file"), (str(tmp_path), "is a directory")):
        proc = _backline("opt", path)  # bounded by _backline's timeout
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
