"""CUDA-Q QEC's decoding RPC on the wire: headers, the three handlers' payloads, status codes.

Written from the published spec (cuda-quantum ``realtime/docs/cudaq_realtime_message_protocol.md``,
cudaqx ``decoder_rpc_wire_format.h``); docs/cudaq-interop.md, "Wire format and sessions". Every
integer is little-endian and packed; bit fields are LSB first. Both ends use these functions: the
server decodes requests and encodes responses, a client the other way round. A malformed message
raises :class:`WireError`, whose ``kind`` says what was wrong (a server counts them by kind).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..native import lib as _cuqr

#: 'CUQR' and 'CUQS' as little-endian u32
REQUEST_MAGIC = _cuqr.CUQR_REQUEST_MAGIC
RESPONSE_MAGIC = _cuqr.CUQR_RESPONSE_MAGIC

_REQUEST = struct.Struct("<IIIIQ")  # magic, function_id, arg_len, request_id, ptp_timestamp
_RESPONSE = struct.Struct("<IiIIQ")  # magic, status, result_len, request_id, ptp_timestamp
HEADER_BYTES = _cuqr.CUQR_HEADER_BYTES
assert _REQUEST.size == _RESPONSE.size == HEADER_BYTES

_ENQUEUE = struct.Struct("<qqqq")  # decoder_id, counter, syndrome_mapping_id, num_syndromes
_GET = struct.Struct("<qqB")  # decoder_id, return_size, reset
_RESET = struct.Struct("<q")  # decoder_id
ENQUEUE_FIXED_BYTES = _cuqr.CUQR_ENQUEUE_ARGS_BYTES
GET_CORRECTIONS_BYTES = _cuqr.CUQR_GET_ARGS_BYTES
RESET_BYTES = _cuqr.CUQR_RESET_ARGS_BYTES
assert (_ENQUEUE.size, _GET.size, _RESET.size) == (ENQUEUE_FIXED_BYTES, GET_CORRECTIONS_BYTES, RESET_BYTES)

#: the most syndrome bits one enqueue_syndromes may carry (theirs: kMaxSyndromeBits)
MAX_SYNDROME_BITS = 1 << 20
#: udp's defaults in their server: 8 slots of 256 bytes
DEFAULT_NUM_SLOTS = _cuqr.CUQR_DEFAULT_NUM_SLOTS
DEFAULT_SLOT_SIZE = _cuqr.CUQR_DEFAULT_SLOT_SIZE
#: the largest slot a UDP datagram carries
MAX_SLOT_SIZE = _cuqr.CUQR_MAX_SLOT_SIZE

_FNV_OFFSET, _FNV_PRIME = _cuqr.CUQR_FNV_OFFSET, _cuqr.CUQR_FNV_PRIME


def fnv1a_32(name: str | bytes) -> int:
    """FNV-1a, 32 bits: how CUDA-Q derives a handler's function_id from its name."""
    h = _FNV_OFFSET
    for byte in name.encode() if isinstance(name, str) else name:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


ENQUEUE_SYNDROMES = _cuqr.CUQR_FN_ENQUEUE_SYNDROMES
GET_CORRECTIONS = _cuqr.CUQR_FN_GET_CORRECTIONS
RESET_DECODER = _cuqr.CUQR_FN_RESET_DECODER
FUNCTION_NAMES = {ENQUEUE_SYNDROMES: "enqueue_syndromes", GET_CORRECTIONS: "get_corrections",
                  RESET_DECODER: "reset_decoder"}


class Status(enum.IntEnum):
    """The response's status (positive: the handler's, negative: the protocol's)."""

    OK = _cuqr.CUQR_OK
    INVALID_DECODER = _cuqr.CUQR_INVALID_DECODER
    BAD_REQUEST = _cuqr.CUQR_BAD_REQUEST
    INTERNAL_ERROR = _cuqr.CUQR_INTERNAL_ERROR
    NOT_READY = _cuqr.CUQR_NOT_READY
    BUSY = _cuqr.CUQR_BUSY
    SYNDROMES_DROPPED = _cuqr.CUQR_SYNDROMES_DROPPED


class WireError(ValueError):
    """A message that does not parse. ``kind`` is one of :data:`WIRE_ERROR_KINDS`."""

    def __init__(self, kind: str, message: str) -> None:
        assert kind in WIRE_ERROR_KINDS, kind
        super().__init__(message)
        self.kind = kind


#: truncated: shorter than its header or its declared length; oversized: longer than the slot;
#: magic: not 'CUQR'/'CUQS'; invalid: a field out of range
WIRE_ERROR_KINDS = ("truncated", "oversized", "magic", "invalid")


@dataclass(frozen=True)
class RequestHeader:
    function_id: int
    arg_len: int
    request_id: int = 0
    ptp_timestamp: int = 0


@dataclass(frozen=True)
class ResponseHeader:
    status: int
    result_len: int
    request_id: int = 0
    ptp_timestamp: int = 0


@dataclass(frozen=True)
class EnqueueRequest:
    decoder_id: int
    counter: int
    syndrome_mapping_id: int
    num_syndromes: int
    packed: bytes  #: ceil(num_syndromes / 8) bytes, LSB first

    @property
    def bits(self) -> np.ndarray:
        return unpack_bits(self.packed, self.num_syndromes)


@dataclass(frozen=True)
class GetCorrectionsRequest:
    decoder_id: int
    return_size: int
    reset: bool


@dataclass(frozen=True)
class ResetRequest:
    decoder_id: int


def packed_bytes(num_bits: int) -> int:
    return (num_bits + 7) // 8


def pack_bits(bits: Sequence[int] | np.ndarray) -> bytes:
    """0/1 values as bytes, LSB first (bit i is bit i % 8 of byte i // 8)."""
    a = np.asarray(bits, dtype=np.uint8).ravel()
    if a.size and a.max() > 1:
        raise ValueError("bits must be 0 or 1")
    return np.packbits(a, bitorder="little").tobytes()


def unpack_bits(data: bytes, num_bits: int) -> np.ndarray:
    """The first ``num_bits`` bits of ``data`` (LSB first) as a 0/1 uint8 array."""
    if len(data) < packed_bytes(num_bits):
        raise WireError("truncated", f"{len(data)} bytes hold fewer than {num_bits} bits")
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=num_bits, bitorder="little")


def _check_u32(value: int, what: str) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{what}={value} does not fit a u32")


def _frame(header: bytes, body: bytes, slot_size: int | None) -> bytes:
    out = header + body
    if slot_size is not None:
        if len(out) > slot_size:
            raise WireError("oversized", f"a {len(out)}-byte message does not fit a {slot_size}-byte slot")
        out += bytes(slot_size - len(out))  # one message is one whole slot
    return out


# -- requests ------------------------------------------------------------------------------

def encode_request(function_id: int, payload: bytes, *, request_id: int = 0, ptp_timestamp: int = 0,
                   slot_size: int | None = None) -> bytes:
    """Header + payload, padded to ``slot_size`` when given (WireError if it does not fit)."""
    _check_u32(function_id, "function_id")
    _check_u32(request_id, "request_id")
    if not 0 <= ptp_timestamp < 1 << 64:
        raise ValueError(f"ptp_timestamp={ptp_timestamp} does not fit a u64")
    return _frame(_REQUEST.pack(REQUEST_MAGIC, function_id, len(payload), request_id, ptp_timestamp), payload,
                  slot_size)


def read_request_header(message: bytes, slot_size: int | None = None) -> RequestHeader:
    """The header alone: a message no longer than the slot, at least 24 bytes, magic 'CUQR'."""
    if slot_size is not None and len(message) > slot_size:
        raise WireError("oversized", f"a {len(message)}-byte message exceeds the {slot_size}-byte slot")
    if len(message) < HEADER_BYTES:
        raise WireError("truncated", f"{len(message)} bytes is shorter than the {HEADER_BYTES}-byte request header")
    magic, function_id, arg_len, request_id, ptp = _REQUEST.unpack_from(message)
    if magic != REQUEST_MAGIC:
        raise WireError("magic", f"magic 0x{magic:08X} is not 'CUQR' (0x{REQUEST_MAGIC:08X})")
    return RequestHeader(function_id, arg_len, request_id, ptp)


def decode_request(message: bytes, slot_size: int | None = None) -> tuple[RequestHeader, bytes]:
    """(header, its ``arg_len`` payload bytes); bytes past the payload are the slot's padding."""
    header = read_request_header(message, slot_size)
    arg_len = header.arg_len
    if slot_size is not None and arg_len > slot_size - HEADER_BYTES:
        raise WireError("oversized", f"arg_len {arg_len} exceeds the slot's {slot_size - HEADER_BYTES} payload bytes")
    if len(message) < HEADER_BYTES + arg_len:
        raise WireError("truncated", f"arg_len {arg_len} but only {len(message) - HEADER_BYTES} payload bytes")
    return header, bytes(message[HEADER_BYTES:HEADER_BYTES + arg_len])


def peek_decoder_id(payload: bytes) -> int:
    """Every handler's payload starts with its i64 decoder_id."""
    if len(payload) < 8:
        raise WireError("truncated", f"a {len(payload)}-byte payload has no decoder_id")
    return _RESET.unpack_from(payload)[0]


def encode_enqueue(decoder_id: int, bits: Sequence[int] | np.ndarray, *, counter: int = 0,
                   syndrome_mapping_id: int = 0) -> bytes:
    """The enqueue_syndromes payload for 0/1 ``bits``."""
    a = np.asarray(bits, dtype=np.uint8).ravel()
    return _ENQUEUE.pack(decoder_id, counter, syndrome_mapping_id, a.size) + pack_bits(a)


def decode_enqueue(payload: bytes) -> EnqueueRequest:
    if len(payload) < ENQUEUE_FIXED_BYTES:
        raise WireError("truncated", f"enqueue_syndromes needs {ENQUEUE_FIXED_BYTES} bytes before its bits, "
                                     f"got {len(payload)}")
    decoder_id, counter, mapping, n = _ENQUEUE.unpack_from(payload)
    if not 0 < n <= MAX_SYNDROME_BITS:
        raise WireError("invalid", f"num_syndromes {n} is not in 1..{MAX_SYNDROME_BITS}")
    nbytes = packed_bytes(n)
    if len(payload) < ENQUEUE_FIXED_BYTES + nbytes:
        raise WireError("truncated", f"num_syndromes {n} needs {nbytes} bytes of bits, got "
                                     f"{len(payload) - ENQUEUE_FIXED_BYTES}")
    return EnqueueRequest(decoder_id, counter, mapping, n, bytes(payload[ENQUEUE_FIXED_BYTES:ENQUEUE_FIXED_BYTES + nbytes]))


def encode_get_corrections(decoder_id: int, return_size: int, reset: bool = False) -> bytes:
    return _GET.pack(decoder_id, return_size, 1 if reset else 0)


def decode_get_corrections(payload: bytes) -> GetCorrectionsRequest:
    if len(payload) < GET_CORRECTIONS_BYTES:
        raise WireError("truncated", f"get_corrections needs {GET_CORRECTIONS_BYTES} bytes, got {len(payload)}")
    decoder_id, return_size, reset = _GET.unpack_from(payload)
    return GetCorrectionsRequest(decoder_id, return_size, reset != 0)


def encode_reset(decoder_id: int) -> bytes:
    return _RESET.pack(decoder_id)


def decode_reset(payload: bytes) -> ResetRequest:
    if len(payload) < RESET_BYTES:
        raise WireError("truncated", f"reset_decoder needs {RESET_BYTES} bytes, got {len(payload)}")
    return ResetRequest(_RESET.unpack_from(payload)[0])


# -- responses -----------------------------------------------------------------------------

def encode_response(status: int, *, request_id: int = 0, ptp_timestamp: int = 0, result: bytes = b"",
                    slot_size: int | None = None) -> bytes:
    """Header + result, padded to ``slot_size`` when given (WireError if it does not fit)."""
    _check_u32(request_id, "request_id")
    return _frame(_RESPONSE.pack(RESPONSE_MAGIC, int(status), len(result), request_id, ptp_timestamp), result,
                  slot_size)


def decode_response(message: bytes, slot_size: int | None = None) -> tuple[ResponseHeader, bytes]:
    """(header, its ``result_len`` result bytes)."""
    if slot_size is not None and len(message) > slot_size:
        raise WireError("oversized", f"a {len(message)}-byte message exceeds the {slot_size}-byte slot")
    if len(message) < HEADER_BYTES:
        raise WireError("truncated", f"{len(message)} bytes is shorter than the {HEADER_BYTES}-byte response header")
    magic, status, result_len, request_id, ptp = _RESPONSE.unpack_from(message)
    if magic != RESPONSE_MAGIC:
        raise WireError("magic", f"magic 0x{magic:08X} is not 'CUQS' (0x{RESPONSE_MAGIC:08X})")
    if len(message) < HEADER_BYTES + result_len:
        raise WireError("truncated", f"result_len {result_len} but only {len(message) - HEADER_BYTES} result bytes")
    return ResponseHeader(status, result_len, request_id, ptp), bytes(message[HEADER_BYTES:HEADER_BYTES + result_len])


def decode_corrections(result: bytes, return_size: int) -> np.ndarray:
    """get_corrections' result: exactly ceil(return_size / 8) bytes, as 0/1 observable flips."""
    if len(result) != packed_bytes(return_size):
        raise WireError("truncated" if len(result) < packed_bytes(return_size) else "invalid",
                        f"{len(result)} result bytes for {return_size} corrections "
                        f"(expected {packed_bytes(return_size)})")
    return unpack_bits(result, return_size)
