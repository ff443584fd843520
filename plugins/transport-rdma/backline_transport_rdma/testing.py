"""For tests that need a verbs device (this plugin's and those built on it, such as the FPGA controller's).

They skip without one, and fail instead under ``BACKLINE_REQUIRE_RDMA=1``: the Soft-RoCE guest
(``guest/run-in-guest``) has one, and CI runs such tests there with that set, so a guest that
lost its device fails the run.
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


def require_device(tests: str) -> str:
    """The first verbs device's name; skips the test (fails it under BACKLINE_REQUIRE_RDMA=1) without one.

    ``tests``: the folder of the tests, for the message saying how to run them in the guest.
    """
    names = verbs_devices()
    if not names:
        message = ("no RDMA device here (libibverbs lists none); run these in the Soft-RoCE guest: "
                   f"plugins/transport-rdma/guest/run-in-guest '.venv/bin/python -m pytest {tests}'")
        if os.environ.get("BACKLINE_REQUIRE_RDMA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return names[0]
