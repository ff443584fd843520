"""cffi (ABI mode) access to libbackline_qec.so -- the streaming engine and loop (stream.h), CUDA-Q's
session and server loop (cuqr_session.h) -- and CUDA-Q's RPC numbers from the core's cuqr.h."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from typing import Any

from cffi import FFI

from backline_core import BoundFunction, CoprocessorFunction, get_include
from backline_core.sdk import cdef_from_header

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libbackline_qec.so")
#: the one source of CUDA-Q's RPC numbers (magics, function ids, sizes, statuses)
CUQR_HEADER = os.path.join(get_include(), "backline", "sdk", "cuqr.h")

ffi = FFI()
for _header in (CUQR_HEADER, os.path.join(HERE, "native", "stream.h"), os.path.join(HERE, "native", "cuqr_session.h")):
    with open(_header) as _fh:
        ffi.cdef(cdef_from_header(_fh.read()))
try:
    lib: Any = ffi.dlopen(LIBRARY)
except OSError as exc:  # only on a broken install
    raise ImportError(f"libbackline_qec.so is not built ({exc}); reinstall backline-qec "
                      "(pip install --no-build-isolation, with backline-core installed first)") from exc


def last_error() -> str:
    return ffi.string(lib.qs_last_error()).decode(errors="replace")


def cq_last_error() -> str:
    return ffi.string(lib.cq_last_error()).decode(errors="replace")


def describe(functions: Sequence[CoprocessorFunction]) -> bytes:
    """bind.h's list of inner functions: u32 count, then each one's library, symbol, init and fini
    symbols and context (u32 length + bytes each), for a native init to dlopen and build them."""
    def field(data: bytes) -> bytes:
        return struct.pack("<I", len(data)) + data

    parts = [struct.pack("<I", len(functions))]
    for f in functions:
        parts += [field(str(f.library).encode()), field(str(f.symbol).encode()),
                  field((f.init_symbol or "").encode()), field((f.fini_symbol or "").encode()), field(f.context)]
    return b"".join(parts)


def native_context(head: bytes, functions: Sequence[CoprocessorFunction]) -> bytes:
    """A native init's context: u32 length | ``head`` (the plan or spec) padded to 4 bytes | :func:`describe`."""
    return struct.pack("<I", len(head)) + head + bytes(-len(head) % 4) + describe(functions)


def python_context(head: bytes, functions: Sequence[CoprocessorFunction]) -> bytes:
    """A ``python_init``'s context: u32 length | ``head`` | the functions' descriptions as JSON."""
    described = json.dumps([f.to_dict() for f in functions], separators=(",", ":")).encode()
    return struct.pack("<I", len(head)) + head + described


def split_python_context(context: bytes) -> tuple[bytes, list[CoprocessorFunction]]:
    """(head, functions) of :func:`python_context`."""
    (n,) = struct.unpack_from("<I", context)
    return context[4:4 + n], [CoprocessorFunction.from_dict(d) for d in json.loads(context[4 + n:])]


class Bound:
    """Inner functions bound in this process, as the arrays of (fn, ctx) a ``*_create`` takes."""

    def __init__(self, functions: Sequence[CoprocessorFunction]) -> None:
        from backline_core.sdk import ffi as core_ffi  # the bound functions' pointers are the core's cdata

        self.bound: list[BoundFunction] = []
        try:
            for f in functions:
                self.bound.append(BoundFunction(f))
        except BaseException:
            self.close()
            raise
        self.fns = ffi.new("qs_fn[]", [ffi.cast("qs_fn", int(core_ffi.cast("uintptr_t", b.fn))) for b in self.bound])
        self.ctxs = ffi.new("void *[]", [ffi.cast("void *", int(core_ffi.cast("uintptr_t", b.ctx)))
                                         for b in self.bound])

    def close(self) -> None:
        bound, self.bound = self.bound, []
        for b in bound:
            b.close()
