"""``backline-opt``: xDSL's ``xdsl-opt`` with Backline's dialects and passes -- parse IR, run a pass
pipeline, print.

    backline-opt input.mlir -p inject-transport-session,convert-transport-to-llvm
    backline-opt input.mlir --verify-diagnostics      # print the parser's or verifier's message, exit 0
    backline-opt --list-passes

It is :class:`xdsl.xdsl_opt_main.xDSLOptMain` (every ``xdsl-opt`` option works) with the
passes of every installed ``backline.passes`` plugin added to those of the xDSL universes,
and these Backline options: ``-`` for stdin (also ``-o -``), ``--print-generic``,
``--keep-intermediate DIR``, ``--list-passes``; ``--verify-diagnostics`` also covers parse
errors. A parse, verification or pass error prints its diagnostic on stderr, exit status 1;
any other error (usage, the pipeline spec, the input file) is one line on stderr, status 2.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
from collections.abc import Sequence
from typing import IO, NoReturn

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.universe import Universe
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from backline_core.sdk import InputFileError, read_input_file

from . import pipeline

PROG = "backline-opt"
#: the largest IR file read (IR of this project's programs is kilobytes)
MAX_INPUT_BYTES = 64 << 20


class UsageError(Exception):
    """A command-line mistake: reported as one line, exit status 2."""


def _usage_error(message: str) -> NoReturn:
    raise UsageError(message)


@functools.cache
def multiverse() -> Universe:
    """Every installed ``xdsl.universe`` merged, read once per process (as the plugin registry reads
    its entry points); xDSL's own main reads them again for each of its four tables."""
    return Universe.get_multiverse()


class BacklineOptMain(xDSLOptMain):
    """``xDSLOptMain`` with Backline's passes and options (see the module's docstring)."""

    version_format = PROG + " built from xdsl version {xdsl_version}"

    def __init__(self, description: str = "Run Backline (and xDSL) passes over IR text.",
                 args: Sequence[str] | None = None) -> None:
        self.multiverse = multiverse()
        super().__init__(description, args)

    def register_all_dialects(self) -> None:
        for name, factory in self.multiverse.all_dialects.items():  # Backline's universe among them
            self.ctx.register_dialect(name, factory)
        from .dialects import load_all

        load_all(self.ctx)  # also when the compiler's universe entry point is not installed

    def register_all_frontends(self) -> None:
        for name, factory in self.multiverse.all_frontends.items():
            self.available_frontends.setdefault(name, factory)

    def register_all_targets(self) -> None:
        for name, factory in self.multiverse.all_targets.items():
            self.available_targets.setdefault(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in self.multiverse.all_passes.items():
            self.register_pass(name, factory)
        # The plugin registry is Backline's source of passes: it adds third-party ones and
        # checks that a record's class carries the record's name.
        for name, load in pipeline.available_passes().items():
            self.register_pass(name, load)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.prog = PROG
        arg_parser.error = _usage_error  # type: ignore[method-assign]  # one line, not usage + message
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument("--print-generic", dest="print_op_generic", action="store_true",
                                help="print operations in the generic form (--print-op-generic)")
        arg_parser.add_argument("--keep-intermediate", metavar="DIR",
                                help="write the IR before and after every pass into DIR (00-input.mlir, 01-<pass>.mlir, ...)")
        arg_parser.add_argument("--list-passes", action="store_true", help="list the Backline passes and exit")

    def setup_pipeline(self) -> None:
        if self.args.verify_diagnostics:
            self.args.parsing_diagnostics = True
        if self.args.list_passes:
            self.pipeline = PassPipeline(())
            return
        spec = self.args.passes
        try:
            items = list(parse_pipeline(spec))
        except ArgSpecParseError as exc:  # a BaseException in xDSL
            text = " ".join(str(exc.args[0] if exc.args else exc).split())
            raise UsageError(f"pass pipeline {spec!r}: {text} (a string option's value is quoted: "
                             'name{option="text"})') from None
        for item in items:  # each pass's own mistakes, named, before xDSL builds the pipeline
            if item.name not in self.available_passes:
                raise UsageError(f"unknown pass {item.name!r} in {spec!r}; `{PROG} --list-passes` lists the "
                                 "Backline passes")
            try:
                self.available_passes[item.name]().from_pass_spec(item)
            except (ValueError, TypeError) as exc:
                raise UsageError(f"pass {item.name!r} in {spec!r}: {exc}") from None
        super().setup_pipeline()
        if self.args.keep_intermediate:
            write = pipeline.intermediate_writer(self.args.keep_intermediate, verify=False)
            checks = self.pipeline.callback

            def callback(prev: ModulePass | None, op: ModuleOp, nxt: ModulePass | None) -> None:
                if checks is not None:
                    checks(prev, op, nxt)
                write(prev, op, nxt)

            self.pipeline = PassPipeline(self.pipeline.passes, callback)

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        path = self.args.input_file
        if path in (None, "-"):
            return sys.stdin.buffer, "mlir"
        if os.path.isdir(path):
            raise UsageError(f"input {path!r} is a directory; give an IR file, or - for stdin")
        # a regular file of bounded size: a FIFO or /dev/zero must not block or be read without end
        try:
            data = read_input_file(path, what="input", limit=MAX_INPUT_BYTES)
        except InputFileError as exc:
            raise UsageError(str(exc)) from None
        extension = os.path.splitext(path)[1].removeprefix(".")
        # any file is MLIR text unless a frontend claims its extension
        return io.BytesIO(data), extension if extension in self.available_frontends else "mlir"

    def prepare_output(self) -> IO[str]:
        if self.args.output_file in (None, "-"):
            return sys.stdout
        return super().prepare_output()

    def list_passes(self) -> None:
        for name in sorted(pipeline.available_passes()):
            print(name)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename!r}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``backline-opt`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    try:
        opt = BacklineOptMain(args=None if argv is None else list(argv))
        if opt.args.list_passes:
            opt.list_passes()
        else:
            opt.run()
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except (ParseError, DiagnosticException) as exc:
        print(str(exc).rstrip("\n"), file=sys.stderr)
        return 1
    except ArgSpecParseError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 -- never a traceback: one line naming the problem
        what = "" if isinstance(exc, (UsageError, OSError)) else f"{type(exc).__name__}: "
        print(f"{PROG}: error: {what}{_one_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
