"""The compiler's ``backline`` commands: ``backline demo NAME`` and ``backline opt`` (the same
program as ``backline-opt``). Loading the records imports neither xDSL nor PennyLane."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backline_core import Command, hookimpl


def _demo() -> Callable[[list[str]], int]:
    from .demos import main

    return main


def _opt() -> Callable[[list[str]], int]:
    from .opt import main

    return main


@hookimpl
def backline_commands() -> list[Any]:
    return [
        Command(name="demo", summary="run a demonstration: ghz, the paper's Listing 3 (backline demo ghz --help)",
                load=_demo),
        Command(name="opt", summary="the compiler's opt: parse, run passes, print (also backline-opt)", load=_opt),
    ]
