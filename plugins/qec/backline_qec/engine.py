"""The coprocessor's side of streamed decoding: the plan both sides read, and the engine function.

The engine is one :class:`~backline_core.CoprocessorFunction` on decoder id 0; it selects
each window's decoder by the window's shape, as the plan says.
It is rebuilt where the coprocessor runs from its context -- the plan and each window
decoder's description -- by :func:`engine_init`, which binds the window decoders there and
hands the native engine to the session (a :class:`~backline_core.NativeFunction`): rounds
never take the GIL unless a window decoder is a Python one.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from backline_core import CoprocessorFunction, InvalidArgumentError, NativeFunction

from . import native
from .native import LIBRARY, Bound, ffi, last_error, lib
from .windows import SlidingWindowDecoder



def encode_plan(sw: SlidingWindowDecoder) -> bytes:
    """stream.h's plan for ``sw``'s rounds, windows and window shapes."""
    if sw.num_rounds > lib.QS_MAX_ROUNDS:
        raise InvalidArgumentError(f"the circuit has {sw.num_rounds} rounds; a stream carries at most "
                                   f"{lib.QS_MAX_ROUNDS}")
    order = np.argsort(sw.rounds, kind="stable")
    round_ptr = np.zeros(sw.num_rounds + 1, dtype="<u4")
    np.cumsum(np.bincount(sw.rounds, minlength=sw.num_rounds), out=round_ptr[1:])
    windows = np.array([[m.window.start, m.window.end, m.window.commit_end, s]
                        for m, s in zip(sw.models, sw.shape)], dtype="<u4")

    def csr(lists: Sequence[np.ndarray]) -> bytes:
        ptr = np.zeros(len(lists) + 1, dtype="<u4")
        np.cumsum([len(x) for x in lists], out=ptr[1:])
        flat = np.concatenate([np.asarray(x, dtype="<u4") for x in lists]) if lists else np.zeros(0, "<u4")
        return ptr.tobytes() + flat.astype("<u4").tobytes()

    head = struct.pack("<7I", lib.QS_MAGIC, lib.QS_VERSION, sw.num_rounds, sw.num_detectors, sw.num_observables,
                       len(sw.windows), len(sw.decoders))
    return (head + round_ptr.tobytes() + order.astype("<u4").tobytes() + windows.tobytes()
            + csr([m.detectors for m in sw.models]) + csr([m.handed_on for m in sw.models]))


def engine_function(sw: SlidingWindowDecoder) -> CoprocessorFunction:
    """The engine for ``sw`` as a coprocessor function (decoder id 0).

    With native window decoders it is native through and through (``qs_engine_init`` dlopens
    them where it runs, so an executor can run it); with a Python one, :func:`engine_init`
    builds it in the coprocessor's process."""
    plan = encode_plan(sw)
    ids = (0,)
    if all(not d.is_python for d in sw.decoders):
        return CoprocessorFunction(name="qec-stream", library=LIBRARY, symbol="qs_engine_fn",
                                   init_symbol="qs_engine_init", fini_symbol="qs_engine_fini", decoder_ids=ids,
                                   context=native_context(plan, sw.decoders), reply_bits=sw.num_observables)
    return CoprocessorFunction(name="qec-stream", python_init=engine_init, decoder_ids=ids,
                               context=native.python_context(plan, sw.decoders),
                               reply_bits=sw.num_observables)


def native_context(plan: bytes, decoders: Sequence[CoprocessorFunction]) -> bytes:
    """``qs_engine_init``'s context (stream.h): the plan, then each window decoder's library,
    symbol, init and fini symbols and context (the layout the CUDA-Q session shares, native.py)."""
    return native.native_context(plan, decoders)


def split_context(context: bytes) -> tuple[bytes, list[CoprocessorFunction]]:
    return native.split_python_context(context)


class Engine:
    """The native engine over window decoders bound in this process."""

    def __init__(self, plan: bytes, decoders: Sequence[CoprocessorFunction]) -> None:
        self.ptr = ffi.NULL
        self.inner = Bound(decoders)
        self.plan = plan
        self.ptr = lib.qs_engine_create(plan, len(plan), self.inner.fns, self.inner.ctxs, len(self.inner.bound))
        if self.ptr == ffi.NULL:
            self.close()
            raise InvalidArgumentError(f"the streaming engine refused its plan: {last_error()}")

    def native(self) -> NativeFunction:
        fn = int(ffi.cast("uintptr_t", ffi.addressof(lib, "qs_engine_fn")))
        return NativeFunction(fn=fn, ctx=int(ffi.cast("uintptr_t", self.ptr)), keep=self, close=self.close)

    def close(self) -> None:
        ptr, self.ptr = self.ptr, ffi.NULL
        if ptr != ffi.NULL:
            lib.qs_engine_free(ptr)
        self.inner.close()


def engine_init(context: bytes) -> NativeFunction:
    """``python_init`` of the engine function: bind the window decoders here and build the engine."""
    plan, decoders = split_context(context)
    return Engine(plan, decoders).native()


def window_function(decoders: Sequence[CoprocessorFunction]) -> CoprocessorFunction:
    """One function serving every window shape of parallel windows: decoder id ``s`` is ``decoders[s]``.

    A round is one window: its detection events in, its committed observable flips and handed-on
    detector flips out (the window decoder's own reply). Native throughout with native window
    decoders; with a Python one, :func:`window_init` binds them in the coprocessor's process."""
    ids = tuple(range(len(decoders)))
    bits = max(int(d.reply_bits or 0) for d in decoders) or None
    if all(not d.is_python for d in decoders):
        return CoprocessorFunction(name="qec-windows", library=LIBRARY, symbol="qs_mux_fn", init_symbol="qs_mux_init",
                                   fini_symbol="qs_mux_fini", decoder_ids=ids, context=native.describe(decoders),
                                   reply_bits=bits)
    return CoprocessorFunction(name="qec-windows", python_init=window_init, decoder_ids=ids,
                               context=native.python_context(b"", decoders), reply_bits=bits)


class WindowMux:
    """stream.h's window multiplexer over window decoders bound in this process."""

    def __init__(self, decoders: Sequence[CoprocessorFunction]) -> None:
        self.ptr = ffi.NULL
        self.inner = Bound(decoders)
        self.ptr = lib.qs_mux_create(self.inner.fns, self.inner.ctxs, len(self.inner.bound))
        if self.ptr == ffi.NULL:
            self.close()
            raise InvalidArgumentError(f"the window multiplexer refused its decoders: {last_error()}")

    def native(self) -> NativeFunction:
        fn = int(ffi.cast("uintptr_t", ffi.addressof(lib, "qs_mux_fn")))
        return NativeFunction(fn=fn, ctx=int(ffi.cast("uintptr_t", self.ptr)), keep=self, close=self.close)

    def close(self) -> None:
        ptr, self.ptr = self.ptr, ffi.NULL
        if ptr != ffi.NULL:
            lib.qs_mux_free(ptr)
        self.inner.close()


def window_init(context: bytes) -> NativeFunction:
    """``python_init`` of :func:`window_function`: bind the window decoders here."""
    _, decoders = split_context(context)
    return WindowMux(decoders).native()
