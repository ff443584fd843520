"""The decoding sessions of CUDA-Q QEC's decoding server, one per decoder, independent of transport.

Behaviour follows their ``DecodingSession`` (cudaqx ``decoding-server-cqr``), the decoder's own
``enqueue_syndrome`` accumulation (``decoder.cpp``) and their server's request routing
(``dispatch_rpc``); docs/cudaq-interop.md, "Wire format and sessions", lists every corner. The
decode itself is a callable, packed detection events -> packed observable flips (a Backline
coprocessor's ``session.round`` in the server), so these classes never touch a socket.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import wire
from .wire import Status, WireError

Decode = Callable[[bytes], bytes]

COLLECTING, RESULT_READY, FAILED = "collecting", "result_ready", "failed"


class DecodingSession:
    """One decoder's shot state: measurements accumulate until a shot's worth has arrived, the
    enqueue that completes it decodes, and the observable corrections XOR-accumulate (as their
    decoder's do) until ``get_corrections(reset=True)`` or ``reset_decoder`` clears them."""

    def __init__(self, decoder_id: int, num_measurements: int, num_observables: int, decode: Decode,
                 D: np.ndarray | None = None) -> None:
        if num_measurements < 1 or num_observables < 0:
            raise ValueError(f"decoder {decoder_id}: {num_measurements} measurements and {num_observables} "
                             "observables a shot")
        if D is not None:
            D = np.asarray(D, dtype=np.uint8)
            if D.ndim != 2 or D.shape[1] != num_measurements:
                raise ValueError(f"decoder {decoder_id}: D has shape {D.shape}, not (detectors, {num_measurements})")
        self.decoder_id = decoder_id
        self.num_measurements = num_measurements
        self.num_observables = num_observables
        self._decode = decode
        # int32 so D @ m counts without overflow before the mod 2
        self._D = None if D is None else D.astype(np.int32)
        self._measurements = np.zeros(num_measurements, dtype=np.uint8)
        self._accepted = 0
        self.corrections = np.zeros(num_observables, dtype=np.uint8)
        self.state = COLLECTING
        self.last_error: str | None = None
        self.counts: Counter[str] = Counter()  # enqueue, get_corrections, reset, decode, error

    @classmethod
    def from_config(cls, config: Any, decode: Decode) -> DecodingSession:
        """From a :class:`~backline_qec.cudaq.config.DecoderConfig` and its decode."""
        return cls(config.id, config.num_measurements, config.num_observables, decode, config.D)

    def _fail(self, message: str) -> None:
        self.counts["error"] += 1
        self.state = FAILED
        self.last_error = message

    def enqueue(self, request: wire.EnqueueRequest) -> Status:
        """Take a request's measurements; OK whenever they were received (a failure is latched and
        surfaces at the next get_corrections), BAD_REQUEST for a syndrome mapping other than 0."""
        self.counts["enqueue"] += 1
        if request.syndrome_mapping_id != 0:
            # theirs: only the identity mapping is honoured, and the shot is failed
            self._fail(f"syndrome_mapping_id {request.syndrome_mapping_id} (only 0 is supported)")
            return Status.BAD_REQUEST
        if self.state == FAILED:
            return Status.OK  # the shot's history is unknowable: ignored until reset_decoder
        self.state = COLLECTING  # any new input starts a new volume; the old result is no longer ready
        n = request.num_syndromes
        if self._accepted + n > self.num_measurements:
            self._fail(f"{self._accepted} + {n} measurements exceed the {self.num_measurements} a shot has")
            return Status.OK
        self._measurements[self._accepted:self._accepted + n] = request.bits
        self._accepted += n
        if self._accepted == self.num_measurements:
            try:
                self._run_decode()
            except Exception as exc:  # noqa: BLE001 - any failure of the decode is latched, as theirs
                self._fail(f"decode failed: {type(exc).__name__}: {exc}")
                return Status.OK
            self._accepted = 0
            self.state = RESULT_READY
        return Status.OK

    def _run_decode(self) -> None:
        m = self._measurements
        detectors = m if self._D is None else ((self._D @ m) & 1).astype(np.uint8)
        reply = self._decode(wire.pack_bits(detectors))
        expected = wire.packed_bytes(self.num_observables)
        if len(reply) != expected:
            raise ValueError(f"the decoder replied {len(reply)} bytes, not {expected}")
        self.corrections ^= wire.unpack_bits(reply, self.num_observables)
        self.counts["decode"] += 1

    def malformed_enqueue(self) -> Status:
        """An enqueue whose payload does not parse: BAD_REQUEST, and the shot is failed (theirs)."""
        self.counts["enqueue"] += 1
        self._fail("a malformed enqueue_syndromes")
        return Status.BAD_REQUEST

    def get_corrections(self, return_size: int, reset: bool = False,
                        capacity: int | None = None) -> tuple[Status, bytes]:
        """(status, packed corrections); ``capacity``: the most result bytes the reply can carry."""
        self.counts["get_corrections"] += 1
        if return_size <= 0:
            self.counts["error"] += 1
            return Status.BAD_REQUEST, b""
        if self.state == FAILED:
            return Status.INTERNAL_ERROR, b""  # sticky until reset_decoder
        if return_size != self.num_observables:
            self.counts["error"] += 1
            return Status.BAD_REQUEST, b""
        if self.state != RESULT_READY:
            return Status.NOT_READY, b""
        result = wire.pack_bits(self.corrections)
        if capacity is not None and len(result) > capacity:
            return Status.INTERNAL_ERROR, b""  # truncating would hand back bits never written
        if reset:
            self.corrections[:] = 0  # clear_corrections, not a full reset
            self.state = COLLECTING
        return Status.OK, result

    def reset(self) -> Status:
        """reset_decoder: drop the partial shot, the corrections and a latched failure."""
        self.counts["reset"] += 1
        self._measurements[:] = 0
        self._accepted = 0
        self.corrections[:] = 0
        self.state = COLLECTING
        self.last_error = None
        return Status.OK


#: why a request was dropped without a reply, besides the wire errors' kinds
DROP_KINDS = ("function",)


class Dispatcher:
    """Routes whole request slots to sessions by the payload's decoder_id; returns the response
    slot, or None for a message that gets no reply (counted in :attr:`dropped`, and the first of
    each kind logged). A malformed request whose header is readable is answered BAD_REQUEST."""

    def __init__(self, sessions: Mapping[int, DecodingSession], slot_size: int = wire.DEFAULT_SLOT_SIZE,
                 log: Callable[[str], None] | None = None) -> None:
        if slot_size < wire.HEADER_BYTES + 1:
            raise ValueError(f"a {slot_size}-byte slot cannot hold a request")
        self.sessions = dict(sessions)
        self.slot_size = slot_size
        self.dropped: Counter[str] = Counter()  # no reply: truncated header, oversized, magic, function
        self.malformed: Counter[str] = Counter()  # answered BAD_REQUEST: truncated, oversized, invalid payloads
        self._log = log if log is not None else (lambda text: print(text, file=sys.stderr, flush=True))
        self._logged: set[tuple[int, str]] = set()

    def _note(self, counter: Counter[str], kind: str, message: str) -> None:
        counter[kind] += 1
        if (id(counter), kind) not in self._logged:
            self._logged.add((id(counter), kind))
            what = "dropped" if counter is self.dropped else "answered BAD_REQUEST"
            self._log(f"backline decoding-server: {message} (further {kind} messages {what} are counted, not logged)")

    def handle(self, message: bytes) -> bytes | None:
        """One request slot in, one response slot (or None) out."""
        try:
            header = wire.read_request_header(message, self.slot_size)
        except WireError as exc:
            self._note(self.dropped, exc.kind, f"dropped a {len(message)}-byte datagram: {exc}")
            return None
        name = wire.FUNCTION_NAMES.get(header.function_id)
        if name is None:
            # their host dispatcher drops a slot whose function_id has no table entry
            self._note(self.dropped, "function", f"dropped a request for unknown function_id "
                                                 f"0x{header.function_id:08X}")
            return None
        status, result = self._route(name, header, message)
        return wire.encode_response(status, request_id=header.request_id, ptp_timestamp=header.ptp_timestamp,
                                    result=result, slot_size=self.slot_size)

    def _route(self, name: str, header: wire.RequestHeader, message: bytes) -> tuple[Status, bytes]:
        error: WireError | None = None
        try:
            _, payload = wire.decode_request(message, self.slot_size)
        except WireError as exc:
            error = exc
            payload = bytes(message[wire.HEADER_BYTES:wire.HEADER_BYTES + header.arg_len])
        if len(payload) < 8:
            self._note(self.malformed, "truncated", f"{name} without a decoder_id")
            return Status.BAD_REQUEST, b""
        session = self.sessions.get(wire.peek_decoder_id(payload))
        if session is None:
            return Status.INVALID_DECODER, b""
        try:
            if error is not None:
                raise error
            if name == "enqueue_syndromes":
                return session.enqueue(wire.decode_enqueue(payload)), b""
            if name == "get_corrections":
                req = wire.decode_get_corrections(payload)
                return session.get_corrections(req.return_size, req.reset,
                                               capacity=self.slot_size - wire.HEADER_BYTES)
            wire.decode_reset(payload)
            return session.reset(), b""
        except WireError as exc:
            self._note(self.malformed, exc.kind, f"{name}: {exc}")
            if name == "enqueue_syndromes":
                return session.malformed_enqueue(), b""
            return Status.BAD_REQUEST, b""
