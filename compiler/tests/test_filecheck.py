"""A tiny lit, in process: run the ``// RUN:`` lines of every ``.mlir`` file under this folder.

A RUN line is a small shell command: pipelines (``|``) joined by ``&&``, ``!`` before a
pipeline inverting its status, ``> FILE``, ``< FILE`` and ``2>&1``, ``'...'`` and ``"..."``
quoting and ``<(...)`` process substitution, as in bash. A pipeline fails when any of its
stages does (``pipefail``); a line passes when it exits 0. ``backline-opt`` (the opt
main, :func:`backline_compiler.opt.main`) and ``filecheck`` (the ``filecheck`` package's
matcher) run in this process, every other command (sed, od, test, diff, ...) as a
subprocess in the test file's folder. Substitutions: ``%s`` the test file, ``%S`` its
folder, ``%t`` a per-test temporary path. A RUN line ending in ``\\`` continues on the
next one. A file without RUN lines is an error.

Two tests run the real ``backline-opt`` console script end to end, through bash.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from backline_compiler import opt

HERE = Path(__file__).resolve().parent
TESTS = sorted(HERE.rglob("*.mlir"))

_RUN = re.compile(r"^\s*//\s*RUN:\s?(.*)$")


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
    command = command.replace("%S", shlex.quote(str(path.parent)))
    command = command.replace("%s", shlex.quote(str(path)))
    return command.replace("%t", shlex.quote(str(tmp / path.stem)))


# -- the shell: words and operators, then pipelines ----------------------------------------

_OPERATORS = ("&&", "2>&1", "2>", "<(", "|", ">", "<", ")")


def tokenize(line: str) -> list[tuple[str, str]]:
    """("word", text) and ("op", operator) tokens of ``line``, with sh quoting."""
    tokens: list[tuple[str, str]] = []
    word: list[str] | None = None
    i = 0
    while i < len(line):
        c = line[i]
        if word is None and c.isspace():
            i += 1
            continue
        if word is None:  # "2>" is an operator only at the start of a word, as in sh
            op = next((o for o in _OPERATORS if line.startswith(o, i)), None)
            if op:
                tokens.append(("op", op))
                i += len(op)
                word = None
                continue
        if c.isspace() or (word is not None and c in "|&<>)"):
            tokens.append(("word", "".join(word or [])))
            word = None
            continue
        word = word if word is not None else []
        if c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated ' in: {line}")
            word.append(line[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while i < len(line) and line[i] != '"':
                if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in '"\\$`':
                    i += 1
                word.append(line[i])
                i += 1
            if i >= len(line):
                raise ValueError(f'unterminated " in: {line}')
            i += 1
        elif c == "\\" and i + 1 < len(line):
            word.append(line[i + 1])
            i += 2
        else:
            word.append(c)
            i += 1
    if word is not None:
        tokens.append(("word", "".join(word)))
    return tokens


@dataclass
class Command:
    argv: list[str | list[Pipeline]] = field(default_factory=list)  # a list: a <(...) substitution
    stdout: str | None = None
    stdin: str | None = None
    stderr: str | None = None  # "&1": into stdout


@dataclass
class Pipeline:
    commands: list[Command]
    negate: bool = False


def parse(tokens: list[tuple[str, str]], pos: int = 0, *, nested: bool = False) -> tuple[list[Pipeline], int]:
    """``p && p && ...`` from ``tokens[pos:]`` (up to ``)`` when ``nested``); returns it and the next position."""
    pipelines = []
    while True:
        negate = False
        if pos < len(tokens) and tokens[pos] == ("word", "!"):
            negate, pos = True, pos + 1
        commands = [Command()]
        while pos < len(tokens):
            kind, text = tokens[pos]
            if kind == "word":
                commands[-1].argv.append(text)
                pos += 1
            elif text == "<(":
                inner, pos = parse(tokens, pos + 1, nested=True)
                commands[-1].argv.append(inner)
            elif text in (">", "<", "2>"):
                if pos + 1 >= len(tokens) or tokens[pos + 1][0] != "word":
                    raise ValueError(f"{text} needs a file name")
                attr = {">": "stdout", "<": "stdin", "2>": "stderr"}[text]
                setattr(commands[-1], attr, tokens[pos + 1][1])
                pos += 2
            elif text == "2>&1":
                commands[-1].stderr = "&1"
                pos += 1
            elif text == "|":
                commands.append(Command())
                pos += 1
            else:  # && or )
                break
        if any(not c.argv for c in commands):
            raise ValueError("empty command")
        pipelines.append(Pipeline(commands, negate))
        if pos < len(tokens) and tokens[pos] == ("op", "&&"):
            pos += 1
            continue
        if nested:
            if pos >= len(tokens) or tokens[pos] != ("op", ")"):
                raise ValueError("<( without )")
            pos += 1
        elif pos < len(tokens):
            raise ValueError(f"unexpected {tokens[pos][1]!r}")
        return pipelines, pos


# -- running it ------------------------------------------------------------------------------


def _in_process(main: Callable[[list[str]], int | None], args: list[str], stdin: bytes,
                merge: bool) -> tuple[int, bytes, bytes]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out if merge else err):
            try:
                status = main(args) or 0
            except SystemExit as exc:  # a tool that exits instead of returning
                status = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = saved
    return status, out.getvalue().encode(), err.getvalue().encode()


def _filecheck(args: list[str]) -> int:
    from filecheck.finput import FInput
    from filecheck.matcher import Matcher
    from filecheck.options import parse_argv_options
    from filecheck.parser import Parser

    opts = parse_argv_options(["filecheck", *args])
    text = sys.stdin.read() if opts.input_file == "-" else Path(opts.input_file).read_text()
    return Matcher(opts, FInput(opts.input_file, FInput.canonicalize_line_ends(text)), Parser.from_opts(opts)).run()


TOOLS: dict[str, Callable[[list[str]], int | None]] = {"backline-opt": opt.main, "filecheck": _filecheck}


@dataclass
class Shell:
    cwd: Path
    tmp: Path
    log: list[str] = field(default_factory=list)  # stderr of every command, for the failure message
    _n: int = 0

    def run(self, pipelines: list[Pipeline]) -> tuple[int, bytes]:
        status, out = 0, b""
        for p in pipelines:
            status, piped = self.pipeline(p)
            out += piped
            if status:
                break
        return status, out

    def pipeline(self, p: Pipeline) -> tuple[int, bytes]:
        status, data = 0, b""
        for i, c in enumerate(p.commands):
            args = [a if isinstance(a, str) else self.substitution(a) for a in c.argv]
            stdin = data if i else b""
            if c.stdin is not None:
                stdin = (self.cwd / c.stdin).read_bytes()
            rc, data, err = self.command(args, stdin, merge=c.stderr == "&1")
            if c.stderr not in (None, "&1"):
                (self.cwd / c.stderr).write_bytes(err)
            elif err:
                self.log.append(f"[{args[0]} stderr]\n{err.decode(errors='replace')}")
            if c.stdout is not None:
                (self.cwd / c.stdout).write_bytes(data)
                data = b""
            status = rc or status
        if p.negate:
            status = 0 if status else 1
        return status, data

    def substitution(self, pipelines: list[Pipeline]) -> str:
        _, out = self.run(pipelines)
        self._n += 1
        path = self.tmp / f"substitution-{self._n}"
        path.write_bytes(out)
        return str(path)

    def command(self, args: list[str], stdin: bytes, *, merge: bool) -> tuple[int, bytes, bytes]:
        if args[0] in TOOLS:
            with contextlib.chdir(self.cwd):
                return _in_process(TOOLS[args[0]], args[1:], stdin, merge)
        proc = subprocess.run(args, input=stdin, cwd=self.cwd, check=False, timeout=120, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merge else subprocess.PIPE)
        return proc.returncode, proc.stdout, proc.stderr or b""


def run_line(command: str, path: Path, tmp: Path) -> tuple[int, str, str]:
    """Run one RUN line; (status, its stdout, every command's stderr)."""
    shell = Shell(cwd=path.parent, tmp=tmp)
    status, out = shell.run(parse(tokenize(substitute(command, path, tmp)))[0])
    return status, out.decode(errors="replace"), "\n".join(shell.log)


@pytest.mark.parametrize("path", TESTS, ids=[str(p.relative_to(HERE)) for p in TESTS])
def test_mlir(path: Path, tmp_path: Path) -> None:
    commands = run_lines(path)
    assert commands, f"{path} has no '// RUN:' line"
    for command in commands:
        status, out, err = run_line(command, path, tmp_path)
        assert status == 0, f"RUN: {command}\nexit {status}\n--- stdout ---\n{out}\n--- stderr ---\n{err}"


# -- the shell itself ------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "status"), [
    ("true", 0), ("false", 1), ("! false", 0), ("! true", 1),
    ("false | true", 1), ("true | false", 1),                  # pipefail
    ("true && false", 1), ("false && true", 1),
    ("echo 'a | b' | grep -q 'a | b'", 0),                     # quoted operators are words
    ("echo \"x\\\"y\" | grep -q 'x\"y'", 0),
    ("sh -c 'echo oops >&2' 2>&1 | grep -q oops", 0),
    ("sh -c 'echo oops >&2' | grep -q oops", 1),
    ("diff <(echo a) <(echo a)", 0), ("diff <(echo a) <(echo b)", 1),
])
def test_the_shell(line: str, status: int, tmp_path: Path) -> None:
    assert run_line(line, tmp_path / "x.mlir", tmp_path)[0] == status


def test_the_shell_redirects_in_process_tools(tmp_path: Path) -> None:
    source = tmp_path / "t.mlir"
    source.write_text("// CHECK: func.func @f\nfunc.func @f() {\n  func.return\n}\n")
    assert run_line("backline-opt %s > %t.out && filecheck %s < %t.out", source, tmp_path)[0] == 0
    assert run_line("backline-opt %s | filecheck %s --check-prefix=NOPE", source, tmp_path)[0] != 0
    assert run_line("! backline-opt %S/missing.mlir 2>&1 | grep -qi 'No such file'", source, tmp_path)[0] == 0


# -- the real console script, end to end -----------------------------------------------------

SCRIPT = Path(sys.executable).with_name("backline-opt")


def _bash(line: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, check=False, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))


def test_console_script_runs_a_filecheck_test(tmp_path: Path) -> None:
    path = HERE / "passes" / "lower-decode-to-transport-round.mlir"
    tools = {"backline-opt": shlex.quote(str(SCRIPT)), "filecheck": f"{shlex.quote(sys.executable)} -m filecheck"}
    for command in run_lines(path):
        line = re.sub(r"(?<![\w./-])(backline-opt|filecheck)(?![\w.-])", lambda m: tools[m.group(1)],
                      substitute(command, path, tmp_path))
        proc = _bash(line, path.parent)
        assert proc.returncode == 0, f"$ {line}\n{proc.stdout}\n{proc.stderr}"


def test_console_script_errors_are_one_line(tmp_path: Path) -> None:
    source = HERE / "passes" / "inject-noise.mlir"
    for args in (["-p", "no-such-pass"], ["-p", "inject-noise{"], ["-p", "cross-compile-targets{workspace=/x}"],
                 [str(tmp_path / "missing.mlir")], [str(tmp_path)]):
        argv = [str(source), *args] if args[0] == "-p" else args
        proc = subprocess.run([str(SCRIPT), *argv], check=False, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("backline-opt: error: "), (argv, proc.stderr)
        assert proc.stdout == ""


@pytest.mark.parametrize(("args", "status"), [
    (["%s", "-p", "inject-noise{p=x}"], 2),                 # an option of the wrong type
    (["%s", "-p", "inject-noise{q=1}"], 2),                 # an option the pass does not have
    (["%s", "-p", "inject-noise,,"], 2),                    # a malformed spec
    (["%s", "-p", "cross-compile-targets{workspace=/w}"], 2),  # a string that needs quotes
    (["%s", "-p", "nope"], 2),
    (["%s", "--no-such-option"], 2),
    (["%s", "-t", "no-such-target"], 2),
    (["%S/missing.mlir"], 2),
    (["%S"], 2),
    (["%S/bad.mlir"], 1),                                   # the parser's diagnostic
    (["%S/bad.mlir", "--verify-diagnostics"], 0),
    (["%s", "-p", "encode-steane"], 1),                     # a pass's PassFailedException
])
def test_backline_opt_status_and_errors(args: list[str], status: int, tmp_path: Path) -> None:
    source = HERE / "passes" / "inject-noise.mlir"
    (tmp_path / "bad.mlir").write_text("func.func @f() {\n  func.return %x\n}\n")
    argv = [a.replace("%s", str(source)).replace("%S", str(tmp_path)) for a in args]
    got, out, err = _in_process(opt.main, argv, b"", merge=False)
    assert got == status, (argv, out, err)
    if status == 2:
        assert err.decode().startswith("backline-opt: error: ") and err.count(b"\n") == 1 and not out, err
    if status == 1:
        assert b"Traceback" not in err and err.strip() and not out, err


def test_backline_opt_keeps_the_intermediate_ir(tmp_path: Path) -> None:
    source, ir = HERE / "passes" / "inject-noise.mlir", tmp_path / "ir"
    argv = [str(source), "-p", "inject-noise{p=0.1},convert-quantum-to-llvm", "--keep-intermediate", str(ir),
            "-o", str(tmp_path / "out.mlir")]
    assert _in_process(opt.main, argv, b"", merge=False)[0] == 0
    steps = sorted(p.name for p in ir.iterdir())
    assert steps == ["00-input.mlir", "01-inject-noise.mlir", "02-convert-quantum-to-llvm.mlir"]
    assert "bquantum.noise" in (ir / steps[1]).read_text() and "bquantum.noise" not in (ir / steps[0]).read_text()
    assert (ir / steps[2]).read_text().strip() == (tmp_path / "out.mlir").read_text().strip()
