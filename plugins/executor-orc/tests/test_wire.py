"""The frame codec: headers, fields, limits, reading frames with deadlines, the HMAC tags."""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import threading

import pytest
from backline_executor_orc import wire

from backline_core.sdk import lib


def test_header_round_trip_and_layout():
    data = wire.frame(lib.BL_EXEC_LAUNCH, b"abc")
    assert len(data) == lib.BL_EXECUTOR_HEADER_BYTES + 3
    magic, version, frame_type, length = struct.unpack(">IHHI", data[:12])  # big-endian, the brief's layout
    assert (magic, version, frame_type, length) == (lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION,
                                                    lib.BL_EXEC_LAUNCH, 3)
    assert data[:4] == lib.BL_EXECUTOR_MAGIC.to_bytes(4, "big")
    assert wire.parse_header(data[:12]) == (lib.BL_EXEC_LAUNCH, 3)


def test_bad_headers_are_protocol_errors():
    good = wire.pack_header(lib.BL_EXEC_OK, 0)
    with pytest.raises(wire.ProtocolError, match="bad frame magic"):
        wire.parse_header(b"XXXX" + good[4:])
    other = struct.pack(">IHHI", lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION + 1, lib.BL_EXEC_OK, 0)
    with pytest.raises(wire.ProtocolError, match=f"version {lib.BL_EXECUTOR_PROTOCOL_VERSION + 1}"):
        wire.parse_header(other)
    with pytest.raises(wire.ProtocolError, match="12 bytes"):
        wire.parse_header(good[:5])


def test_limits_per_type():
    name = lib.BL_EXECUTOR_MAX_NAME_BYTES
    assert wire.body_limit(lib.BL_EXEC_SEND_BINARY) == lib.BL_EXECUTOR_MAX_OBJECT_BYTES + name + 3
    assert wire.body_limit(lib.BL_EXEC_LAUNCH) == lib.BL_EXECUTOR_MAX_ARGS_BYTES + 3 * name + 16
    assert wire.body_limit(lib.BL_EXEC_CALL) == wire.body_limit(lib.BL_EXEC_LAUNCH)
    assert wire.body_limit(lib.BL_EXEC_RESULT) == lib.BL_EXECUTOR_MAX_ARGS_BYTES
    for t in (lib.BL_EXEC_AWAIT, lib.BL_EXEC_LAUNCH_ASYNC, lib.BL_EXEC_CLOSE, lib.BL_EXEC_ERROR, 999):
        assert wire.body_limit(t) == lib.BL_EXECUTOR_MAX_SMALL_BYTES


def test_fields_round_trip():
    body = (wire.pack_u8(7) + wire.pack_str("hé") + wire.pack_u32(5) + wire.pack_u64(1 << 40)
            + wire.pack_i32(-15) + b"tail")
    r = wire.Reader(body, "TEST")
    assert (r.u8("a"), r.str("b"), r.u32("c"), r.u64("d"), r.i32("e"), r.rest()) == (7, "hé", 5, 1 << 40, -15, b"tail")
    r.end()
    assert wire.pack_str("") == b"\0\0"


@pytest.mark.parametrize("body, match", [
    (b"\x00", "body ends inside"),
    (b"\x00\x05ab", "body ends inside s"),
    (b"\x00\x02a\x00", "NUL"),
    (b"\x00\x02\xff\xfe", "not UTF-8"),
    (struct.pack(">H", 5000) + b"x" * 5000, "at most"),
])
def test_bad_strings(body, match):
    with pytest.raises(wire.ProtocolError, match=match):
        wire.Reader(body, "TEST").str("s")


def test_strings_that_cannot_be_sent():
    with pytest.raises(ValueError, match="NUL"):
        wire.pack_str("a\0b")
    with pytest.raises(ValueError, match="at most"):
        wire.pack_str("x" * (lib.BL_EXECUTOR_MAX_NAME_BYTES + 1))
    with pytest.raises(wire.ProtocolError, match="unexpected bytes"):
        wire.Reader(b"ab", "TEST").end()


def test_messages_are_fitted():
    long = "é" * lib.BL_EXECUTOR_MAX_NAME_BYTES  # 2 bytes each
    fitted = wire.fit_str(long + "\0")
    assert len(fitted.encode()) <= lib.BL_EXECUTOR_MAX_NAME_BYTES and fitted.endswith("...")
    r = wire.Reader(wire.error_body(lib.BL_EINVAL, "bad\0thing"), "ERROR")
    assert (r.i32("status"), r.str("message")) == (lib.BL_EINVAL, "bad\\0thing")


def test_tags_are_the_trust_transcript_bound_to_the_addresses():
    k, ns, nc = b"k" * 32, b"s" * 32, b"c" * 32
    client, server = b"\0" * 10 + b"\xff\xff\x7f\0\0\1" + b"\x9c\x40", b"\0" * 15 + b"\1" + b"\x23\x28"

    def want(side: bytes) -> bytes:  # backline/trust.h's T(side), written out by hand
        t = b"backline-trust/1 " + side + bytes([8]) + b"executor" + ns + nc + client + server + b"\0\0"
        return hmac.new(k, t, hashlib.sha256).digest()

    assert wire.client_tag(k, ns, nc, client, server) == want(b"client")
    assert wire.server_tag(k, ns, nc, client, server) == want(b"server")
    other = client[:-1] + b"\x41"  # the same client on another port: a relay's connection
    assert wire.client_tag(k, ns, nc, other, server) != want(b"client")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_read_frame(pair):
    a, b = pair
    a.sendall(wire.frame(lib.BL_EXEC_AWAIT, b"x" * 12) + wire.frame(lib.BL_EXEC_CLOSE))
    assert wire.read_frame(b) == (lib.BL_EXEC_AWAIT, b"x" * 12)
    assert wire.read_frame(b) == (lib.BL_EXEC_CLOSE, b"")
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(wire.PeerClosed):
        wire.read_frame(b)


def test_oversized_frame_is_refused_unread(pair):
    a, b = pair
    a.sendall(wire.pack_header(lib.BL_EXEC_AWAIT, lib.BL_EXECUTOR_MAX_SMALL_BYTES + 1) + b"next")
    with pytest.raises(wire.FrameTooBig) as info:
        wire.read_frame(b)
    assert info.value.status == lib.BL_ETOOBIG
    assert b.recv(4) == b"next"  # the body was not read


def test_truncated_frame(pair):
    a, b = pair
    a.sendall(wire.pack_header(lib.BL_EXEC_LAUNCH, 100) + b"short")
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(wire.ProtocolError, match="truncated frame") as info:
        wire.read_frame(b)
    assert info.value.status == lib.BL_EPEER


def test_header_split_across_writes(pair):
    a, b = pair
    data = wire.frame(lib.BL_EXEC_TOKEN, wire.pack_u64(9))

    def dribble():
        for byte in data:
            a.send(bytes([byte]))

    t = threading.Thread(target=dribble)
    t.start()
    try:
        assert wire.read_frame(b) == (lib.BL_EXEC_TOKEN, wire.pack_u64(9))
    finally:
        t.join(10)


def test_idle_deadline(pair):
    import time

    _, b = pair
    with pytest.raises(wire.ProtocolError, match="no frame") as info:
        wire.read_frame(b, idle_deadline=time.monotonic() + 0.05)
    assert info.value.status == lib.BL_ETIMEOUT


def test_large_frame_is_sent_whole(pair):
    a, b = pair
    body = bytes(range(256)) * 1024
    t = threading.Thread(target=wire.send_frame, args=(a, lib.BL_EXEC_SEND_BINARY, body))
    t.start()
    try:
        assert wire.read_frame(b) == (lib.BL_EXEC_SEND_BINARY, body)
    finally:
        t.join(30)
