"""Backline compiler: the PennyLane frontend, xDSL dialects and passes, llvmlite code generation.

The frontend (:class:`Backline`, :func:`qjit`, :func:`decode`, :func:`runtime_declare`,
:func:`runtime_call`) loads on first use: it needs PennyLane and jax (the ``frontend`` extra);
the passes and code generation do not.
"""

from __future__ import annotations

from typing import Any

from backline_core import Controller, Coprocessor, CoprocessorFunction, Endpoint, Placement

_FRONTEND = ("Backline", "CaptureError", "DecodeError", "QJIT", "RuntimeFunction", "SignatureError", "decode",
             "qjit", "runtime_call", "runtime_declare")

__all__ = ["Controller", "Coprocessor", "CoprocessorFunction", "Endpoint", "Placement", *_FRONTEND]


def __getattr__(name: str) -> Any:
    if name in _FRONTEND:
        from . import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'backline_compiler' has no attribute {name!r}")
