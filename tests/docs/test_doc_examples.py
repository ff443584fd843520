"""Every example of README.md and docs/*.md runs, and says what it shows.

Each ```python program (a block, with the blocks marked ``<!-- doc-test: continues -->``
after it: see doc_examples.py) runs in a fresh interpreter from a temporary directory, with
a deadline. docs/plugins.md's programs run with the page's own tutorial plugin
(``backline-loopback-example``, built from its ``example-file`` blocks) installed into a
temporary directory on ``PYTHONPATH``, so nothing is installed into the environment. Shell
blocks of ``backline`` commands run too; an expensive one says which script runs it, and a
test checks that script does. Blocks that need an RDMA device are skipped here and run in the
Soft-RoCE guest (plugins/transport-rdma/tests/guest/test_doc_examples_guest.py).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest


def _load_doc_examples():
    spec = importlib.util.spec_from_file_location("backline_doc_examples", Path(__file__).with_name("doc_examples.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


dx = _load_doc_examples()

RUN_ELSEWHERE = {
    "rdma": "needs an RDMA device; run in the Soft-RoCE guest by "
            "plugins/transport-rdma/tests/guest/test_doc_examples_guest.py",
    "fpga-model": "needs the FPGA engine model over an RDMA device; run in the Soft-RoCE guest by "
                  "plugins/transport-fpga/tests/guest/test_doc_examples_guest.py",
    "gpu": "needs a GPU",
    "ssh": "needs an sshd to log in to",
    "second-host": "needs a second host",
}

PROGRAMS = [p for page in dx.PAGES for p in dx.programs(page)]
SHELL_BLOCKS = [b for page in dx.PAGES for b in dx.blocks(page) if b.lang in dx._SHELL_LANGS]


def _missing(needs: list[str]) -> str | None:
    for need in needs:
        if need == "gpu" and dx.has_gpu():
            continue
        return RUN_ELSEWHERE[need]
    return None


#: page -> the example project its ``example-file`` blocks make (the page's tutorial plugin)
EXAMPLE_PROJECTS = {"docs/plugins.md": "backline-loopback-example", "docs/compiler.md": "backline-example-pass"}


def _build_example(page: str, root: Path) -> Path:
    """``page``'s example project, built from its listings, installed into a directory of its own."""
    project = root / EXAMPLE_PROJECTS[page]
    files = [b for b in dx.blocks(page) if b.example_file]
    assert files, f"{page} has no example-file blocks"
    for block in files:
        path = project / block.example_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.code)
    site = root / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "install",
                            "--no-build-isolation", "--no-index", "--no-deps", "--target", str(site), str(project)],
                           capture_output=True, text=True, timeout=dx.TIMEOUT_S, cwd=root)
    assert build.returncode == 0, f"building {page}'s example project failed:\n{build.stdout}\n{build.stderr}"
    return site


@pytest.fixture(scope="session")
def loopback_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/plugins.md's tutorial plugin, built from the page's listings into a directory of its own."""
    return _build_example("docs/plugins.md", tmp_path_factory.mktemp("loopback"))


@pytest.fixture(scope="session")
def example_pass_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/compiler.md's example pass, built from the page's listings."""
    return _build_example("docs/compiler.md", tmp_path_factory.mktemp("example-pass"))


_SITES = {"docs/plugins.md": "loopback_site", "docs/compiler.md": "example_pass_site"}


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.where for p in PROGRAMS])
def test_python_example(program: dx.Program, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    reason = _missing(program.needs)
    if reason:
        pytest.skip(reason)
    site = _SITES.get(program.page)
    pythonpath = [str(request.getfixturevalue(site))] if site else []
    done = dx.run_program(program, tmp_path, pythonpath)
    assert done.returncode == 0, (f"the example at {program.where} ({len(program.blocks)} block(s)) failed:\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.where for b in SHELL_BLOCKS])
def test_shell_example(block: dx.Block, tmp_path: Path) -> None:
    if block.run_by:
        pytest.skip(f"expensive: {block.run_by} runs it (test_expensive_examples_are_run checks that)")
    reason = _missing(block.needs)
    if reason:
        pytest.skip(reason)
    commands = dx.shell_commands(block)
    others = [c for c in commands if not dx.is_backline_command(c)]
    assert not others, (f"{block.where}: {others[0]!r} is not a backline command this test can run; run it here, "
                        "or mark the block <!-- doc-test: needs ... --> or <!-- doc-test: skip expensive, run by "
                        "PLACE --> where PLACE runs the same command")
    for command in commands:
        done = dx.run_shell(command, tmp_path)
        assert done.returncode == 0, f"{block.where}: `{command}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


EXPENSIVE = [b for b in SHELL_BLOCKS if b.run_by]


@pytest.mark.parametrize("block", EXPENSIVE, ids=[b.where for b in EXPENSIVE])
def test_expensive_examples_are_run(block: dx.Block) -> None:
    place = dx.ROOT / block.run_by
    assert place.is_file(), f"{block.where} says {block.run_by} runs it, but there is no such file"
    missing = dx.missing_from(place, block)
    assert not missing, (f"{block.where} is skipped as expensive because {block.run_by} runs it, but "
                         f"{block.run_by} does not run {missing[0]!r}")


def test_marks_are_read() -> None:
    # The rdma-marked blocks are what the guest's test runs; the page and this module agree on them.
    marked = [p.where for p in PROGRAMS if "rdma" in p.needs]
    assert marked, "no ```python example is marked <!-- doc-test: needs rdma -->; the guest's test would run nothing"
    for program in PROGRAMS:
        if program.page != "docs/plugins.md":
            assert "loopback" not in program.source(), f"{program.where} uses plugins.md's tutorial plugin"


def test_expectation_comments(tmp_path: Path) -> None:
    """A statement commented with an error must raise it, and a print must print its comment."""
    def outcome(code: str) -> subprocess.CompletedProcess[str]:
        program = dx.Program([dx.Block("page.md", 1, "python", code)])
        return dx.run_program(program, tmp_path)

    assert outcome("int('x')\n# ValueError: invalid literal ... 'x'\n").returncode == 0
    assert outcome("print('a b  c')\n# a b\n#   c\n").returncode == 0
    wrong_class = outcome("int('x')\n# KeyError: invalid literal\n")
    assert wrong_class.returncode != 0 and "expected KeyError, got ValueError" in wrong_class.stderr
    wrong_text = outcome("int('x')\n# ValueError: another message\n")
    assert wrong_text.returncode != 0 and "does not say 'another message'" in wrong_text.stderr
    nothing = outcome("int('1')\n# ValueError: invalid literal\n")
    assert nothing.returncode != 0 and "raised nothing" in nothing.stderr
    printed = outcome("print('yes')\n# no\n")
    assert printed.returncode != 0 and "does not say 'no'" in printed.stderr
