"""The coprocessor's side of streamed decoding: the plan both sides read, and the engine function.

The engine is one :class:`~backline_core.CoprocessorFunction` on decoder id 0; it selects
each window's decoder by the window's shape, as the plan says.
It is rebuilt where the coprocessor runs from its context -- the plan and each window
decoder's description -- by :func:`engine_init`, which binds the window decoders there and
hands the native engine to the session (a :class:`~backline_core.NativeFunction`): rounds
never take the GIL unless a window decoder is a Python one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from backline_core import BoundFunction, CoprocessorFunction, InvalidArgumentError, NativeFunction

from .native import LIBRARY, ffi, last_error, lib
from .windows import SlidingWindowDecoder

#: the engine's context: u32 plan bytes | plan | JSON of the window decoders' descriptions
_CONTEXT_HEADER = struct.Struct("<I")


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
    described = json.dumps([d.to_dict() for d in sw.decoders], separators=(",", ":")).encode()
    return CoprocessorFunction(name="qec-stream", python_init=engine_init, decoder_ids=ids,
                               context=_CONTEXT_HEADER.pack(len(plan)) + plan + described,
                               reply_bits=sw.num_observables)


def native_context(plan: bytes, decoders: Sequence[CoprocessorFunction]) -> bytes:
    """``qs_engine_init``'s context (stream.h): the plan, then each window decoder's library,
    symbol, init and fini symbols and context."""
    def field(data: bytes) -> bytes:
        return struct.pack("<I", len(data)) + data

    parts = [struct.pack("<I", len(plan)), plan, bytes(-len(plan) % 4), struct.pack("<I", len(decoders))]
    for d in decoders:
        parts += [field(str(d.library).encode()), field(str(d.symbol).encode()),
                  field((d.init_symbol or "").encode()), field((d.fini_symbol or "").encode()), field(d.context)]
    return b"".join(parts)


def split_context(context: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    (n,) = _CONTEXT_HEADER.unpack_from(context)
    return context[4:4 + n], json.loads(context[4 + n:])


class Engine:
    """The native engine over window decoders bound in this process."""

    def __init__(self, plan: bytes, decoders: Sequence[CoprocessorFunction]) -> None:
        from backline_core.sdk import ffi as core_ffi  # the bound functions' pointers are the core's cdata

        self.bound: list[BoundFunction] = []
        self.ptr = ffi.NULL
        for d in decoders:
            self.bound.append(BoundFunction(d))
        fns = ffi.new("qs_fn[]", [ffi.cast("qs_fn", int(core_ffi.cast("uintptr_t", b.fn))) for b in self.bound])
        ctxs = ffi.new("void *[]", [ffi.cast("void *", int(core_ffi.cast("uintptr_t", b.ctx))) for b in self.bound])
        self.plan = plan
        self.ptr = lib.qs_engine_create(plan, len(plan), fns, ctxs, len(self.bound))
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
        for b in self.bound:
            b.close()


def engine_init(context: bytes) -> NativeFunction:
    """``python_init`` of the engine function: bind the window decoders here and build the engine."""
    plan, described = split_context(context)
    return Engine(plan, [CoprocessorFunction.from_dict(d) for d in described]).native()
