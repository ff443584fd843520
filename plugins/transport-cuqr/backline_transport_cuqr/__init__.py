"""Backline's cuqr transport (``transport="cuqr"``): a controller whose coprocessor is a decoding
server speaking CUDA-Q QEC's real-time decoding RPC over UDP (docs/transport-cuqr.md)."""

import os


def get_library() -> str:
    """Path of the backend shared library (exports ``backline_transport_backend_v1``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_transport_cuqr.so")
