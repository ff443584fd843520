"""The compiler's object builder record: what an executor plugin calls to get a coprocessor's
object (see :class:`backline_core.ObjectBuilder`). Loading the record imports nothing heavy;
``load()`` imports the code generator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backline_core import ObjectBuilder, hookimpl


def _coprocessor_object() -> Callable[..., tuple[str, dict[str, str]]]:
    from .executor_objects import coprocessor_object

    return coprocessor_object


@hookimpl
def backline_builders() -> list[Any]:
    return [ObjectBuilder(name="coprocessor-object", load=_coprocessor_object,
                          summary="a coprocessor's executor-side code as a relocatable object (xDSL, llvmlite)")]
