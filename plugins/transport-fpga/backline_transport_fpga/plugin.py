"""Entry points of the FPGA controller: its part of the transport `rdma`, its bench, and `backline fpga`."""

from __future__ import annotations

from typing import Any

from backline_core import Command, Transport, hookimpl
from backline_core.sdk import REMOTE_INIT_ARGS

from . import get_library


def _library(hardware: str, role: str) -> str:
    return get_library()


def _controller_bench(cfg: Any, **kwargs: Any) -> Any:
    from .bench import run

    return run(cfg, **kwargs)


def _command() -> Any:
    from .cli import main

    return main


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="rdma",
            summary="an FPGA controller: the HWHS engine and ERNIC driven through their register window "
                    "(here the engine model's, over Soft-RoCE); coprocessors are backline-transport-rdma's",
            serves=(("fpga", "controller"),),
            runs_in=("process", "executor"),
            library=_library,
            needs_endpoint=True,
            idle="spins",
            controller_bench=_controller_bench,
            init_args={
                "window": "the engine's register window: the engine model's file (`backline fpga model --window "
                          "PATH`; default that of `backline fpga model`)",
                "qp": "ERNIC queue pair number, 1-8 (default 1)",
                **REMOTE_INIT_ARGS,
            },
        )
    ]


@hookimpl
def backline_commands() -> list[Command]:
    return [Command(name="fpga", summary="the HWHS engine model and its registers (backline fpga model|status)",
                    load=_command)]
