"""``backline-opt``: parse IR, run a pass pipeline, print -- like mlir-opt / xdsl-opt.

    backline-opt input.mlir -p inject-transport-session,convert-transport-to-llvm
    backline-opt input.mlir --verify-diagnostics      # print the verifier's message, exit 0
    backline-opt --list-passes
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from . import pipeline


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backline-opt", description="Run Backline passes over IR text.")
    parser.add_argument("input", nargs="?", default="-", help="IR file, or - for stdin")
    parser.add_argument("-p", "--passes", default="", help="pipeline spec, e.g. 'a,b{opt=1}'")
    parser.add_argument("-o", "--output", default="-")
    parser.add_argument("--print-generic", action="store_true", help="print the generic op form")
    parser.add_argument("--verify-diagnostics", action="store_true",
                        help="on a parse or verification error print its message and exit 0")
    parser.add_argument("--keep-intermediate", metavar="DIR", help="write the IR after every pass into DIR")
    parser.add_argument("--list-passes", action="store_true")
    args = parser.parse_args(argv)

    if args.list_passes:
        for name in sorted(pipeline.available_passes()):
            print(name)
        return 0
    text = sys.stdin.read() if args.input == "-" else open(args.input).read()
    try:
        module = pipeline.parse(text)
        if args.passes:
            pipeline.run(module, args.passes, keep_intermediate=args.keep_intermediate)
    except (ParseError, VerifyException, DiagnosticException) as exc:
        print(str(exc))
        return 0 if args.verify_diagnostics else 1
    except ValueError as exc:  # pipeline spec problems
        print(f"backline-opt: error: {exc}", file=sys.stderr)
        return 2
    out = pipeline.print_module(module, generic=args.print_generic)
    if args.output == "-":
        sys.stdout.write(out)
    else:
        with open(args.output, "w") as fh:
            fh.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
