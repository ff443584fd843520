"""Backline compiler: the PennyLane frontend, xDSL dialects and passes, llvmlite code generation.

The frontend (:class:`Backline`, :func:`qjit`, :func:`decode`, :func:`runtime_declare`,
:func:`runtime_call`) loads on first use: it needs PennyLane and jax (the ``frontend`` extra);
the passes and code generation do not. The placement names are the core's.
"""

from __future__ import annotations

from typing import Any

_CORE = ("Controller", "Coprocessor", "CoprocessorFunction", "Endpoint", "Placement")
_FRONTEND = ("Backline", "CaptureError", "DecodeError", "QJIT", "RuntimeFunction", "SignatureError", "decode",
             "qjit", "runtime_call", "runtime_declare")

__all__ = [
    "QJIT",
    "Backline",
    "CaptureError",
    "Controller",
    "Coprocessor",
    "CoprocessorFunction",
    "DecodeError",
    "Endpoint",
    "Placement",
    "RuntimeFunction",
    "SignatureError",
    "decode",
    "qjit",
    "runtime_call",
    "runtime_declare",
]


def __getattr__(name: str) -> Any:
    # Lazy, so that xDSL tools loading the universe (backline_compiler.universe) do not import the core.
    if name in _CORE:
        import backline_core

        return getattr(backline_core, name)
    if name in _FRONTEND:
        from . import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'backline_compiler' has no attribute {name!r}")
