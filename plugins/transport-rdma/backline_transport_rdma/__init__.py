"""Backline's RoCE v2 transport over libibverbs (``transport="rdma"``)."""

import os


def get_library() -> str:
    """Path of the backend shared library (exports ``backline_transport_backend_v1``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_transport_rdma.so")
