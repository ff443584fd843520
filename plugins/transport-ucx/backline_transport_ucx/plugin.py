"""Entry point of the ucx transport: what it serves and where its backend is."""

from __future__ import annotations

import os
from typing import Any

from backline_core import Transport, TransportError, hookimpl
from backline_core.sdk import REMOTE_INIT_ARGS

from . import get_library


def _library(hardware: str, role: str) -> str:
    path = get_library()
    if not os.path.isfile(path):
        raise TransportError("the ucx transport has no backend: libucp's headers were missing when "
                             "backline-transport-ucx was installed; apt-get install libucx-dev, then reinstall it "
                             "(pip install --no-build-isolation plugins/transport-ucx)")
    return path


def _bench_floor(cfg: Any, init_args: dict[str, Any]) -> Any:
    from .floor import bench_floor

    return bench_floor(cfg, init_args)


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="ucx",
            summary="UCX active messages (libucp) over shared memory or TCP: nodes in other processes or on other hosts",
            serves=(("cpu", "controller"), ("cpu", "coprocessor")),
            runs_in=("process", "executor"),
            library=_library,
            needs_endpoint=True,
            idle="spins",
            bench_floor=_bench_floor,
            init_args={
                "tls": "UCX transports: shm (posix, sysv), tcp, or auto (UCX's own choice, the default); both sides "
                       "need one in common",
                **REMOTE_INIT_ARGS,
            },
        )
    ]
