"""Entry point of the ``orc`` executor (group ``backline.executors``)."""

from __future__ import annotations

import importlib

from backline_core import Executor, hookimpl


@hookimpl
def backline_executors() -> list[Executor]:
    """The ``orc`` executor; its implementation is imported on first use."""
    return [
        Executor(
            name="orc",
            summary="runs shipped object files in an llvmlite ORC JIT, in a process per authenticated session",
            load=lambda: importlib.import_module("backline_executor_orc.api"),
        )
    ]
