"""cffi (ABI mode) access to libbackline_bpod.so, the native decoder, declared from its header bpod.h."""

from __future__ import annotations

import os

from backline_core.sdk import open_library

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libbackline_bpod.so")

ffi, lib = open_library(LIBRARY, os.path.join(HERE, "native", "bpod.h"), "backline-decoder-bpod")


def last_error() -> str:
    return ffi.string(lib.bpod_last_error()).decode(errors="replace")
