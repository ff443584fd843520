"""Backline's transport over UCX active messages (``transport="ucx"``)."""

import os


def get_library() -> str:
    """Path of the backend shared library (exports ``backline_transport_backend_v1``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_transport_ucx.so")
