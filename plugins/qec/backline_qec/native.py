"""cffi (ABI mode) access to libbackline_qec.so, the streaming engine and loop, declared from its header stream.h."""

from __future__ import annotations

import os

from backline_core.sdk import open_library

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libbackline_qec.so")

ffi, lib = open_library(LIBRARY, os.path.join(HERE, "native", "stream.h"), "backline-qec")


def last_error() -> str:
    return ffi.string(lib.qs_last_error()).decode(errors="replace")
