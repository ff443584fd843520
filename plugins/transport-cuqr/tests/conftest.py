"""Fixtures of the cuqr transport's tests; first a minimal CUQR decoding server over UDP, written from the spec (docs/cudaq-interop.md) with struct
and socket only: the numbers come from backline/sdk/cuqr.h, nothing from backline_qec.

Its decoder is a known rule: observable o flips when the syndrome bits i with i % return_size == o
have odd parity. ``misbehave`` makes it answer wrongly, for the fault tests."""

from __future__ import annotations

import os
import socket
import struct
import threading
import types

import pytest
from cffi import FFI

import backline_core
from backline_core.sdk import cdef_from_header

_ffi = FFI()
with open(os.path.join(backline_core.get_include(), "backline", "sdk", "cuqr.h")) as _fh:
    _ffi.cdef(cdef_from_header(_fh.read()))
CUQR = _ffi.dlopen(None)  # #define constants only: no symbol is looked up

REQUEST = struct.Struct("<IIIIQ")   # magic, function_id, arg_len, request_id, ptp_timestamp
RESPONSE = struct.Struct("<IiIIQ")  # magic, status, result_len, request_id, ptp_timestamp
ENQUEUE = struct.Struct("<qqqq")    # decoder_id, counter, syndrome_mapping_id, num_syndromes
GET = struct.Struct("<qqB")         # decoder_id, return_size, reset
RESET = struct.Struct("<q")         # decoder_id


def parity_rule(bits: list[int], return_size: int) -> list[int]:
    """The flips the rule gives: observable o is the parity of bits o, o + return_size, ..."""
    return [sum(bits[o::return_size]) % 2 for o in range(return_size)]


def pack(bits: list[int]) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for i, b in enumerate(bits):
        out[i // 8] |= (b & 1) << (i % 8)
    return bytes(out)


def unpack(data: bytes, n: int) -> list[int]:
    return [(data[i // 8] >> (i % 8)) & 1 for i in range(n)]


class MiniServer:
    """Serves on 127.0.0.1:<port> in a thread until :meth:`close`.

    ``misbehave``: None (answers right), ``("status", FUNCTION_ID, STATUS)`` (that handler answers
    STATUS), ``"wrong_id"`` (each response carries another request id), ``"junk"`` (answers junk
    datagrams only), ``"junk_then_right"`` (junk, a stale id, then the right response)."""

    def __init__(self, decoders: int = 2, slot: int = CUQR.CUQR_DEFAULT_SLOT_SIZE, misbehave=None) -> None:
        self.slot, self.decoders, self.misbehave = slot, decoders, misbehave
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)  # so the loop sees the stop flag
        self.port = self.sock.getsockname()[1]
        self.requests: list[tuple[int, tuple]] = []  # (function_id, parsed arguments)
        self.shot: dict[int, list[int] | None] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65536)
            except (socket.timeout, OSError):
                continue
            if len(data) != self.slot or len(data) < REQUEST.size:
                continue  # one datagram is one whole slot
            magic, fn, arg_len, rid, ptp = REQUEST.unpack_from(data)
            if magic != CUQR.CUQR_REQUEST_MAGIC or REQUEST.size + arg_len > len(data):
                continue
            status, result = self._handle(fn, data[REQUEST.size:REQUEST.size + arg_len])
            if isinstance(self.misbehave, tuple) and self.misbehave[1] == fn:
                status, result = self.misbehave[2], b""
            replies = [self._response(status, result, rid, ptp)]
            if self.misbehave == "wrong_id":
                replies = [self._response(status, result, rid ^ 0x5A5A, ptp)]
            elif self.misbehave == "junk":
                replies = [b"\x00" * 5, b"junk" * (self.slot // 4), b"\xff" * (self.slot + 9)]
            elif self.misbehave == "junk_then_right":
                replies = [b"junk" * (self.slot // 4), self._response(status, result, rid - 1, ptp), replies[0]]
            for reply in replies:
                self.sock.sendto(reply, peer)

    def _response(self, status: int, result: bytes, rid: int, ptp: int) -> bytes:
        msg = RESPONSE.pack(CUQR.CUQR_RESPONSE_MAGIC, status, len(result), rid, ptp) + result
        return msg + bytes(self.slot - len(msg))

    def _handle(self, fn: int, args: bytes) -> tuple[int, bytes]:
        if fn == CUQR.CUQR_FN_ENQUEUE_SYNDROMES:
            decoder, counter, mapping, n = ENQUEUE.unpack_from(args)
            self.requests.append((fn, (decoder, counter, mapping, n)))
            if not 0 <= decoder < self.decoders:
                return CUQR.CUQR_INVALID_DECODER, b""
            self.shot[decoder] = unpack(args[ENQUEUE.size:], n)
            return CUQR.CUQR_OK, b""
        if fn == CUQR.CUQR_FN_GET_CORRECTIONS:
            decoder, size, reset = GET.unpack_from(args)
            self.requests.append((fn, (decoder, size, reset)))
            if not 0 <= decoder < self.decoders:
                return CUQR.CUQR_INVALID_DECODER, b""
            bits = self.shot.get(decoder)
            if bits is None:
                return CUQR.CUQR_NOT_READY, b""
            if reset:
                self.shot[decoder] = None
            return CUQR.CUQR_OK, pack(parity_rule(bits, size))
        if fn == CUQR.CUQR_FN_RESET_DECODER:
            (decoder,) = RESET.unpack_from(args)
            self.requests.append((fn, (decoder,)))
            if not 0 <= decoder < self.decoders:
                return CUQR.CUQR_INVALID_DECODER, b""
            self.shot[decoder] = None
            return CUQR.CUQR_OK, b""
        return CUQR.CUQR_BAD_REQUEST, b""

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close()
        assert not self.thread.is_alive()


@pytest.fixture
def kit() -> types.SimpleNamespace:
    """The server and its helpers (a test module cannot import this one under --import-mode=importlib)."""
    return types.SimpleNamespace(MiniServer=MiniServer, CUQR=CUQR, parity_rule=parity_rule, pack=pack, unpack=unpack)


@pytest.fixture
def mini_server():
    """``mini_server(**kwargs)`` starts a MiniServer; every one is closed at the test's end."""
    started: list[MiniServer] = []

    def start(**kwargs) -> MiniServer:
        started.append(MiniServer(**kwargs))
        return started[-1]

    yield start
    for server in started:
        server.close()
