"""Backline's RoCE v2 transport over libibverbs (``transport="rdma"``)."""

import os


def get_library() -> str:
    """Path of the backend shared library (exports ``backline_transport_backend_v1``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_transport_rdma.so")


def verbs_include() -> str:
    """The folder of ``verbs.h``, the rdma transport's verbs set-up API (device, GID, memory, queue
    pairs, the handshake's peer record), for another package's C build; its version is
    ``BL_VERBS_API_VERSION`` in that header, which a user checks at compile time."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")


def verbs_sources() -> list[str]:
    """Absolute paths of the C sources that implement ``verbs.h``, for another package to compile into
    its own library (``plain_library(..., external_sources=verbs_sources())``)."""
    return [os.path.join(verbs_include(), "verbs.c")]
