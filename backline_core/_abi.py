"""The cffi binding of libbackline and the paths a native program needs.

>>> import os
>>> from backline_core import get_include, get_library
>>> os.path.exists(os.path.join(get_include(), "backline", "backline.h"))
True
>>> os.path.basename(get_library())
'libbackline.so'
"""

from __future__ import annotations

import os

from . import _errors as errors

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_include() -> str:
    """Directory holding ``backline/backline.h`` (add it with ``-I``)."""
    return os.path.join(_HERE, "native", "include")


def get_library() -> str:
    """Path of ``libbackline.so``, the runtime shared library (loadable by any program)."""
    return os.path.join(_HERE, "lib", "libbackline.so")


try:
    from ._native import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"backline_core's native runtime is not built ({exc}); reinstall with `pip install backline-core` "
        "(a C compiler is needed when installing from source)"
    ) from exc

if lib.bl_abi_version() != lib.BACKLINE_ABI_VERSION:  # pragma: no cover
    raise ImportError("libbackline and its binding disagree on the ABI version; reinstall backline-core")


def last_error() -> str:
    """Text of this thread's last native failure."""
    return ffi.string(lib.bl_last_error()).decode(errors="replace")


def check(rc: int) -> int:
    """Raise the TransportError subclass for a negative status, else return ``rc``."""
    if rc < 0:
        raise errors.from_status(rc, last_error())
    return rc


def load_symbol(library: str, symbol: str, ctype: str = "bl_coprocessor_fn"):
    """dlopen ``library`` and return ``symbol`` cast to ``ctype``; keep the library loaded."""
    handle = lib.dlopen(library.encode(), lib.RTLD_NOW)
    if handle == ffi.NULL:
        raise errors.PluginError(f"cannot load {library}: {ffi.string(lib.dlerror()).decode()}")
    address = lib.dlsym(handle, symbol.encode())
    if address == ffi.NULL:
        raise errors.PluginError(f"{library} has no symbol {symbol!r}")
    return ffi.cast(ctype, address)
