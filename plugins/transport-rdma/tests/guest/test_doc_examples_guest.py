"""The examples of README.md and docs/*.md marked ``<!-- doc-test: needs rdma -->``, run on the
guest's verbs device; elsewhere the ``rdma_device`` fixture skips them (fails under
BACKLINE_REQUIRE_RDMA=1). They are found and run by tests/docs/doc_examples.py, as
tests/docs/test_doc_examples.py runs the others; a ``run-in-guest 'COMMAND'`` block runs COMMAND.
Examples that also need the FPGA engine model run in plugins/transport-fpga/tests/guest.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


def _load_doc_examples():
    spec = importlib.util.spec_from_file_location("backline_doc_examples", ROOT / "tests" / "docs" / "doc_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


dx = _load_doc_examples()
PROGRAMS = [p for page in dx.PAGES for p in dx.programs(page) if "rdma" in p.needs and "fpga-model" not in p.needs]
COMMANDS = [(b.where, dx.guest_command(c) or c) for page in dx.PAGES for b in dx.blocks(page)
            if b.lang in dx._SHELL_LANGS and "rdma" in b.needs for c in dx.shell_commands(b)]


def test_the_pages_mark_rdma_examples() -> None:
    assert PROGRAMS and COMMANDS, "no example is marked <!-- doc-test: needs rdma -->"


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.where for p in PROGRAMS])
def test_rdma_python_example(program, rdma_device: str, tmp_path: Path) -> None:
    done = dx.run_program(program, tmp_path)
    assert done.returncode == 0, f"the example at {program.where} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_rdma_shell_example(where: str, command: str, rdma_device: str, tmp_path: Path) -> None:
    assert dx.is_backline_command(command), f"{where}: {command!r} is not a backline command the guest can run"
    done = dx.run_shell(f"cd {ROOT} && {command}", tmp_path)
    assert done.returncode == 0, f"{where}: `{command}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
