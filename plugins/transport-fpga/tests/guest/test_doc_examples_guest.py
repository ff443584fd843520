"""The examples of README.md and docs/*.md marked ``<!-- doc-test: needs fpga-model -->``: run
with an engine model serving the window they name, ``/dev/shm/backline-hwhs-0``, on the guest's
verbs device; elsewhere the ``rdma_device`` fixture skips them (fails under
BACKLINE_REQUIRE_RDMA=1). Found and run by tests/docs/doc_examples.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from backline_transport_fpga.model import EngineModel

ROOT = Path(__file__).resolve().parents[4]
#: The window the pages' FPGA placements name.
WINDOW = "/dev/shm/backline-hwhs-0"


def _load_doc_examples():
    spec = importlib.util.spec_from_file_location("backline_doc_examples", ROOT / "tests" / "docs" / "doc_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


dx = _load_doc_examples()
PROGRAMS = [p for page in dx.PAGES for p in dx.programs(page) if "fpga-model" in p.needs]


def test_the_pages_mark_fpga_examples() -> None:
    assert PROGRAMS, "no example is marked <!-- doc-test: needs fpga-model -->"
    for program in PROGRAMS:
        assert WINDOW in program.source(), f"{program.where} does not use the window {WINDOW} this test serves"


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.where for p in PROGRAMS])
def test_fpga_python_example(program, rdma_device: str, tmp_path: Path) -> None:
    with EngineModel(WINDOW, device=rdma_device):
        done = dx.run_program(program, tmp_path)
    assert done.returncode == 0, f"the example at {program.where} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
