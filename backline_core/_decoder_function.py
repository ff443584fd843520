"""DecoderFunction: a coprocessor function built from a detector error model or matrices.

It answers a coprocessor's rounds -- payload: the window's detection events, bit-packed LSB
first, ``ceil(num_detectors / 8)`` bytes; reply: ``R e`` (see :mod:`backline_core._dem`),
bit-packed LSB first -- and decodes batches in this process with the same decoder:
``decode_batch`` on 0/1 arrays, ``decode_batch_packed`` on bit-packed rows (stim's and
sinter's layout, ``numpy.packbits(..., bitorder="little")``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._coprocessor_function import CoprocessorFunction
from ._dem import check_reply, reply_bits
from ._errors import InvalidArgumentError, PlacementError


@dataclass(frozen=True, kw_only=True)
class DecoderFunction(CoprocessorFunction):
    """A :class:`CoprocessorFunction` that is a decoder of ``num_detectors`` detection events."""

    num_detectors: int
    num_observables: int
    #: the reply's layout: "observables" or "observables+detectors"
    reply: str = "observables"
    #: packed (shots, ceil(D/8)) uint8 -> packed (shots, reply bytes) uint8, in this process
    batch: Callable[[np.ndarray], np.ndarray] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for what in ("num_detectors", "num_observables"):
            value = getattr(self, what)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlacementError(f"DecoderFunction {self.name!r}: {what}={value!r} must be a positive int")
        check_reply(self.reply)
        bits = reply_bits(self.num_detectors, self.num_observables, self.reply)
        if self.reply_bits is None:
            object.__setattr__(self, "reply_bits", bits)
        elif self.reply_bits != bits:
            raise PlacementError(f"DecoderFunction {self.name!r}: reply_bits={self.reply_bits} but its "
                                 f"{self.reply!r} reply has {bits} bits")
        super().__post_init__()

    @property
    def payload_bytes(self) -> int:
        """Bytes of one round's payload (the packed detection events)."""
        return (self.num_detectors + 7) // 8

    @property
    def reply_bytes(self) -> int:
        """Bytes of one round's reply."""
        return (int(self.reply_bits or 0) + 7) // 8

    def decode_batch_packed(self, detection_events: Any) -> np.ndarray:
        """(shots, ceil(D/8)) packed detection events -> (shots, reply bytes) packed replies."""
        if self.batch is None:
            raise PlacementError(f"DecoderFunction {self.name!r} was rebuilt from its description and decodes "
                                 "only rounds here; build it from the DEM again to decode batches")
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.payload_bytes:
            raise InvalidArgumentError(
                f"{self.name}: detection events must have shape (shots, {self.payload_bytes}) bit-packed for "
                f"{self.num_detectors} detectors, got {dets.shape}")
        if dets.dtype != np.uint8:
            raise InvalidArgumentError(f"{self.name}: bit-packed detection events must be uint8, not {dets.dtype}")
        dets = np.ascontiguousarray(dets)
        tail = self.num_detectors % 8
        if tail and dets.shape[0] and (dets[:, -1] >> tail).any():
            dets = dets.copy()  # bits past the last detector are padding; never decode them
            dets[:, -1] &= np.uint8((1 << tail) - 1)
        out = self.batch(dets)
        if out.shape != (dets.shape[0], self.reply_bytes):
            raise PlacementError(f"decoder {self.name!r} returned replies of shape {out.shape}, expected "
                                 f"{(dets.shape[0], self.reply_bytes)}")
        return out

    def decode_batch(self, detection_events: Any) -> np.ndarray:
        """(shots, D) 0/1 detection events -> (shots, reply bits) 0/1 uint8 (observable flips first)."""
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.num_detectors:
            raise InvalidArgumentError(f"{self.name}: detection events must have shape (shots, {self.num_detectors}), "
                                       f"got {dets.shape}")
        if dets.dtype != np.bool_ and dets.size and not np.isin(dets, (0, 1)).all():
            raise InvalidArgumentError(f"{self.name}: detection events must hold only 0 and 1")
        packed = np.packbits(dets.astype(np.uint8, copy=False), axis=1, bitorder="little")
        out = self.decode_batch_packed(packed)
        return np.unpackbits(out, axis=1, count=int(self.reply_bits or 0), bitorder="little")
