"""cffi (ABI mode) access to libbackline_bpod.so, the native decoder, declared from its header bpod.h."""

from __future__ import annotations

import os

from cffi import FFI

from backline_core.sdk import cdef_from_header

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_bpod.so")
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "bpod.h")

ffi = FFI()
with open(HEADER) as _fh:
    ffi.cdef(cdef_from_header(_fh.read()))

try:
    lib = ffi.dlopen(LIBRARY)
except OSError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"the native BP+OSD decoder is not built ({exc}); reinstall backline-decoder-bpod "
        "(pip install --no-build-isolation, with backline-core installed first)"
    ) from exc


def last_error() -> str:
    return ffi.string(lib.bpod_last_error()).decode(errors="replace")
