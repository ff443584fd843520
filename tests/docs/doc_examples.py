"""The examples of README.md and docs/*.md: found, grouped and run.

Imported by tests/docs/test_doc_examples.py and, by path, by the Soft-RoCE guest's
plugins/transport-rdma/tests/guest/test_doc_examples_guest.py, so both run the same blocks
the same way.

A block is a fenced code block. HTML comments on the lines right before its fence say how
it runs:

- ``<!-- doc-test: continues -->``: a ```python block that builds on the page's previous
  ```python block; the chain of such blocks runs as one program, in order, in one process.
- ``<!-- doc-test: needs NAME -->`` (``rdma``, ``fpga-model``, ``gpu``, ``ssh``, ``second-host``):
  the block needs what NAME says; it is skipped where that is missing and run where it is there
  (rdma: the Soft-RoCE guest's test; fpga-model: an FPGA engine model serving the window
  ``/dev/shm/backline-hwhs-0``, which the FPGA guest test starts). A chain needs what any of its
  blocks needs; marks are separated by ``;``.
- ``<!-- doc-test: without gpu env NAME=VALUE -->``: where there is no GPU, the block runs with
  NAME=VALUE in its environment (``TRITON_INTERPRET=1``: Triton's interpreter on CPU tensors);
  on a GPU machine it runs as written.
- ``<!-- doc-test: skip expensive, run by PLACE -->``: a shell block that takes too long
  for this suite; PLACE (``.ci/run``, a test file) runs the same command, which
  :func:`missing_from` checks.
- ``<!-- example-file: PATH -->``: a file of the plugins.md tutorial; the test builds the
  tutorial's plugin from these blocks, and the page's other blocks run with it installed.

Inside a ```python block, a statement followed by comment lines of the form
``# SomeError: message`` (continued by ``#   more``) must raise that exception, whose
message must contain the comment's text (whitespace-insensitive; ``...`` or ``…`` stand for
any text); a ``print(...)`` followed by plain comment lines must print that text.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose examples are run.
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
#: What a ``needs`` mark may name.
NEEDS = ("rdma", "fpga-model", "gpu", "ssh", "second-host")

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*(doc-test|example-file):\s*(.*?)\s*-->\s*$")
_ERROR_COMMENT = re.compile(r"^\s*#\s*([A-Z]\w*(?:Error|Exception)):\s?(.*)$")
_CONTINUATION = re.compile(r"^\s*#\s{2,}(.*)$")
_SHELL_LANGS = ("bash", "sh", "shell")
#: Each program and each shell command runs at most this long.
TIMEOUT_S = 300
_GUEST = re.compile(r"^plugins/transport-rdma/guest/run-in-guest (.+)$")


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marks: list[str] = field(default_factory=list)  # the doc-test marks, e.g. "needs rdma"
    example_file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def continues(self) -> bool:
        return "continues" in self.marks

    @property
    def needs(self) -> list[str]:
        return [m.split(None, 1)[1].strip() for m in self.marks if m.startswith("needs ")]

    @property
    def cpu_env(self) -> dict[str, str]:
        """The environment of a ``without gpu env`` mark."""
        return dict(m.split(" env ", 1)[1].split("=", 1) for m in self.marks if m.startswith("without gpu env "))

    @property
    def run_by(self) -> str | None:
        """PLACE of a ``skip expensive, run by PLACE`` mark."""
        for m in self.marks:
            found = re.fullmatch(r"skip expensive, run by (\S+)", m)
            if found:
                return found.group(1)
        return None


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (relative to the repository root), with its marks."""
    lines = (ROOT / page).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.group(1), fence.group(2)
        marks: list[str] = []
        example_file = None
        j = i - 1
        while j >= 0 and _MARK.match(lines[j]):
            kind, text = _MARK.match(lines[j]).groups()
            if kind == "example-file":
                example_file = text
            else:
                marks.extend(part.strip() for part in text.split(";"))
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
        found.append(Block(page, i + 1, lang, "\n".join(body) + "\n", marks, example_file))
        i = end + 1
    for block in found:
        bad = [m for m in block.marks if not (m == "continues" or re.fullmatch(rf"needs ({'|'.join(NEEDS)})", m)
                                              or re.fullmatch(r"skip expensive, run by \S+", m)
                                              or re.fullmatch(r"without gpu env \w+=\S+", m))]
        if bad:
            raise ValueError(f"{block.where}: unknown doc-test mark {bad[0]!r}; use 'continues', "
                             f"'needs {'|'.join(NEEDS)}', 'without gpu env NAME=VALUE' or 'skip expensive, run by PLACE'")
    return found


@dataclass
class Program:
    """The ```python blocks of one page that run together (a block and those that continue it)."""

    blocks: list[Block]

    @property
    def where(self) -> str:
        return self.blocks[0].where

    @property
    def page(self) -> str:
        return self.blocks[0].page

    @property
    def needs(self) -> list[str]:
        return sorted({n for b in self.blocks for n in b.needs})

    @property
    def cpu_env(self) -> dict[str, str]:
        return {k: v for b in self.blocks for k, v in b.cpu_env.items()}

    def source(self) -> str:
        """The program: each block with its expectations made checks, marked with where it came from."""
        parts = [_PRELUDE]
        for block in self.blocks:
            parts.append(f"# ---- {block.where}\n{expectations(block.code)}")
        return "\n".join(parts)


def programs(page: str) -> list[Program]:
    """The page's ```python blocks (example files left out), grouped into programs."""
    out: list[Program] = []
    for block in blocks(page):
        if block.lang != "python" or block.example_file:
            continue
        if block.continues:
            if not out:
                raise ValueError(f"{block.where}: marked 'continues' but no ```python block comes before it")
            out[-1].blocks.append(block)
        else:
            out.append(Program([block]))
    return out


def shell_commands(block: Block) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped."""
    text = re.sub(r"\\\n", " ", block.code)
    commands = []
    for line in text.splitlines():
        parts = command_parts(line)
        if parts:
            commands.append(" && ".join(shlex.join(part) for part in parts))
    return commands


def command_parts(command: str) -> list[list[str]]:
    """The words of each command of an ``&&`` chain (a comment dropped)."""
    parts: list[list[str]] = [[]]
    for word in shlex.split(command, comments=True):
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    return [part for part in parts if part]


def guest_command(command: str) -> str | None:
    """COMMAND of ``plugins/transport-rdma/guest/run-in-guest 'COMMAND'`` (what runs in the guest), else None."""
    found = _GUEST.match(command)
    if not found:
        return None
    words = shlex.split(found.group(1))
    return words[0] if len(words) == 1 else None


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def run_program(program: Program, workdir: Path, pythonpath: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``program`` in a fresh interpreter run from ``workdir`` (its files, caches and plots stay there)."""
    script = workdir / "example.py"
    script.write_text(program.source())
    env = dict(os.environ, XDG_CACHE_HOME=str(workdir / "cache"), MPLBACKEND="Agg")
    if not has_gpu():
        env.update(program.cpu_env)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def run_shell(command: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in bash from ``workdir``, where ``.venv`` is this interpreter's environment."""
    venv = workdir / ".venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.prefix))  # the page's `.venv/bin/backline`
    env = dict(os.environ, XDG_CACHE_HOME=str(workdir / "cache"), MPLBACKEND="Agg",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def is_backline_command(command: str) -> bool:
    """A ``backline ...`` or ``backline-opt ...`` command (or ``.venv/bin/...``), each part of an ``&&`` chain."""
    return all(re.fullmatch(r"(\.venv/bin/)?backline(-opt)?", part[0]) for part in command_parts(command))


def missing_from(place: Path, block: Block) -> list[str]:
    """The commands of ``block`` that ``place`` (a script or a test) does not contain as commands."""
    text = re.sub(r"\\\n\s*", " ", place.read_text())
    missing = []
    for command in shell_commands(block):
        for words in command_parts(command):
            part = shlex.join(words)
            # a placeholder (path/to/your-plugin) stands for any path
            pattern = r"\s+".join(r"\S+" if w.startswith("path/to/") else re.escape(w) for w in words) + r"(?=\s*(?:$|;|&&|\|\||\)|\"|'))"
            if not re.search(pattern, text, flags=re.M):
                missing.append(part)
    return missing


# ---- expectations inside a python block -------------------------------------------------

_PRELUDE = '''\
import re as _doc_re


def _doc_expect_raise(exc, name, text, where):
    names = [c.__name__ for c in type(exc).__mro__]
    if name not in names:
        raise AssertionError(f"{where}: expected {name}, got {type(exc).__name__}: {exc}") from exc
    _doc_expect_text(str(exc), text, where, f"the {name}")


def _doc_expect_text(got, text, where, what):
    flat = " ".join(got.split())
    pieces = [" ".join(p.split()) for p in _doc_re.split(r"\\.\\.\\.|\\u2026", text)]
    at = 0
    for piece in pieces:
        found = flat.find(piece, at)
        if found < 0:
            raise AssertionError(f"{where}: {what} does not say {piece!r} where the page says it; it says:\\n{got}")
        at = found + len(piece)
'''


def _comment_run(lines: list[str], start: int) -> tuple[list[str], int]:
    """The comment lines from ``start`` on (their text without ``#``), and the index after them."""
    texts = []
    i = start
    while i < len(lines) and lines[i].lstrip().startswith("#"):
        texts.append(lines[i].lstrip()[1:].strip())
        i += 1
    return texts, i


def expectations(code: str) -> str:
    """``code`` with each top-level statement that a ``# XError: ...`` comment follows wrapped in a
    check that it raises that, and each ``print`` that plain comments follow checked to print them."""
    tree = ast.parse(code)
    lines = code.splitlines()
    out: list[str] = []
    done = 0  # lines of ``code`` already copied
    for stmt in tree.body:
        first, last = stmt.lineno - 1, stmt.end_lineno or stmt.lineno  # 0-based first, exclusive end
        comments, after = _comment_run(lines, last)
        if not comments:
            continue
        error = _ERROR_COMMENT.match(lines[last])
        is_print = (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print")
        if not error and not is_print:
            continue
        out.extend(lines[done:first])
        body = lines[first:last]
        where = f"the statement at block line {first + 1}"
        if error:
            name = error.group(1)
            text = " ".join([error.group(2), *comments[1:]])
            out.append("try:")
            out.extend("    " + line for line in body)
            out.append("except Exception as _doc_exc:")
            out.append(f"    _doc_expect_raise(_doc_exc, {name!r}, {text!r}, {where!r})")
            out.append("else:")
            out.append(f"    raise AssertionError({where!r} + ' raised nothing; the page says {name}')")
        else:
            text = " ".join(comments)
            call = ast.get_source_segment(code, stmt) or "\n".join(body)
            out.append("import io as _doc_io, contextlib as _doc_cl")
            out.append("with _doc_cl.redirect_stdout(_doc_io.StringIO()) as _doc_out:")
            out.extend("    " + line for line in call.splitlines())
            out.append("print(_doc_out.getvalue(), end='')")
            out.append(f"_doc_expect_text(_doc_out.getvalue(), {text!r}, {where!r}, 'what it printed')")
        out.extend(lines[last:after])
        done = after
    out.extend(lines[done:])
    return "\n".join(out) + "\n"
