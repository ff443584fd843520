"""Backline's xDSL dialects: ``transport``, ``executor``, ``bqec`` and ``bquantum``.

:data:`DIALECT_CLASSES` is the one table of them (the xDSL universe lists it too); a
dialect's module is imported when the dialect is first used.

>>> from xdsl.context import Context
>>> from backline_compiler.dialects import load_all
>>> ctx = load_all(Context())
>>> ctx.get_optional_op("transport.stage_payload").name
'transport.stage_payload'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from xdsl.context import Context
from xdsl.ir import Dialect

#: dialect name -> (module under backline_compiler.dialects, the Dialect object's name there)
DIALECT_CLASSES: dict[str, tuple[str, str]] = {
    "transport": ("transport", "Transport"),
    "executor": ("executor", "Executor"),
    "bqec": ("bqec", "BQEC"),
    "bquantum": ("bquantum", "BQuantum"),
}

__all__ = ["BQEC", "BQUANTUM", "DIALECTS", "DIALECT_CLASSES", "EXECUTOR", "TRANSPORT", "load_all", "loaders"]


def _load(name: str) -> Dialect:
    module, attr = DIALECT_CLASSES[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)


def loaders() -> dict[str, Callable[[], Dialect]]:
    """Dialect name -> a function importing it (what ``Context.register_dialect`` takes)."""
    return {name: (lambda name=name: _load(name)) for name in DIALECT_CLASSES}


def load_all(ctx: Context) -> Context:
    """Register the dialects in ``ctx`` (skipping any already there; each loads on first use); returns ``ctx``."""
    for name, load in loaders().items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, load)
    return ctx


def __getattr__(name: str) -> Any:
    if name == "DIALECTS":
        return tuple(_load(n) for n in DIALECT_CLASSES)
    if name in ("TRANSPORT", "EXECUTOR", "BQEC", "BQUANTUM"):
        return _load(name.lower())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
