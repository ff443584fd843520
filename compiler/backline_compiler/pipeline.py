"""Parse and print IR, and run pipelines of pass instances.

A pipeline is a sequence of ``ModulePass`` instances, run in that order (never in
registration order). A pass is found by name through the ``backline.passes`` plugins (the
compiler's own passes register there too): :func:`pass_class` loads its class,
:func:`make` builds an instance from options given as the class's dataclass fields, and
:func:`from_spec` reads ``backline-opt``'s text form (``"a,b{opt=1}"``). An unknown name
raises the core's ``UnknownPluginError``, which lists the installed passes.

>>> from backline_compiler import pipeline
>>> [p.name for p in pipeline.from_spec("inject-transport-session{in-bytes=4},convert-transport-to-llvm")]
['inject-transport-session', 'convert-transport-to-llvm']
>>> pipeline.make("inject-transport-session", in_bytes=4) == pipeline.from_spec("inject-transport-session{in-bytes=4}")[0]
True
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, llvm, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

from backline_core import PluginError, plugins


def context() -> Context:
    """A context with the upstream dialects our IR uses and Backline's own."""
    from .dialects import load_all

    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, llvm.LLVM, memref.MemRef, scf.Scf):
        ctx.load_dialect(dialect)
    load_all(ctx)
    return ctx


def parse(text: str, ctx: Context | None = None) -> ModuleOp:
    """Parse and verify a module."""
    module = Parser(ctx or context(), text).parse_module()
    module.verify()
    return module


def print_module(module: ModuleOp, *, generic: bool = False) -> str:
    """The module's text, ending in one newline."""
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue().rstrip("\n") + "\n"


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> loader, for every pass an installed plugin registers.

    Only ``backline.passes`` plugins are loaded (``plugins.names("pass")``); a pass's class
    is imported when its loader is called, i.e. when a pipeline uses it."""
    return {name: functools.partial(pass_class, name) for name in plugins.names("pass")}


def pass_class(name: str) -> type[ModulePass]:
    """The class of the installed pass ``name`` (``UnknownPluginError`` if none is).

    The record's ``load()`` must return a ``ModulePass`` subclass whose ``name`` is the record's.
    """
    cls = plugins.get("pass", name).load()
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise PluginError(f"pass {name!r}: its record's load() returned {cls!r}; it must return a "
                          "ModulePass subclass")
    if getattr(cls, "name", None) != name:
        raise PluginError(f"pass {name!r}: its class {cls.__qualname__} is named {getattr(cls, 'name', None)!r}; "
                          f"set name = {name!r} on the class, the name its record registers")
    return cls


def make(name: str, **options: Any) -> ModulePass:
    """An instance of the pass ``name``; ``options`` are its dataclass fields (``in_bytes=8``)."""
    cls = pass_class(name)
    known = [f.name for f in dataclasses.fields(cls) if f.init] if dataclasses.is_dataclass(cls) else []
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"pass {name!r} has no options {unknown}; its options: {', '.join(known) or 'none'}")
    return cls(**options)


def from_spec(spec: str) -> list[ModulePass]:
    """The passes of a ``backline-opt -p`` spec, e.g. ``'a,b{opt=1 other="text"}'`` (ValueError if malformed)."""
    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as exc:  # a BaseException in xDSL: say what and where as a ValueError
        raise ValueError(f"pass pipeline {spec!r}: {exc.args[0] if exc.args else exc}") from None
    passes = []
    for item in specs:
        cls = pass_class(item.name)
        try:
            passes.append(cls.from_pass_spec(item))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"pass {item.name!r}: {exc}") from None
    return passes


def run(module: ModuleOp, passes: Sequence[ModulePass], *, ctx: Context | None = None,
        keep_intermediate: str | None = None) -> ModuleOp:
    """Apply ``passes`` to ``module`` in place, in order, and verify after every pass.

    With ``keep_intermediate`` (a folder), write ``00-input.mlir``, ``01-<pass>.mlir``, ...
    """
    if isinstance(passes, str) or not all(isinstance(p, ModulePass) for p in passes):
        raise TypeError(f"run() takes a sequence of ModulePass instances, got {passes!r}; build them with "
                        "pipeline.make(name, **options), or pipeline.from_spec(text) for a backline-opt spec")
    return run_pipeline(module, PassPipeline(tuple(passes), intermediate_writer(keep_intermediate)), ctx=ctx)


def intermediate_writer(folder: str | None, *, verify: bool = True
                        ) -> Callable[[ModulePass | None, ModuleOp, ModulePass | None], None]:
    """A ``PassPipeline`` callback that verifies after every pass and, with ``folder``, writes the IR there."""
    step = 0

    def after(prev: ModulePass | None, op: ModuleOp, _next: ModulePass | None) -> None:
        nonlocal step
        if verify and prev is not None:
            op.verify()
        if folder:
            os.makedirs(folder, exist_ok=True)
            name = "input" if prev is None else prev.name
            with open(os.path.join(folder, f"{step:02d}-{name}.mlir"), "w") as fh:
                fh.write(print_module(op))
        step += 1

    return after


def run_pipeline(module: ModuleOp, pipe: PassPipeline, *, ctx: Context | None = None) -> ModuleOp:
    """Apply a built ``PassPipeline`` (its callback runs after each pass) to ``module``."""
    pipe.apply(ctx or context(), module)
    return module
