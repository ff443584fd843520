"""CUDA-Q QEC's decoding session, native: a handle over cuqr_session.c's coprocessor function.

The semantics -- measurements accumulate until a shot is complete, D·m mod 2, the completing
enqueue decodes, corrections XOR-accumulate until reset, latched failures, the order of
get_corrections' checks, routing by decoder_id -- live in C only (docs/cudaq-interop.md,
"Wire format and sessions"). A session's round is one whole request slot and its reply the whole
response slot, so it runs on any coprocessor (:func:`session_function`) or in this process
(:class:`Session`).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backline_core import CoprocessorFunction, InvalidArgumentError, NativeFunction

from .. import native
from ..native import LIBRARY, Bound, cq_last_error, ffi, lib
from . import wire

COLLECTING, RESULT_READY, FAILED = "collecting", "result_ready", "failed"
_STATES = {lib.CQ_COLLECTING: COLLECTING, lib.CQ_RESULT_READY: RESULT_READY, lib.CQ_FAILED: FAILED}

#: why a message got no reply (cuqr_session.h's CQ_DROP_*), and why one was answered BAD_REQUEST (CQ_BAD_*)
DROP_KINDS = ("truncated", "oversized", "magic", "function")
BAD_KINDS = ("truncated", "oversized", "invalid")
#: what a server logs at the first message of each kind
DROP_TEXT = {"truncated": "dropped a datagram shorter than the 24-byte request header",
             "oversized": "dropped a datagram longer than the slot",
             "magic": "dropped a datagram whose magic is not 'CUQR'",
             "function": "dropped a request for an unknown function_id"}
BAD_TEXT = {"truncated": "answered BAD_REQUEST to a request shorter than its arg_len or its handler's arguments",
            "oversized": "answered BAD_REQUEST to a request whose arg_len exceeds the slot",
            "invalid": "answered BAD_REQUEST to an enqueue_syndromes whose num_syndromes is not in 1..2^20"}


#: a transport slot's header (the core's BL_FRAME_HEADER_BYTES); slot_bytes is a multiple of 64
_FRAME_HEADER_BYTES, _SLOT_ALIGN = 32, 64


def slot_bytes(slot_size: int) -> int:
    """The transport's ``slot_bytes`` (init_args) whose slots carry one ``slot_size``-byte CUQR slot."""
    return -(-(slot_size + _FRAME_HEADER_BYTES) // _SLOT_ALIGN) * _SLOT_ALIGN


def with_slot_bytes(init_args: Any, slot_size: int) -> dict[str, Any]:
    """``init_args`` with ``slot_bytes`` raised (never lowered) to carry ``slot_size``-byte slots."""
    args = dict(init_args or {})
    args["slot_bytes"] = max(int(args.get("slot_bytes", 0)), slot_bytes(slot_size))
    return args


@dataclass(frozen=True)
class SessionDecoder:
    """One decoder of a session: its id, its shot's size, D (detectors x measurements, 0/1) or None
    (the measurements are the detectors), and its inner function (packed detection events ->
    packed observable flips; a callable of bytes works in this process only)."""

    decoder_id: int
    num_measurements: int
    num_observables: int
    function: CoprocessorFunction | Callable[[bytes], bytes]
    D: np.ndarray | None = None

    @classmethod
    def from_config(cls, config: Any) -> SessionDecoder:
        """From a :class:`~backline_qec.cudaq.config.DecoderConfig` (its decoder built here)."""
        return cls(config.id, config.num_measurements, config.num_observables, config.build(), config.D)

    def inner(self) -> CoprocessorFunction:
        f = self.function
        if isinstance(f, CoprocessorFunction):
            return f
        return CoprocessorFunction(name=f"decoder{self.decoder_id}", python=lambda _id, data: f(data))


def encode_spec(decoders: Sequence[SessionDecoder], slot_size: int) -> bytes:
    """cuqr_session.h's spec of ``decoders`` in ``slot_size``-byte slots."""
    if not decoders:
        raise InvalidArgumentError("a session needs at least one decoder")
    parts = [struct.pack("<4I", lib.CQ_MAGIC, lib.CQ_VERSION, slot_size, len(decoders))]
    for d in decoders:
        if not -2**63 <= d.decoder_id < 2**63:
            raise InvalidArgumentError(f"decoder id {d.decoder_id} does not fit an i64")
        if d.num_measurements < 1 or d.num_observables < 0:
            raise InvalidArgumentError(f"decoder {d.decoder_id}: {d.num_measurements} measurements and "
                                       f"{d.num_observables} observables a shot")
        D = None if d.D is None else np.asarray(d.D, dtype=np.uint8)
        if D is not None and (D.ndim != 2 or D.shape[1] != d.num_measurements):
            raise InvalidArgumentError(f"decoder {d.decoder_id}: D has shape {D.shape}, not "
                                       f"(detectors, {d.num_measurements})")
        detectors = d.num_measurements if D is None else D.shape[0]
        parts.append(struct.pack("<qIIII", d.decoder_id, d.num_measurements, detectors, d.num_observables,
                                 0 if D is None else 1))
        if D is not None:
            rows, cols = np.nonzero(D)  # row-major: each row's measurement indices in order
            ptr = np.zeros(detectors + 1, dtype="<u4")
            np.cumsum(np.bincount(rows, minlength=detectors), out=ptr[1:])
            parts += [ptr.tobytes(), cols.astype("<u4").tobytes()]
    return b"".join(parts)


def session_function(decoders: Sequence[SessionDecoder], slot_size: int = wire.DEFAULT_SLOT_SIZE,
                     name: str = "cuqr-session") -> CoprocessorFunction:
    """The session as a coprocessor function (decoder id 0): a round is one request slot, the reply
    the response slot. With native inner decoders ``cq_session_init`` builds it where it runs (an
    executor can run it); with a Python one :func:`session_init` does, in the coprocessor's process."""
    spec = encode_spec(decoders, slot_size)
    inner = [d.inner() for d in decoders]
    if all(not f.is_python for f in inner):
        return CoprocessorFunction(name=name, library=LIBRARY, symbol="cq_session_fn", init_symbol="cq_session_init",
                                   fini_symbol="cq_session_fini", context=native.native_context(spec, inner))
    return CoprocessorFunction(name=name, python_init=session_init, context=native.python_context(spec, inner))


@dataclass(frozen=True)
class DecoderInfo:
    """A decoder's state and counts, read from the native session."""

    decoder_id: int
    state: str
    accepted: int
    counts: dict[str, int]
    last_error: str | None


class Session:
    """The native session in this process over inner functions bound here. :meth:`handle` takes one
    request slot and returns the response slot, or None for a message that gets no reply."""

    def __init__(self, decoders: Sequence[SessionDecoder], slot_size: int = wire.DEFAULT_SLOT_SIZE, *,
                 spec: bytes | None = None, inner: Sequence[CoprocessorFunction] | None = None) -> None:
        self.slot_size = slot_size
        self.ids = [d.decoder_id for d in decoders]
        self.ptr = ffi.NULL
        self.spec = spec if spec is not None else encode_spec(decoders, slot_size)
        self.inner = Bound(inner if inner is not None else [d.inner() for d in decoders])
        self.ptr = lib.cq_session_create(self.spec, len(self.spec), self.inner.fns, self.inner.ctxs,
                                         len(self.inner.bound))
        if self.ptr == ffi.NULL:
            self.close()
            raise InvalidArgumentError(f"the CUQR session refused its spec: {cq_last_error()}")
        self._out = ffi.new("uint8_t[]", slot_size)
        self._out_len = ffi.new("uint32_t *")

    @classmethod
    def from_spec(cls, spec: bytes, inner: Sequence[CoprocessorFunction]) -> Session:
        (slot_size,) = struct.unpack_from("<I", spec, 8)
        ids = [0] * len(inner)  # read back below from the native decoders
        self = cls([], slot_size, spec=spec, inner=inner)
        info = ffi.new("cq_decoder_info *")
        for i in range(len(ids)):
            lib.cq_session_info(self.ptr, i, info)
            ids[i] = info.id
        self.ids = ids
        return self

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, message: bytes) -> bytes | None:
        """One request slot in, one response slot (or None: dropped) out."""
        rc = lib.cq_session_fn(self.ptr, 0, message, len(message), self._out, self.slot_size, self._out_len)
        if rc != 0:
            return None
        return bytes(ffi.buffer(self._out, self._out_len[0]))

    def info(self, decoder_id: int) -> DecoderInfo:
        if decoder_id not in self.ids:
            raise InvalidArgumentError(f"the session has no decoder {decoder_id}; it has {self.ids}")
        info = ffi.new("cq_decoder_info *")
        lib.cq_session_info(self.ptr, self.ids.index(decoder_id), info)
        counts = {"enqueue": info.enqueues, "get_corrections": info.gets, "reset": info.resets,
                  "decode": info.decodes, "error": info.errors}
        text = ffi.string(info.last_error).decode(errors="replace")
        return DecoderInfo(int(info.id), _STATES[info.state], int(info.accepted), counts, text or None)

    def counts(self) -> tuple[Counter[str], Counter[str]]:
        """(dropped, answered BAD_REQUEST) by kind."""
        c = ffi.new("cq_counts *")
        lib.cq_session_counts(self.ptr, c)
        return split_counts(c)

    def native(self) -> NativeFunction:
        fn = int(ffi.cast("uintptr_t", ffi.addressof(lib, "cq_session_fn")))
        return NativeFunction(fn=fn, ctx=int(ffi.cast("uintptr_t", self.ptr)), keep=self, close=self.close)

    def close(self) -> None:
        ptr, self.ptr = self.ptr, ffi.NULL
        if ptr != ffi.NULL:
            lib.cq_session_free(ptr)
        self.inner.close()


def split_counts(c: Any) -> tuple[Counter[str], Counter[str]]:
    """cq_counts as (dropped, malformed) Counters by kind (kinds with 0 left out)."""
    dropped = Counter({k: int(c.dropped[i + 1]) for i, k in enumerate(DROP_KINDS) if c.dropped[i + 1]})
    malformed = Counter({k: int(c.malformed[i + 1]) for i, k in enumerate(BAD_KINDS) if c.malformed[i + 1]})
    return dropped, malformed


def session_init(context: bytes) -> NativeFunction:
    """``python_init`` of :func:`session_function`: bind the inner decoders here and build the session."""
    spec, inner = native.split_python_context(context)
    return Session.from_spec(spec, inner).native()
