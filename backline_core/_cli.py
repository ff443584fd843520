"""The ``backline`` command line: every subcommand is a command record (``backline.commands``).

    backline plugins                      list installed plugins and load errors
    backline bench [options]              round-trip benchmark against the bare floor
    backline coprocessor serve --key K    serve a coprocessor over a transport until signalled
    backline executor serve [options]     run an executor server (needs an executor plugin)
    backline NAME [args]                  a command another plugin adds (``backline plugins`` lists them),
                                          e.g. ``backline demo ghz`` (backline-compiler), ``backline rdma devices``

The core's own four are records of :mod:`backline_core._builtins`, like any plugin's. Every
error, the command line's own included, is one line on stderr, ``backline: error: ...``, and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

from ._errors import BacklineError
from ._hookspecs import RECORD_TYPES
from ._process import StopWatch  # early: it notes this process's parent as ``coprocessor serve`` starts


def one_line(text: str) -> str:
    """``text`` (perhaps several lines, such as a list of installed plugins) as one line."""
    out = ""
    for line in (part.strip() for part in str(text).splitlines()):
        if not line:
            continue
        out = line if not out else f"{out} {line}" if out.endswith(":") else f"{out}; {line}"
    return out


def _fail(message: str) -> None:
    print(f"backline: error: {one_line(message)}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (``--help`` prints the usage)."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see {self.prog} --help)")
        sys.exit(2)


# -- argument types: a bad value is a one-line usage error naming the option ------------------

def _whole_number(text: str) -> int:
    """An integer, also written as 1e6 or 1_000_000 (bounds are the command's to check)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = Decimal(text.replace("_", ""))
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if value.adjusted() > 30:
        raise argparse.ArgumentTypeError(f"{text!r} is far too large")
    return int(value)


def _integer_any_base(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (decimal, or 0x... hexadecimal)") from None


def cpu_or_none(text: str) -> int | None:
    """An argparse type: a CPU number, or "none"."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPU number (or none)") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds >= 0, or leave the option out "
                                         "to serve until signalled")
    return value


def parent_pid(text: str) -> int:
    """An argparse type for ``--parent-pid``: the id of a process that exists now (a pid past the
    kernel's pid_max, 0 or a negative one, or one no process has, is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a positive integer)") from None
    limit = _pid_max()
    if not 0 < value <= limit:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id: give one from 1 to {limit} "
                                         "(/proc/sys/kernel/pid_max)")
    try:
        os.kill(value, 0)
    except ProcessLookupError:
        raise argparse.ArgumentTypeError(f"{value}: no such process; give the pid of a running process "
                                         "(whoever starts this one passes its own)") from None
    except PermissionError:
        pass  # it exists, and is another user's
    return value


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 4_194_304  # PID_MAX_LIMIT on 64-bit Linux


#: the largest ``--fn @FILE`` spec (a native function's context travels in it, hex-encoded)
MAX_FN_SPEC_BYTES = 16 << 20


# -- plugins ----------------------------------------------------------------------------------

def _cmd_plugins(args: argparse.Namespace) -> int:
    from . import _plugins as plugins

    rows = plugins.listing()
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
        return 0
    if not rows:
        print("no plugins installed")
        return 0
    # One row per (name, distribution): a transport that several distributions serve has a
    # row for each part, its name repeated, saying what that part serves.
    name_width = max(len(r.name) for r in rows)
    origin_width = max(len(f"{r.distribution} {r.version}".strip()) for r in rows)
    for kind in RECORD_TYPES:
        kind_rows = sorted((r for r in rows if r.kind == kind), key=lambda r: (r.name, r.distribution))
        if not kind_rows:
            continue
        print(f"{kind}es:" if kind.endswith("s") else f"{kind}s:")
        for r in kind_rows:
            origin = f"{r.distribution} {r.version}".strip()
            what = f"FAILED TO LOAD: {one_line(r.error)}" if r.error else one_line(r.serves)
            print(f"  {r.name:<{name_width}}  {origin:<{origin_width}}  {what}".rstrip())
    return 1 if args.strict and any(r.error for r in rows) else 0


# -- bench ------------------------------------------------------------------------------------

def _cmd_bench(args: argparse.Namespace) -> int:
    from ._bench import config, report, runner

    cfg = config.from_args(args)
    cfg.validate()
    report.check_outputs(args.json, args.plot)  # before the run: its results must have somewhere to go
    result = runner.run(cfg, stream=sys.stderr)
    print(report.main_report(result, args.json, args.plot))
    return 0 if result.lost == 0 and result.mismatched == 0 else 1


# -- coprocessor serve ------------------------------------------------------------------------

def _bindings(specs: Sequence[str]) -> list[Any]:
    """The functions ``--fn`` names, checked before any session exists."""
    from ._coprocessor_function import MAX_DECODERS, CoprocessorFunction, load_import_path

    bindings: list[Any] = []
    for spec in specs:
        shown = spec
        if spec.startswith("@"):  # the spec is in a file (long native contexts)
            from ._input import read_input_text

            spec = read_input_text(spec[1:], what="--fn @FILE (a coprocessor function spec)",
                                   limit=MAX_FN_SPEC_BYTES).strip()
        if spec.startswith("{"):
            try:
                bindings.append(CoprocessorFunction.from_dict(json.loads(spec)))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                if isinstance(exc, BacklineError):
                    raise
                raise BacklineError(f"--fn: not a JSON CoprocessorFunction description: {exc}") from None
            continue
        name, _, ids = spec.partition("@")
        if not name:
            raise BacklineError(f"--fn {shown!r}: give a decoder name or module:function before '@'")
        decoder_ids = None
        if ids:
            try:
                decoder_ids = [int(i) for i in ids.split(",")]
            except ValueError:
                raise BacklineError(f"--fn {shown!r}: decoder ids after '@' must be integers, "
                                    "e.g. steane@0,1") from None
            for i in decoder_ids:
                if not 0 <= i < MAX_DECODERS:
                    raise BacklineError(f"--fn {shown!r}: decoder id {i} must be from 0 to {MAX_DECODERS - 1} "
                                        "(BL_MAX_DECODERS)")
            if len(set(decoder_ids)) != len(decoder_ids):
                raise BacklineError(f"--fn {shown!r}: a decoder id is repeated")
        bindings.append((load_import_path(name) if ":" in name else name, decoder_ids))
    _check_distinct_ids(bindings)
    return bindings


def _check_distinct_ids(bindings: Sequence[Any]) -> None:
    """Two --fn bound to one decoder id: the second would silently replace the first."""
    from ._coprocessor_function import CoprocessorFunction

    seen: dict[int, str] = {}
    for item in bindings:
        fn, ids = (item, None) if isinstance(item, CoprocessorFunction) else item
        if ids is None:
            if isinstance(fn, CoprocessorFunction):
                ids = fn.decoder_ids
            elif isinstance(fn, str):
                continue  # a decoder's declared ids are known once it is built
            else:
                ids = getattr(fn, "decoder_ids", (0,))
        name = fn.name if isinstance(fn, CoprocessorFunction) else getattr(fn, "__name__", str(fn))
        for i in ids:
            if i in seen:
                raise BacklineError(f"--fn: decoder id {i} is bound twice ({seen[i]} and {name}); give each "
                                    "--fn its own ids, e.g. --fn echo@0 --fn steane@1")
            seen[i] = name


def _cmd_serve(args: argparse.Namespace) -> int:
    from ._session import Session

    # Armed first: a signal, or the parent's death, during bring-up ends the serve as soon
    # as bring-up returns (and before "ready" is printed); nothing kills it half-way.
    with StopWatch(args.parent_pid) as stop:
        bindings = _bindings(args.fn)
        if stop.triggered():
            return 0
        session = Session.open(args.transport, "coprocessor", args.key, config=args.config, hardware=args.hardware,
                               runs_in="process", functions=bindings)
        try:
            if stop.triggered():
                return 0
            try:
                print(f"ready key={args.key} pid={os.getpid()} transport={args.transport}", flush=True)
            except BrokenPipeError:  # whoever started this is no longer reading: it is gone
                _detach_stdout()
                return 0
            stop.wait(args.duration)
        finally:
            session.destroy()
    return 0


def _detach_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# -- executor ---------------------------------------------------------------------------------

def _cmd_executor(argv: list[str]) -> int:
    """``backline executor [--kind NAME] ARGS``: hand ARGS to an executor plugin's command line."""
    from . import _plugins as plugins

    kind = None
    if argv[:1] == ["--kind"]:
        if len(argv) < 2:
            raise BacklineError("executor --kind needs an executor plugin name")
        kind, argv = argv[1], argv[2:]
    installed = plugins.names("executor")
    if kind is None:
        if not installed:
            raise BacklineError("no executor plugin is installed: pip install backline-executor-orc "
                                "(plugins/executor-orc in this repository)")
        if len(installed) > 1:
            raise BacklineError(f"several executor plugins are installed ({', '.join(installed)}): "
                                "choose one with backline executor --kind NAME ...")
        kind = installed[0]
    return int(plugins.get("executor", kind).load().cli(argv))


def _parser(name: str, description: str, **options: Any) -> Parser:
    return Parser(prog=f"backline {name}", description=description, **options)


def plugins_main(argv: Sequence[str]) -> int:
    """``backline plugins``."""
    p = _parser("plugins", "List the installed plugins, what each serves, and load errors.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--strict", action="store_true", help="exit 1 if any plugin failed to load")
    p.set_defaults(func=_cmd_plugins)
    return run_command(p, argv)


def bench_main(argv: Sequence[str]) -> int:
    """``backline bench``."""
    from ._bench.config import HelpFormatter as BenchHelpFormatter, add_arguments as add_bench_options

    b = _parser("bench", "Round-trip benchmark; prints framework/floor ratios.", formatter_class=BenchHelpFormatter)
    add_bench_options(b)  # one per field of BenchConfig, its defaults
    b.add_argument("--json", metavar="FILE", help="write the statistics as JSON (checked writable before the run)")
    b.add_argument("--plot", metavar="FILE.png", help="draw the time series and CCDF (needs matplotlib)")
    b.set_defaults(func=_cmd_bench)
    return run_command(b, argv)


def coprocessor_main(argv: Sequence[str]) -> int:
    """``backline coprocessor serve``."""
    from ._abi import lib

    c = _parser("coprocessor", "Coprocessor processes.")
    csub = c.add_subparsers(dest="coprocessor_command", required=True)
    s = csub.add_parser("serve", help="serve a coprocessor session until SIGTERM/SIGINT/SIGHUP")
    s.add_argument("--key", required=True, help="session key the controller pairs on")
    s.add_argument("--fn", action="append", required=True,
                   help="decoder name or module:function, optionally @id,id to choose the decoder_ids "
                        f"(0 to {lib.BL_MAX_DECODERS - 1}; default: those it declares), or a native "
                        "CoprocessorFunction as JSON, or @FILE holding either; repeatable")
    s.add_argument("--transport", default="memcpy")
    s.add_argument("--hardware", default="cpu")
    s.add_argument("--config", default="", help="the transport's configuration, k=v;k=v")
    s.add_argument("--duration", type=_seconds, default=None, help="stop after this many seconds")
    s.add_argument("--parent-pid", type=parent_pid, default=None,
                   help="exit when this process exits (deploy and bench pass their own pid)")
    s.set_defaults(func=_cmd_serve)
    return run_command(c, argv)


def executor_main(argv: Sequence[str]) -> int:
    """``backline executor [--kind NAME] ARGS``: ARGS go to the executor plugin's own command line."""
    try:
        return _cmd_executor(list(argv))
    except (BacklineError, OSError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return 2


def _usage(commands: Sequence[Any]) -> str:
    width = max((len(c.name) for c in commands), default=0)
    rows = "\n".join(f"  {c.name:<{width}}  {one_line(c.summary)}" for c in commands)
    return (f"usage: backline COMMAND [ARGS]  (backline COMMAND --help)\n\n"
            f"Backline: real-time QEC rounds between a controller and coprocessors.\n\ncommands:\n{rows}\n")


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the parsed ``func(args)``: a plugin command's ``main`` with this command
    line's conventions (a usage error or a failure is one line and status 2; Ctrl-C is 130)."""
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # --help (0), or a usage error already reported in one line (2)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    try:
        return int(args.func(args))
    except (BacklineError, ValueError, OSError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return 2
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``backline COMMAND ARGS``: the command record named COMMAND runs with ARGS."""
    from . import _plugins as plugins

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        names = list(plugins.names("command"))
        if not argv:
            _fail(f"give a command: {', '.join(names)} (see backline --help)")
            return 2
        if argv[0] in ("-h", "--help"):
            print(_usage([plugins.get("command", n) for n in names]), end="")
            return 0
        if argv[0] not in names:
            _fail(f"argument command: invalid choice: {argv[0]!r} (choose from {', '.join(map(repr, names))}; "
                  "a plugin adds the others, backline plugins lists what is installed) (see backline --help)")
            return 2
        return int(plugins.get("command", argv[0]).load()(argv[1:]))
    except (BacklineError, ValueError, OSError) as exc:
        # What a user can fix (a value, a file, a plugin) is one line; an exception of any
        # other type is a bug and keeps its traceback.
        _fail(str(exc) or type(exc).__name__)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
