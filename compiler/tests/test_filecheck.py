"""A tiny lit: run the ``// RUN:`` lines of every ``.mlir`` file under this folder.

Substitutions: ``backline-opt`` -> ``python -m backline_compiler.opt``, ``filecheck`` ->
``python -m filecheck`` (both with this interpreter), ``%s`` -> the test file, ``%S`` -> its
folder, ``%t`` -> a per-test temporary path. A RUN line ending in ``\\`` continues on the
next one. Each line runs under ``bash -o pipefail`` with ``backline_compiler`` importable,
and passes when it exits 0. A file without RUN lines is an error.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
COMPILER_ROOT = HERE.parent  # holds the backline_compiler package
TESTS = sorted(HERE.rglob("*.mlir"))

_RUN = re.compile(r"^\s*//\s*RUN:\s?(.*)$")
_PY = shlex.quote(sys.executable)
_TOOLS = {
    "backline-opt": f"{_PY} -m backline_compiler.opt",
    "filecheck": f"{_PY} -m filecheck",
}
_TOOL = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, _TOOLS)) + r")(?![\w.-])")


def run_lines(path: Path) -> list[str]:
    """The file's RUN commands, continuation lines joined."""
    commands: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        match = _RUN.match(line)
        if not match:
            if pending:
                raise ValueError(f"{path}: RUN line continued with '\\' but the next line is not a RUN line")
            continue
        text = match.group(1).rstrip()
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        commands.append(pending + text)
        pending = ""
    if pending:
        raise ValueError(f"{path}: the last RUN line ends in '\\'")
    return commands


def substitute(command: str, path: Path, tmp: Path) -> str:
    command = _TOOL.sub(lambda m: _TOOLS[m.group(1)], command)
    command = command.replace("%S", shlex.quote(str(path.parent)))
    command = command.replace("%s", shlex.quote(str(path)))
    return command.replace("%t", shlex.quote(str(tmp / path.stem)))


@pytest.mark.parametrize("path", TESTS, ids=[str(p.relative_to(HERE)) for p in TESTS])
def test_mlir(path: Path, tmp_path: Path) -> None:
    commands = run_lines(path)
    assert commands, f"{path} has no '// RUN:' line"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(COMPILER_ROOT), env.get("PYTHONPATH", "")) if p)
    for command in commands:
        shell = substitute(command, path, tmp_path)
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", shell],
            check=False,
            cwd=path.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (
            f"RUN: {command}\n$ {shell}\nexit {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
