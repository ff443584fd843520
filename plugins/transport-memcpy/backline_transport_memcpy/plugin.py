"""Entry point of the memcpy transport: what it serves and where its backend is."""

from __future__ import annotations

from backline_core import Transport, hookimpl

from . import get_library


def _library(hardware: str, role: str) -> str:
    return get_library()


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="memcpy",
            summary="shared memory on one machine: in the controller's thread, on a poller thread, in another process or in a local executor",
            serves=(("cpu", "controller"), ("cpu", "coprocessor")),
            runs_in=("thread", "controller-thread", "process", "executor"),
            library=_library,
            init_args={"cpu": "coprocessor running in a thread or a process: pin its poller thread to this CPU"},
        )
    ]
