"""CUDA-Q QEC's RPC wire format: constants pinned to the published values, round trips, refusals."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from backline_qec.cudaq import wire
from backline_qec.cudaq.wire import Status, WireError


def test_constants_are_the_published_ones():
    assert wire.REQUEST_MAGIC == 0x43555152 == int.from_bytes(b"RQUC", "little")
    assert wire.RESPONSE_MAGIC == 0x43555153
    assert wire.HEADER_BYTES == 24
    assert (wire.ENQUEUE_FIXED_BYTES, wire.GET_CORRECTIONS_BYTES, wire.RESET_BYTES) == (32, 17, 8)
    # cudaqx decoder_rpc_wire_format.h static_asserts these
    assert wire.ENQUEUE_SYNDROMES == 0x7ED8BE82
    assert wire.GET_CORRECTIONS == 0x882D5BA1
    assert wire.RESET_DECODER == 0x977A59CF
    assert wire.fnv1a_32(b"") == 2166136261
    assert wire.fnv1a_32("a") == 0xE40C292C  # FNV-1a's published test vector
    assert [int(s) for s in Status] == list(range(7))
    assert Status(6).name == "SYNDROMES_DROPPED"


def test_request_layout_and_round_trip():
    payload = wire.encode_enqueue(3, [1, 0, 1, 1, 0, 0, 0, 0, 1], counter=7)
    msg = wire.encode_request(wire.ENQUEUE_SYNDROMES, payload, request_id=42, ptp_timestamp=2**63 + 5, slot_size=256)
    assert len(msg) == 256 and msg[24 + len(payload):] == bytes(256 - 24 - len(payload))
    assert struct.unpack_from("<IIIIQ", msg) == (0x43555152, 0x7ED8BE82, 32 + 2, 42, 2**63 + 5)
    assert struct.unpack_from("<qqqq", msg, 24) == (3, 7, 0, 9)
    assert msg[56:58] == bytes([0b00001101, 0b1])  # LSB first
    header, body = wire.decode_request(msg, 256)
    assert header == wire.RequestHeader(wire.ENQUEUE_SYNDROMES, 34, 42, 2**63 + 5)
    req = wire.decode_enqueue(body)
    assert (req.decoder_id, req.counter, req.syndrome_mapping_id, req.num_syndromes) == (3, 7, 0, 9)
    assert req.bits.tolist() == [1, 0, 1, 1, 0, 0, 0, 0, 1]


def test_get_corrections_and_reset_payloads():
    p = wire.encode_get_corrections(2, 9, reset=True)
    assert p == struct.pack("<qqB", 2, 9, 1)
    assert wire.decode_get_corrections(p) == wire.GetCorrectionsRequest(2, 9, True)
    assert wire.decode_get_corrections(struct.pack("<qqB", 2, 9, 7)).reset  # any non-zero byte
    assert wire.decode_reset(wire.encode_reset(-1)) == wire.ResetRequest(-1)


def test_response_round_trip_and_corrections():
    result = wire.pack_bits([1, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    msg = wire.encode_response(Status.OK, request_id=9, ptp_timestamp=11, result=result, slot_size=64)
    assert len(msg) == 64
    assert struct.unpack_from("<IiIIQ", msg) == (0x43555153, 0, 2, 9, 11)
    header, body = wire.decode_response(msg, 64)
    assert header == wire.ResponseHeader(0, 2, 9, 11)
    assert wire.decode_corrections(body, 10).tolist() == [1] + [0] * 8 + [1]
    neg = wire.encode_response(-3)
    assert wire.decode_response(neg)[0].status == -3


@pytest.mark.parametrize("message, kind", [
    (b"", "truncated"),
    (struct.pack("<IIII", 0x43555152, 1, 0, 0), "truncated"),  # 16 bytes: no full header
    (struct.pack("<IIIIQ", 0x12345678, wire.RESET_DECODER, 8, 0, 0) + bytes(8), "magic"),
    (struct.pack("<IIIIQ", 0x43555153, wire.RESET_DECODER, 8, 0, 0) + bytes(8), "magic"),  # a response
    (struct.pack("<IIIIQ", 0x43555152, wire.RESET_DECODER, 8, 0, 0) + bytes(4), "truncated"),
    (struct.pack("<IIIIQ", 0x43555152, wire.RESET_DECODER, 1000, 0, 0) + bytes(8), "oversized"),
    (wire.encode_request(wire.RESET_DECODER, bytes(8)) + bytes(300), "oversized"),
])
def test_decode_request_refuses(message, kind):
    with pytest.raises(WireError) as info:
        wire.decode_request(message, slot_size=256)
    assert info.value.kind == kind


def test_payload_refusals():
    with pytest.raises(WireError, match="32 bytes") as info:
        wire.decode_enqueue(bytes(31))
    assert info.value.kind == "truncated"
    for n in (0, -1, wire.MAX_SYNDROME_BITS + 1):
        with pytest.raises(WireError) as info:
            wire.decode_enqueue(struct.pack("<qqqq", 0, 0, 0, n) + bytes(8))
        assert info.value.kind == "invalid"
    with pytest.raises(WireError) as info:
        wire.decode_enqueue(struct.pack("<qqqq", 0, 0, 0, 17) + bytes(2))  # needs 3 bytes of bits
    assert info.value.kind == "truncated"
    with pytest.raises(WireError):
        wire.decode_get_corrections(bytes(16))
    with pytest.raises(WireError):
        wire.decode_reset(bytes(7))
    with pytest.raises(WireError):
        wire.decode_corrections(b"\x01\x00", 3)  # too many bytes for 3 bits
    with pytest.raises(WireError) as info:
        wire.decode_response(struct.pack("<IiIIQ", 0x43555153, 0, 4, 0, 0) + bytes(2))
    assert info.value.kind == "truncated"


def test_encode_refuses_what_does_not_fit():
    with pytest.raises(WireError) as info:
        wire.encode_request(wire.ENQUEUE_SYNDROMES, bytes(233), slot_size=256)
    assert info.value.kind == "oversized"
    assert len(wire.encode_request(wire.ENQUEUE_SYNDROMES, bytes(232), slot_size=256)) == 256
    with pytest.raises(ValueError):
        wire.encode_request(1 << 32, b"")
    with pytest.raises(ValueError):
        wire.pack_bits([0, 2])


def test_pack_unpack_match_numpy_little():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, 77, dtype=np.uint8)
    packed = wire.pack_bits(bits)
    assert len(packed) == 10 == wire.packed_bytes(77)
    assert (wire.unpack_bits(packed, 77) == bits).all()


def test_the_numbers_from_cuqr_h_agree_with_the_spec():
    # wire.py reads them from the core's cuqr.h: check the header against the names and the text
    assert [wire.fnv1a_32(n) for n in ("enqueue_syndromes", "get_corrections", "reset_decoder")] == \
        [wire.ENQUEUE_SYNDROMES, wire.GET_CORRECTIONS, wire.RESET_DECODER]
    # 'CUQR' read as a number (0x43555152), then written little-endian on the wire
    assert (wire.REQUEST_MAGIC, wire.RESPONSE_MAGIC) == (int.from_bytes(b"CUQR", "big"), int.from_bytes(b"CUQS", "big"))
    assert [s.name for s in wire.Status] == ["OK", "INVALID_DECODER", "BAD_REQUEST", "INTERNAL_ERROR", "NOT_READY",
                                             "BUSY", "SYNDROMES_DROPPED"]
    assert list(wire.Status) == list(range(7))
