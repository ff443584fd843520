"""Backline's transport over UCX active messages (``transport="ucx"``)."""

import os


def get_library() -> str:
    """Path of the backend shared library (exports ``backline_transport_backend_v1``).

    UCX logs to stdout unless told otherwise, and reads where when libucs loads: this sets
    ``UCX_LOG_FILE=stderr`` (unless set) before anyone loads it, so that a program's stdout
    (and `coprocessor serve`'s or a floor responder's ready line) stays the program's."""
    os.environ.setdefault("UCX_LOG_FILE", "stderr")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_transport_ucx.so")
