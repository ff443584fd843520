"""Entry points of the rdma transport: what it serves, where its backend is, and `backline rdma`."""

from __future__ import annotations

from typing import Any

from backline_core import Command, Transport, hookimpl
from backline_core.sdk import REMOTE_INIT_ARGS

from . import get_library


def _library(hardware: str, role: str) -> str:
    return get_library()


def _bench_floor(cfg: Any, init_args: dict[str, Any]) -> Any:
    from .floor import bench_floor

    return bench_floor(cfg, init_args)


def _command() -> Any:
    from .cli import main

    return main


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="rdma",
            summary="RoCE v2 over libibverbs: RDMA WRITEs into the peer's ring, nodes in other processes or on other hosts",
            serves=(("cpu", "controller"), ("cpu", "coprocessor")),
            runs_in=("process", "executor"),
            library=_library,
            needs_endpoint=True,
            idle="spins",
            bench_floor=_bench_floor,
            init_args={
                "device": "RDMA device name (default: the first with an active port; `backline rdma devices`)",
                "ib_port": "port of the device, from 1 (default: its first active port)",
                "gid_index": "GID index to send from (default: the first RoCE v2 GID with an IPv4-mapped address, "
                             "else the first RoCE v2 GID)",
                **REMOTE_INIT_ARGS,
            },
        )
    ]


@hookimpl
def backline_commands() -> list[Command]:
    return [Command(name="rdma", summary="RDMA devices, ports and GIDs (backline rdma devices)", load=_command)]
