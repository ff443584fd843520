"""The compiler's commands are command records like any plugin's: ``backline demo`` and
``backline opt`` (the core names no compiler command)."""

from __future__ import annotations

import subprocess
import sys

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
