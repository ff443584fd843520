"""Entry point of the memcpy transport: what it serves and where its backend is."""

from __future__ import annotations

from backline_core import Transport, hookimpl

from . import get_library

LOCALITIES = ("inline", "thread", "process")


def _library(hardware: str, role: str) -> str:
    return get_library()


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="memcpy",
            summary="shared memory on one machine: in the controller's thread, on a poller thread, or in another process",
            serves=(("cpu", "controller"), ("cpu", "coprocessor")),
            localities=LOCALITIES,
            library=_library,
            init_args={
                "locality": "coprocessor: inline (run in the controller's thread at post), thread (poller thread, "
                            "default) or process (another OS process over POSIX shared memory); a controller finds "
                            "its coprocessor by key and may state the locality it expects",
                "cpu": "coprocessor: pin the poller thread to this CPU",
            },
        )
    ]
