"""cffi (ABI mode) access to libbackline_lut.so, the native decoder, declared from its header lut.h."""

from __future__ import annotations

import os

from cffi import FFI

from backline_core.sdk import cdef_from_header

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_lut.so")
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "lut.h")

ffi = FFI()
with open(HEADER) as _fh:
    ffi.cdef(cdef_from_header(_fh.read()))

try:
    lib = ffi.dlopen(LIBRARY)
except OSError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"the native lookup-table decoder is not built ({exc}); reinstall backline-decoder-lut "
        "(pip install --no-build-isolation, with backline-core installed first)"
    ) from exc


def last_error() -> str:
    return ffi.string(lib.lut_last_error()).decode(errors="replace")
