"""cffi (ABI mode) access to libbackline_qec.so, declared from its header stream.h."""

from __future__ import annotations

import os

from cffi import FFI

from backline_core.sdk import cdef_from_header

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libbackline_qec.so")

ffi = FFI()
with open(os.path.join(HERE, "native", "stream.h")) as _fh:
    ffi.cdef(cdef_from_header(_fh.read()))

try:
    lib = ffi.dlopen(LIBRARY)
except OSError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(f"the streaming engine is not built ({exc}); reinstall backline-qec "
                      "(pip install --no-build-isolation, with backline-core installed first)") from exc


def last_error() -> str:
    return ffi.string(lib.qs_last_error()).decode(errors="replace")
