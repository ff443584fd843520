"""Their decoding session's corners (cudaqx DecodingSession.cpp, decoder.cpp's accumulation) and routing,
in the native session (cuqr_session.c) driven by whole slots."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from backline_qec.cudaq import wire
from backline_qec.cudaq.session import COLLECTING, FAILED, RESULT_READY, Session, SessionDecoder
from backline_qec.cudaq.wire import Status

# 3 detectors from 5 measurements; 2 observables: obs0 = det0 ^ det2, obs1 = det1
D = np.array([[1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 1]], dtype=np.uint8)


class Decode:
    """A decode that records its inputs: packed detectors -> packed observables."""

    def __init__(self, fail: bool = False, reply_bytes: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.fail, self.reply_bytes = fail, reply_bytes

    def __call__(self, packed: bytes) -> bytes:
        det = wire.unpack_bits(packed, 3)
        self.calls.append(det.tolist())
        if self.fail:
            raise RuntimeError("the decoder broke")
        out = wire.pack_bits([det[0] ^ det[2], det[1]])
        return out if self.reply_bytes is None else bytes(self.reply_bytes)


class S:
    """One decoder of a native session, driven by whole request slots as a client sends them."""

    def __init__(self, decode, num_measurements=5, num_observables=2, d=D, slot=128) -> None:
        self.s = Session([SessionDecoder(0, num_measurements, num_observables, decode, d)], slot)
        self.slot = slot

    def call(self, function_id: int, payload: bytes) -> tuple[int, bytes]:
        out = self.s.handle(wire.encode_request(function_id, payload, request_id=3, ptp_timestamp=4,
                                                slot_size=self.slot))
        header, result = wire.decode_response(out, self.slot)
        assert len(out) == self.slot and (header.request_id, header.ptp_timestamp) == (3, 4)
        return Status(header.status), result

    def enqueue(self, bits, mapping=0) -> Status:
        return self.call(wire.ENQUEUE_SYNDROMES, wire.encode_enqueue(0, bits, syndrome_mapping_id=mapping))[0]

    def get_corrections(self, n, reset=False) -> tuple[Status, bytes]:
        return self.call(wire.GET_CORRECTIONS, wire.encode_get_corrections(0, n, reset))

    def reset(self) -> Status:
        return self.call(wire.RESET_DECODER, wire.encode_reset(0))[0]

    @property
    def state(self) -> str:
        return self.s.info(0).state

    @property
    def last_error(self) -> str | None:
        return self.s.info(0).last_error

    @property
    def counts(self) -> dict[str, int]:
        return self.s.info(0).counts


def enq(bits, mapping=0):
    return (bits, mapping)


def session(decode=None, d=D) -> S:
    return S(decode or Decode(), d=d)


def test_measurements_accumulate_and_the_completing_enqueue_decodes():
    dec = Decode()
    s = session(dec)
    assert s.get_corrections(2) == (Status.NOT_READY, b"")  # nothing yet
    assert s.enqueue(*enq([1, 0])) == Status.OK
    assert s.enqueue(*enq([0])) == Status.OK and dec.calls == [] and s.state == COLLECTING
    assert s.get_corrections(2)[0] == Status.NOT_READY
    assert s.enqueue(*enq([1, 0])) == Status.OK
    # m = 1 0 0 1 0: D m = (1, 0, 1) -> obs = (0, 0)
    assert dec.calls == [[1, 0, 1]] and s.state == RESULT_READY
    assert s.get_corrections(2) == (Status.OK, bytes([0b00]))


def test_without_d_the_measurements_are_the_detectors():
    dec = Decode()
    s = S(dec, num_measurements=3, d=None)
    s.enqueue(*enq([1, 1, 0]))
    assert dec.calls == [[1, 1, 0]]
    assert s.get_corrections(2) == (Status.OK, bytes([0b11]))


def test_corrections_xor_accumulate_until_cleared():
    s = session()
    s.enqueue(*enq([1, 0, 0, 0, 0]))  # det (1, 0, 0): obs (1, 0)
    assert s.get_corrections(2) == (Status.OK, b"\x01")
    assert s.get_corrections(2) == (Status.OK, b"\x01")  # without reset: still ready, the same
    s.enqueue(*enq([0, 0, 0, 1, 0]))  # det (0, 0, 1): obs (1, 0), XORed in: (0, 0)
    assert s.get_corrections(2) == (Status.OK, b"\x00")
    s.enqueue(*enq([0, 0, 1, 0, 0]))  # det (0, 1, 0): obs (0, 1)
    assert s.get_corrections(2, reset=True) == (Status.OK, b"\x02")
    assert s.get_corrections(2)[0] == Status.NOT_READY  # reset=1 clears and waits for the next shot
    s.enqueue(*enq([0, 0, 0, 0, 0]))
    assert s.get_corrections(2) == (Status.OK, b"\x00")


def test_a_new_enqueue_makes_the_old_result_not_ready():
    s = session()
    s.enqueue(*enq([1, 0, 0, 0, 0]))
    s.enqueue(*enq([0, 0]))
    assert s.get_corrections(2)[0] == Status.NOT_READY


def test_too_many_measurements_latch_a_failure_until_reset():
    dec = Decode()
    s = session(dec)
    s.enqueue(*enq([1, 1, 1]))
    assert s.enqueue(*enq([1, 1, 1])) == Status.OK  # the reply still says OK
    assert s.state == FAILED and dec.calls == [] and "exceed" in s.last_error
    assert s.get_corrections(2) == (Status.INTERNAL_ERROR, b"")
    assert s.get_corrections(2, reset=True)[0] == Status.INTERNAL_ERROR  # sticky
    assert s.enqueue(*enq([0, 0, 0, 0, 0])) == Status.OK and dec.calls == []  # ignored while failed
    assert s.reset() == Status.OK and s.state == COLLECTING
    s.enqueue(*enq([0, 0, 1, 0, 0]))
    assert s.get_corrections(2) == (Status.OK, b"\x02")


def test_one_enqueue_larger_than_a_shot_fails_too():
    s = session()
    assert s.enqueue(*enq([0] * 6)) == Status.OK
    assert s.get_corrections(2)[0] == Status.INTERNAL_ERROR


@pytest.mark.parametrize("decode", [Decode(fail=True), Decode(reply_bytes=2)])
def test_a_failed_decode_is_latched_and_reported_at_get_corrections(decode):
    s = session(decode)
    assert s.enqueue(*enq([1, 0, 0, 0, 0])) == Status.OK
    assert s.state == FAILED and s.counts["error"] == 1
    assert s.get_corrections(2)[0] == Status.INTERNAL_ERROR
    s.reset()
    assert s.get_corrections(2)[0] == Status.NOT_READY


def test_a_syndrome_mapping_other_than_identity_is_a_bad_request_and_fails_the_shot():
    s = session()
    assert s.enqueue(*enq([1], mapping=1)) == Status.BAD_REQUEST
    assert s.get_corrections(2)[0] == Status.INTERNAL_ERROR


def test_get_corrections_checks_in_their_order():
    s = session()
    assert s.get_corrections(0)[0] == Status.BAD_REQUEST
    assert s.get_corrections(3)[0] == Status.BAD_REQUEST  # not the observable count
    assert s.get_corrections(1)[0] == Status.BAD_REQUEST
    s.enqueue(*enq([0] * 6))  # failed
    assert s.get_corrections(-1)[0] == Status.BAD_REQUEST  # return_size is checked first
    assert s.get_corrections(3)[0] == Status.INTERNAL_ERROR  # then the latched failure
    s.reset()
    s.enqueue(*enq([0] * 5))
    assert s.get_corrections(2)[0] == Status.OK


def test_corrections_larger_than_the_slot_are_an_internal_error():
    # 57 bytes hold a 1-bit enqueue; 300 corrections need 38 result bytes, the slot has 33
    s = S(lambda packed: bytes(38), num_measurements=1, num_observables=300, d=None, slot=57)
    assert s.enqueue([1]) == Status.OK
    assert s.get_corrections(300)[0] == Status.INTERNAL_ERROR  # truncating would hand back bits never written

def test_reset_drops_a_partial_shot_and_the_corrections():
    dec = Decode()
    s = session(dec)
    s.enqueue(*enq([1, 0, 0, 0, 0]))
    s.enqueue(*enq([1, 1]))
    s.reset()
    s.enqueue(*enq([0, 0, 1, 0, 0]))
    assert len(dec.calls) == 2 and s.get_corrections(2) == (Status.OK, b"\x02")


# -- routing whole slots ---------------------------------------------------------------------

SLOT = 128


def request(function_id: int, payload: bytes, request_id: int = 5, ptp: int = 77) -> bytes:
    return struct.pack("<IIIIQ", 0x43555152, function_id, len(payload), request_id, ptp) + payload


def reply(message: bytes | None) -> tuple[int, int, int, bytes]:
    assert message is not None and len(message) == SLOT  # a whole slot
    magic, status, n, rid, ptp = struct.unpack_from("<IiIIQ", message)
    assert magic == 0x43555153
    return status, rid, ptp, message[24:24 + n]


class Dispatcher:
    """Two decoders in one native session, as a server routes whole slots to them."""

    def __init__(self) -> None:
        self.s = Session([SessionDecoder(0, 5, 2, Decode(), D), SessionDecoder(4, 3, 2, Decode())], SLOT)

    def handle(self, message: bytes) -> bytes | None:
        return self.s.handle(message)

    @property
    def dropped(self):
        return self.s.counts()[0]

    @property
    def malformed(self):
        return self.s.counts()[1]


def dispatcher() -> tuple[Dispatcher, list[str]]:
    return Dispatcher(), []


def test_dispatch_routes_by_decoder_id_and_echoes_the_request():
    d, _ = dispatcher()
    enqueue = struct.pack("<qqqq", 4, 0, 0, 3) + bytes([0b011])
    assert reply(d.handle(request(0x7ED8BE82, enqueue, 1, 2**64 - 1))) == (0, 1, 2**64 - 1, b"")
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qqB", 4, 2, 1), 2, 3))) == (0, 2, 3, b"\x03")
    assert reply(d.handle(request(0x977A59CF, struct.pack("<q", 4), 0xFFFFFFFF, 0))) == (0, 0xFFFFFFFF, 0, b"")
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qqB", 9, 2, 0))))[0] == Status.INVALID_DECODER
    assert reply(d.handle(request(0x977A59CF, struct.pack("<q", -1))))[0] == Status.INVALID_DECODER
    # bytes past arg_len are the slot's padding
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qqB", 0, 2, 0)) + bytes(50)))[0] == Status.NOT_READY


def test_dispatch_drops_what_has_no_readable_header_and_counts_it():
    d, logs = dispatcher()
    for junk in (b"", b"hello", bytes(23), struct.pack("<IIIIQ", 0xDEADBEEF, 0x977A59CF, 8, 1, 0) + bytes(8),
                 request(0x977A59CF, bytes(8)) + bytes(SLOT), request(0x12345678, bytes(8))):
        assert d.handle(junk) is None
    assert d.dropped == {"truncated": 3, "magic": 1, "oversized": 1, "function": 1}
    d.handle(b"x")
    assert d.dropped["truncated"] == 4


def test_dispatch_answers_a_malformed_payload_bad_request():
    d, _ = dispatcher()
    assert reply(d.handle(request(0x977A59CF, b"\x00" * 4)))[0] == Status.BAD_REQUEST  # no decoder_id
    truncated = request(0x882D5BA1, struct.pack("<qqB", 0, 2, 0))[:-3]  # shorter than arg_len
    assert reply(d.handle(truncated))[:2] == (Status.BAD_REQUEST, 5)
    too_long = struct.pack("<IIIIQ", 0x43555152, 0x977A59CF, 500, 1, 0) + struct.pack("<q", 0)
    assert reply(d.handle(too_long))[0] == Status.BAD_REQUEST  # arg_len beyond the slot
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qq", 0, 2))))[0] == Status.BAD_REQUEST  # 16 of 17
    assert d.malformed == {"truncated": 3, "oversized": 1}
    # a malformed enqueue fails the decoder's shot, as theirs
    assert reply(d.handle(request(0x7ED8BE82, struct.pack("<qqqq", 0, 0, 0, 0))))[0] == Status.BAD_REQUEST
    assert d.malformed["invalid"] == 1
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qqB", 0, 2, 0))))[0] == Status.INTERNAL_ERROR
    assert reply(d.handle(request(0x977A59CF, struct.pack("<q", 0))))[0] == Status.OK
    assert reply(d.handle(request(0x882D5BA1, struct.pack("<qqB", 0, 2, 0))))[0] == Status.NOT_READY
