"""cffi (ABI mode) access to libbackline_lut.so, the native decoder, declared from its header lut.h."""

from __future__ import annotations

import os

from backline_core.sdk import open_library

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libbackline_lut.so")

ffi, lib = open_library(LIBRARY, os.path.join(HERE, "native", "lut.h"), "backline-decoder-lut")


def last_error() -> str:
    return ffi.string(lib.lut_last_error()).decode(errors="replace")
