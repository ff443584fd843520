"""Backline's xDSL dialects: ``transport``, ``executor``, ``bqec`` and ``bquantum``.

>>> from xdsl.context import Context
>>> from backline_compiler.dialects import load_all
>>> ctx = load_all(Context())
>>> ctx.get_optional_op("transport.stage_payload").name
'transport.stage_payload'
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.ir import Dialect

from .bqec import BQEC
from .bquantum import BQuantum as BQUANTUM
from .executor import Executor as EXECUTOR
from .transport import Transport as TRANSPORT

DIALECTS: tuple[Dialect, ...] = (TRANSPORT, EXECUTOR, BQEC, BQUANTUM)

__all__ = ["BQEC", "BQUANTUM", "DIALECTS", "EXECUTOR", "TRANSPORT", "load_all"]


def load_all(ctx: Context) -> Context:
    """Register the dialects in ``ctx`` (skipping any already there); returns ``ctx``."""
    for dialect in DIALECTS:
        if dialect.name not in ctx.registered_dialect_names:
            ctx.load_dialect(dialect)
    return ctx
