"""Parse IR, and run pass pipelines named by an explicit spec.

Passes are found only through the ``backline.passes`` entry-point group (the compiler's
own passes register there too); their order comes from the spec, never from
registration. ``keep_intermediate`` writes the module after every pass.

>>> from backline_compiler.pipeline import available_passes
>>> "convert-transport-to-llvm" in available_passes()
True
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, llvm, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer

from backline_core import plugins


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
    import io

    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue().rstrip("\n") + "\n"


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> loader, for every pass an installed plugin registers.

    Only ``backline.passes`` plugins are loaded (``plugins.names("pass")``); a pass's class
    is imported when its loader is called, i.e. when a pipeline uses it."""
    return {name: functools.partial(_load_pass, name) for name in plugins.names("pass")}


def _load_pass(name: str) -> type[ModulePass]:
    return plugins.get("pass", name).load()


def pipeline(spec: str, callback: Callable[[ModulePass | None, ModuleOp, ModulePass | None], None] | None = None
             ) -> PassPipeline:
    """A PassPipeline from ``spec`` ("a,b{opt=1},c"); unknown names list what exists."""
    passes = available_passes()
    try:
        return PassPipeline.parse_spec(passes, spec, callback)
    except ValueError as exc:
        raise ValueError(f"{exc}; installed passes: {', '.join(sorted(passes))}") from None


def run(module: ModuleOp, spec: str, *, ctx: Context | None = None, keep_intermediate: str | None = None) -> ModuleOp:
    """Apply the pipeline ``spec`` to ``module`` in place and verify after every pass.

    With ``keep_intermediate`` (a folder), write ``00-input.mlir``, ``01-<pass>.mlir``, ...
    """
    step = 0

    def after(prev: ModulePass | None, op: ModuleOp, _next: ModulePass | None) -> None:
        nonlocal step
        if prev is not None:
            op.verify()
        if keep_intermediate:
            os.makedirs(keep_intermediate, exist_ok=True)
            name = "input" if prev is None else prev.name
            with open(os.path.join(keep_intermediate, f"{step:02d}-{name}.mlir"), "w") as fh:
                fh.write(print_module(op))
        step += 1

    pipeline(spec, after).apply(ctx or context(), module)
    return module
