"""Tests that need a verbs device: they skip without one, and fail instead under BACKLINE_REQUIRE_RDMA=1.

The Soft-RoCE guest (``plugins/transport-rdma/guest/run-in-guest``) has one; CI runs this
directory there with BACKLINE_REQUIRE_RDMA=1, so a guest that lost its device fails the run.
"""

from __future__ import annotations

import ctypes
import os

import pytest


def verbs_devices() -> list[str]:
    """Names libibverbs lists (empty when it or the kernel has none)."""
    try:
        lib = ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return []
    lib.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    lib.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
    lib.ibv_get_device_name.restype = ctypes.c_char_p
    count = ctypes.c_int(0)
    devices = lib.ibv_get_device_list(ctypes.byref(count))
    if not devices:
        return []
    try:
        return [lib.ibv_get_device_name(devices[i]).decode() for i in range(count.value)]
    finally:
        lib.ibv_free_device_list(devices)


@pytest.fixture(scope="session")
def rdma_device() -> str:
    """The first verbs device's name; skips (or, under BACKLINE_REQUIRE_RDMA=1, fails) without one."""
    names = verbs_devices()
    if not names:
        message = ("no RDMA device here (libibverbs lists none); run these in the Soft-RoCE guest: "
                   "plugins/transport-rdma/guest/run-in-guest '.venv/bin/python -m pytest plugins/transport-rdma/tests/guest'")
        if os.environ.get("BACKLINE_REQUIRE_RDMA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return names[0]
