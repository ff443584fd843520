"""The wire format (docs/wire-format.md) as the core actually writes it.

The frame header is checked through the cffi binding; the rings are read byte by byte
after real rounds over the minimal backend compiled in conftest.py (no transport plugin).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from backline_core._builtins import echo, steane
from backline_core._errors import FunctionError, UnknownDecoderError
from backline_core._abi import ffi, lib

HEADER = struct.Struct("<QIIiIq")  # seq, len, decoder_id, status, flags, fn_status
FIELDS = [("seq", 0, "uint64_t"), ("len", 8, "uint32_t"), ("decoder_id", 12, "uint32_t"),
          ("status", 16, "int32_t"), ("flags", 20, "uint32_t"), ("fn_status", 24, "int64_t")]


def header(buf, slot: int, slot_bytes: int) -> dict[str, int]:
    values = HEADER.unpack_from(buf, slot * slot_bytes)
    return dict(zip((name for name, _, _ in FIELDS), values))


def payload(buf, slot: int, slot_bytes: int, n: int) -> bytes:
    start = slot * slot_bytes + 32
    return bytes(buf[start:start + n])


# ---- the header struct --------------------------------------------------------------------

def test_header_size_matches_the_constant():
    assert ffi.sizeof("bl_frame_header") == 32 == lib.BL_FRAME_HEADER_BYTES
    assert HEADER.size == 32
    assert lib.BL_SLOT_ALIGN == 64
    assert lib.BL_MAX_DECODERS == 256


@pytest.mark.parametrize("name,offset,ctype", FIELDS)
def test_header_field_offsets(name, offset, ctype):
    assert ffi.offsetof("bl_frame_header", name) == offset
    fields = dict(ffi.typeof("bl_frame_header").fields)
    assert fields[name].offset == offset
    assert fields[name].type.cname == ctype


def test_header_field_order_is_complete():
    assert [name for name, _ in ffi.typeof("bl_frame_header").fields] == [f[0] for f in FIELDS]


def test_header_is_little_endian_in_memory():
    h = ffi.new("bl_frame_header *", {"seq": 0x0102030405060708, "len": 0x0A0B0C0D, "decoder_id": 2,
                                       "status": -11, "flags": 0, "fn_status": -3})
    raw = bytes(ffi.buffer(h))
    assert raw == bytes.fromhex("0807060504030201" "0d0c0b0a" "02000000" "f5ffffff" "00000000" "fdffffffffffffff")
    assert HEADER.unpack(raw) == (0x0102030405060708, 0x0A0B0C0D, 2, -11, 0, -3)


def test_the_architecture_page_states_this_abi():
    # fn_status was `uint64_t reserved` before ABI 3.1: the same bytes, so a 3.0 peer interoperates
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert f"ABI {lib.BACKLINE_ABI_VERSION}.{lib.BACKLINE_ABI_MINOR}" in text


# ---- the rings after real rounds ---------------------------------------------------------------

def test_request_and_reply_slots_after_a_round(pairs, stub_backend):
    key, _, ctl = pairs.pair()
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    assert (rings["slots"], sb) == (64, 256)  # the defaults
    assert rings["request_addr"] % 64 == 0 and rings["reply_addr"] % 64 == 0
    assert header(rings["request"], 0, sb)["seq"] == 0  # never written

    assert ctl.round(b"hello", decoder_id=1) == b"hello"
    assert header(rings["request"], 0, sb) == {"seq": 1, "len": 5, "decoder_id": 1, "status": 0, "flags": 0, "fn_status": 0}
    assert payload(rings["request"], 0, sb, 5) == b"hello"
    assert header(rings["reply"], 0, sb) == {"seq": 1, "len": 5, "decoder_id": 1, "status": 0, "flags": 0, "fn_status": 0}
    assert payload(rings["reply"], 0, sb, 5) == b"hello"

    assert ctl.round(bytes([0b010]), decoder_id=2) == b"\x10"  # steane: check 1 -> qubit 4
    assert header(rings["request"], 1, sb) == {"seq": 2, "len": 1, "decoder_id": 2, "status": 0, "flags": 0, "fn_status": 0}
    assert payload(rings["request"], 1, sb, 1) == b"\x02"
    assert header(rings["reply"], 1, sb) == {"seq": 2, "len": 1, "decoder_id": 2, "status": 0, "flags": 0, "fn_status": 0}
    assert payload(rings["reply"], 1, sb, 1) == b"\x10"
    for slot in range(2, 64):
        assert header(rings["request"], slot, sb)["seq"] == 0
        assert header(rings["reply"], slot, sb)["seq"] == 0


def test_header_struct_view_agrees_with_the_bytes(pairs, stub_backend):
    key, _, ctl = pairs.pair()
    ctl.round(b"abc", decoder_id=0)
    rings = stub_backend.rings(key)
    h = ffi.cast("bl_frame_header *", rings["reply_addr"])
    assert (h.seq, h.len, h.decoder_id, h.status, h.flags, h.fn_status) == (1, 3, 0, 0, 0, 0)


def test_worked_steane_example_byte_dump(pairs, stub_backend):
    """The byte dump in docs/wire-format.md: round 1, steane on decoder_id 0, syndrome 0x02."""
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(steane())  # decoder_ids 0 and 1, as Session.open(functions=["steane"]) binds it
    cop.start()
    ctl = pairs.controller(key, in_bytes=1, out_bytes=1)
    assert ctl.round(b"\x02") == b"\x10"
    rings = stub_backend.rings(key)
    request = bytes(rings["request"][0:33])
    reply = bytes(rings["reply"][0:33])
    assert request.hex(" ") == (
        "01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 "
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02"
    )
    assert reply.hex(" ") == (
        "01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 "
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 10"
    )
    assert ctl.round(b"\x01") == b"\x01"  # check 0 alone -> qubit 0


def test_variable_payload_lengths_per_round(pairs, stub_backend):
    key, _, ctl = pairs.pair(in_bytes=224, out_bytes=224)
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    lengths = [1, 7, 32, 0, 100, 224, 3]
    for i, n in enumerate(lengths):
        data = bytes((i * 31 + b) % 256 for b in range(n))
        assert ctl.round(data) == data
        slot = i  # seq i + 1
        assert header(rings["request"], slot, sb)["len"] == n
        assert header(rings["reply"], slot, sb)["len"] == n
        assert payload(rings["request"], slot, sb, n) == data
        assert payload(rings["reply"], slot, sb, n) == data


def test_slot_reuse_wraps_after_slots_rounds(pairs, stub_backend):
    key, _, ctl = pairs.pair(cop_config="slots=4")
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    assert rings["slots"] == 4
    sent = {}
    for seq in range(1, 11):
        data = f"round {seq}".encode()
        sent[seq] = data
        assert ctl.round(data) == data
        slot = (seq - 1) & 3
        assert header(rings["request"], slot, sb)["seq"] == seq
        assert header(rings["reply"], slot, sb)["seq"] == seq
    # after 10 rounds: slot 0 <- 9, slot 1 <- 10, slot 2 <- 7, slot 3 <- 8
    for slot, seq in enumerate([9, 10, 7, 8]):
        for ring in ("request", "reply"):
            h = header(rings[ring], slot, sb)
            assert (h["seq"], h["len"]) == (seq, len(sent[seq]))
            assert payload(rings[ring], slot, sb, h["len"]) == sent[seq]


def test_config_geometry_changes_the_stride(pairs, stub_backend):
    key, _, ctl = pairs.pair(cop_config="slots=8;slot_bytes=128", in_bytes=96, out_bytes=96)
    rings = stub_backend.rings(key)
    assert (rings["slots"], rings["slot_bytes"]) == (8, 128)
    assert len(rings["request"]) == 8 * 128
    for seq in (1, 2, 3):
        ctl.round(bytes([seq]) * 96)
    raw = bytes(rings["request"])
    for seq in (1, 2, 3):
        base = (seq - 1) * 128
        assert struct.unpack_from("<Q", raw, base)[0] == seq
        assert raw[base + 32:base + 128] == bytes([seq]) * 96  # payload capacity = 128 - 32
    assert raw[3 * 128:] == bytes(5 * 128)  # untouched slots


def test_request_is_published_before_the_reply(pairs, stub_backend):
    key, cop, ctl = pairs.pair()
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    stub_backend.lib.tb_set_auto_deliver(0)
    ctl.stage_payload(b"staged", decoder_id=1)
    # staged, not posted: payload and header fields written, seq not yet
    h = header(rings["request"], 0, sb)
    assert (h["seq"], h["len"], h["decoder_id"]) == (0, 6, 1)
    ctl.post()
    assert header(rings["request"], 0, sb)["seq"] == 1
    assert header(rings["reply"], 0, sb)["seq"] == 0
    assert cop.serve_pending() == 1
    assert header(rings["reply"], 0, sb)["seq"] == 1
    assert ctl.collect() == b"staged"


def test_error_replies(pairs, stub_backend):
    key, _, ctl = pairs.pair()
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    with pytest.raises(UnknownDecoderError):
        ctl.round(b"x", decoder_id=9)  # nothing bound to 9
    assert header(rings["reply"], 0, sb) == {"seq": 1, "len": 0, "decoder_id": 9, "status": lib.BL_EDECODER,
                                             "flags": 0, "fn_status": 0}
    with pytest.raises(FunctionError):
        ctl.round(b"\x01\x02", decoder_id=2)  # steane returns 2 for a 2-byte syndrome
    assert header(rings["reply"], 1, sb) == {"seq": 2, "len": 0, "decoder_id": 2, "status": lib.BL_EFN,
                                             "flags": 0, "fn_status": 2}
    assert ctl.round(b"\x07", decoder_id=2) == b"\x04"
    assert header(rings["reply"], 2, sb)["fn_status"] == 0  # a success clears it


def test_sequence_continues_across_controllers(pairs, stub_backend):
    key = pairs.key()
    cop = pairs.coprocessor(key, "slots=4")
    first = pairs.controller(key)
    for i in range(5):
        first.round(bytes([i]))
    first.destroy()
    second = pairs.controller(key)
    rings = stub_backend.rings(key)
    sb = rings["slot_bytes"]
    assert second.round(b"next") == b"next"
    h = header(rings["request"], (6 - 1) & 3, sb)
    assert (h["seq"], h["len"]) == (6, 4)
    assert header(rings["reply"], 1, sb)["seq"] == 6
    for i in range(6):  # and keeps wrapping from there
        assert second.round(bytes([i])) == bytes([i])
    assert header(rings["request"], (12 - 1) & 3, sb)["seq"] == 12
    cop.destroy()


def test_coprocessor_functions_bound_per_decoder_id(pairs, stub_backend):
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(echo(), decoder_ids=[255])
    cop.start()
    ctl = pairs.controller(key)
    assert ctl.round(b"top", decoder_id=255) == b"top"
    h = header(stub_backend.rings(key)["reply"], 0, 256)
    assert h["decoder_id"] == 255
