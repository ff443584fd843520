"""The C side as Python sees it: hwhs.h's numbers and fpga.h's functions, read from the headers by cffi."""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from cffi import FFI

from backline_core.sdk import cdef_from_header

from . import get_library, get_model_library, native_dir


def _cdef(ffi: FFI, header: str) -> None:
    with open(os.path.join(native_dir(), header)) as fh:
        ffi.cdef(cdef_from_header(fh.read()))


@functools.cache
def hwhs() -> Any:
    """hwhs.h's constants, as attributes (``hwhs().HWHS_STATUS``); needs no library."""
    ffi = FFI()
    _cdef(ffi, "hwhs.h")
    return ffi.dlopen(None)


@functools.cache
def default_window() -> str:
    """The window the backend maps when a controller names none (window.h's HWHS_DEFAULT_WINDOW:
    cffi reads numbers, not strings, so this one line is read here)."""
    with open(os.path.join(native_dir(), "window.h")) as fh:
        found = re.search(r'^#define\s+HWHS_DEFAULT_WINDOW\s+"([^"]+)"', fh.read(), re.M)
    if found is None:
        raise RuntimeError("window.h defines no HWHS_DEFAULT_WINDOW")
    return found.group(1)


@functools.cache
def backend() -> tuple[FFI, Any]:
    """(ffi, lib) of libbackline_transport_fpga: fpga.h's functions."""
    ffi = FFI()
    _cdef(ffi, "fpga.h")
    return ffi, ffi.dlopen(get_library())


@functools.cache
def model() -> tuple[FFI, Any]:
    """(ffi, lib) of the engine model: model.h's hwhs_model_run."""
    ffi = FFI()
    _cdef(ffi, "model.h")
    return ffi, ffi.dlopen(get_model_library())
