"""The executor-side code of an executor-run coprocessor, as an object file, for deploy.

``backline_core.deploy`` starts a coprocessor whose resolved ``runs_in`` is ``"executor"``
through its executor plugin, which ships this object to the executor and launches its
functions. The object is made by the compiler's own pass code -- the target module of
:func:`~backline_compiler.passes.inject_transport_session.executor_target_module`, lowered
by ``convert-transport-to-llvm`` and compiled by ``cross-compile-targets`` -- so deploy and
compiled programs run one generator of that code.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.exceptions import PassFailedException

from backline_core import PlacementError, ResolvedNode

from . import pipeline
from .passes.convert_transport_to_llvm import ConvertTransportToLLVM
from .passes.cross_compile_targets import OBJECT_FILE_ATTR, CrossCompileTargets
from .passes.inject_transport_session import executor_symbols, executor_target_module


def coprocessor_object(node: ResolvedNode, *, in_bytes: int, out_bytes: int,
                       workspace: str) -> tuple[str, dict[str, str]]:
    """Compile ``node``'s executor-side code into ``workspace``; (object path, symbols).

    The symbols are ``{"up": ..., "serve": ..., "stop": ...}``, each an ``int32_t fn(void)``
    returning a ``bl_status``: ``up`` brings the coprocessor's session up (launch it, and wait
    for it, before the controller connects); ``serve`` parks until the session is stopped
    (launch it asynchronously; await it after ``stop``); ``stop`` stops and destroys the
    session, after the controller's is gone. The object is for the
    triple in ``node.executor_options`` (default: this machine's). ``in_bytes``/``out_bytes``
    are the pair's message sizes; the controller sets them, so they are checked here but do
    not change the coprocessor's code.
    """
    for what, value in (("in_bytes", in_bytes), ("out_bytes", out_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise PlacementError(f"coprocessor_object: {what} must be a positive int, got {value!r}")
    try:
        module = pipeline.run(ModuleOp([executor_target_module(node)]),
                              [ConvertTransportToLLVM(), CrossCompileTargets(workspace=workspace)])
    except PassFailedException as exc:  # a node the compiler cannot build code for: say so as deploy does
        raise PlacementError(f"coprocessor {node.name!r}: its executor code: {exc}") from None
    (target,) = [op for op in module.ops if isinstance(op, ModuleOp)]
    path = target.attributes[OBJECT_FILE_ATTR]
    assert isinstance(path, StringAttr)
    return path.data, executor_symbols(node.name)
