"""Entry point of the cuqr transport: what it serves and where its backend is."""

from __future__ import annotations

from backline_core import Transport, hookimpl

from . import get_library


def _library(hardware: str, role: str) -> str:
    return get_library()


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="cuqr",
            summary="a controller of a CUDA-Q-style decoding server (CUQR over UDP) that Backline does not run: "
                    "reach it with connect_controller",
            # the coprocessor is the server, which no Backline backend serves: controller only
            serves=(("cpu", "controller"),),
            runs_in=("process",),
            needs_endpoint=True,
            library=_library,
            init_args={
                "decoder_id": "the server's decoder every round goes to, 0-31 (default: each round's own decoder_id)",
                "num_syndromes": "bits each enqueue_syndromes carries (default: the round's payload bytes x 8)",
                "return_size": "observable flips get_corrections asks for: the server decoder's observable count "
                               "(required)",
                "slot_size": "bytes of one message, as the server's --slot-size (default 256, CUDA-Q's)",
            },
        )
    ]
