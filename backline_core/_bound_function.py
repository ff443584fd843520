"""A CoprocessorFunction made callable: native symbol and context loaded, or a Python callable.

Sessions bind these to decoder_ids; the benchmark and tests call them directly to know
what a coprocessor must answer.

>>> from backline_core._builtins import steane
>>> with BoundFunction(steane()) as fn:
...     fn(0, bytes([0b010])).hex()
'10'
"""

from __future__ import annotations

import logging
from typing import Any

from ._coprocessor_function import CoprocessorFunction, NativeFunction
from ._errors import FunctionError, InvalidArgumentError, TransportError
from ._abi import ffi, lib, load_symbol

_log = logging.getLogger(__name__)


#: return codes of the Python slow path (the controller sees them as BL_EFN "it returned N")
PY_RAISED, PY_TOO_LONG, PY_NOT_BYTES = 1, 2, 3


@ffi.def_extern()
def bl_py_coprocessor_fn(ctx, decoder_id, data, length, out, out_cap, out_len):  # pragma: no cover - called from C
    fn = ffi.from_handle(ctx)
    try:
        reply = fn(int(decoder_id), bytes(ffi.buffer(data, length)))
    except BaseException:  # SystemExit and KeyboardInterrupt too: the round fails, the coprocessor serves on
        _log.exception("Python coprocessor function %r failed on decoder_id %d", fn, decoder_id)
        return PY_RAISED
    try:
        payload = memoryview(reply).tobytes()  # bytes-like only: 5 must not become five zero bytes
    except TypeError:
        _log.error("Python coprocessor function %r returned %s for decoder_id %d; return bytes, bytearray, "
                   "memoryview or a uint8 array", fn, type(reply).__name__, decoder_id)
        return PY_NOT_BYTES
    if len(payload) > out_cap:
        _log.error("Python coprocessor function %r returned %d bytes for decoder_id %d; the slot holds %d",
                   fn, len(payload), decoder_id, out_cap)
        return PY_TOO_LONG
    ffi.memmove(out, payload, len(payload))
    out_len[0] = len(payload)
    return 0


class BoundFunction:
    """The native ``(fn, ctx)`` pair of a CoprocessorFunction; owns ``ctx`` until closed."""

    def __init__(self, function: CoprocessorFunction) -> None:
        if not isinstance(function, CoprocessorFunction):
            raise InvalidArgumentError(f"BoundFunction takes a CoprocessorFunction, not {type(function).__name__} "
                                       "(backline_core.plugins.get('decoder', NAME).build() makes one)")
        self.function = function
        self._fini: Any = None
        self._native: NativeFunction | None = None
        if function.is_python:
            made = function.python_callable()
            if isinstance(made, NativeFunction):  # python_init put a native function together
                if not made.fn:
                    raise InvalidArgumentError(f"{function.name}: python_init returned a NativeFunction with no fn")
                self._native = made
                self.fn, self.ctx = ffi.cast("bl_coprocessor_fn", made.fn), ffi.cast("void *", made.ctx)
                return
            self._handle = ffi.new_handle(made)  # keeps the callable reachable from C
            self.fn, self.ctx = lib.bl_py_coprocessor_fn, self._handle
            return
        self.fn = load_symbol(function.library, function.symbol)
        self.ctx = ffi.NULL
        if function.init_symbol:
            init = load_symbol(function.library, function.init_symbol, "bl_fn_init")
            ctx_out = ffi.new("void **")
            params = ffi.from_buffer(function.context) if function.context else ffi.NULL
            rc = init(params, len(function.context), ctx_out)
            if rc != 0:
                raise TransportError(f"{function.name}: {function.init_symbol} returned {rc} building its context")
            self.ctx = ctx_out[0]
            if function.fini_symbol:
                self._fini = load_symbol(function.library, function.fini_symbol, "bl_fn_fini")

    def __call__(self, decoder_id: int, payload: bytes, out_cap: int = 65536) -> bytes:
        """Run the function on one message in this thread; raise FunctionError on failure."""
        out = ffi.new("uint8_t[]", out_cap)
        out_len = ffi.new("uint32_t *")
        rc = self.fn(self.ctx, decoder_id, ffi.from_buffer(payload), len(payload), out, out_cap, out_len)
        if rc != 0:
            raise FunctionError(f"{self.function.name} returned {rc} for decoder_id {decoder_id}")
        return bytes(ffi.buffer(out, out_len[0]))

    def close(self) -> None:
        """Free the native context (idempotent)."""
        native, self._native = self._native, None
        if native is not None and native.close is not None:
            native.close()
        if self._fini is not None and self.ctx != ffi.NULL:
            self._fini(self.ctx)
        self._fini, self.ctx = None, ffi.NULL

    def __enter__(self) -> BoundFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
