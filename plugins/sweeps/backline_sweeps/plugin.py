"""Entry point: the ``backline collect`` command."""

from __future__ import annotations

from typing import Any

from backline_core import Command, hookimpl


def _command() -> Any:
    from .cli import main

    return main


@hookimpl
def backline_commands() -> list[Command]:
    return [Command(name="collect", summary="threshold sweeps on Dask distributed, rows mergeable with sinter's "
                                            "(backline collect --help)", load=_command)]
