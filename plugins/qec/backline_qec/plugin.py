"""Entry points: the ``backline qec`` command (``backline qec stream``) and ``backline decoding-server``."""

from __future__ import annotations

from typing import Any

from backline_core import Command, hookimpl


def _command() -> Any:
    from .cli import main

    return main


def _decoding_server() -> Any:
    from .cudaq.cli import main

    return main


@hookimpl
def backline_commands() -> list[Command]:
    return [Command(name="qec", summary="QEC workloads: stream a circuit's rounds to a decoder (backline qec stream)",
                    load=_command),
            Command(name="decoding-server", summary="CUDA-Q QEC's decoding server over UDP, decoders on placements "
                                                    "(backline decoding-server --help)", load=_decoding_server)]
