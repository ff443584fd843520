"""The executor client (executor.h, executor_*.c in libbackline) against a protocol peer.

The real server is the backline-executor-orc plugin; these tests need only the core. The
peer below is the server side of protocol version 2 written from the protocol's text
(docs/executor-protocol.md, backline/trust.h) with ``hmac``/``secrets``: it checks every
byte the client sends (frame headers, the AUTH proof, request bodies) and records what does
not conform, and it answers with what each test scripts, including replies a broken server
might send. Constants come from the header through cffi, except the transcript's label
(a string, which cffi's cdef does not carry), restated here from trust.h.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from backline_core._native import ffi, lib

LABEL = b"backline-trust/1 "
SECRET = b"correct horse battery staple, 32"
PEER_WAIT_S = 10.0  # the peer's own socket deadline: a broken client fails the test, never hangs it

# request type -> the largest body the protocol allows for it
REQUEST_LIMITS = {
    lib.BL_EXEC_SEND_BINARY: lib.BL_EXECUTOR_MAX_OBJECT_BYTES + lib.BL_EXECUTOR_MAX_NAME_BYTES + 3,
    lib.BL_EXEC_LAUNCH: lib.BL_EXECUTOR_MAX_ARGS_BYTES + 3 * lib.BL_EXECUTOR_MAX_NAME_BYTES + 16,
    lib.BL_EXEC_CALL: lib.BL_EXECUTOR_MAX_ARGS_BYTES + 3 * lib.BL_EXECUTOR_MAX_NAME_BYTES + 16,
    lib.BL_EXEC_LAUNCH_ASYNC: lib.BL_EXECUTOR_MAX_SMALL_BYTES,
    lib.BL_EXEC_AWAIT: lib.BL_EXECUTOR_MAX_SMALL_BYTES,
    lib.BL_EXEC_CLOSE: lib.BL_EXECUTOR_MAX_SMALL_BYTES,
}


def frame(kind: int, body: bytes = b"", version: int | None = None, length: int | None = None) -> bytes:
    """One frame: the 12-byte big-endian header, then the body."""
    v = lib.BL_EXECUTOR_PROTOCOL_VERSION if version is None else version
    n = len(body) if length is None else length
    return struct.pack(">IHHI", lib.BL_EXECUTOR_MAGIC, v, kind, n) + body


def address(name: tuple) -> bytes:
    """An IPv4 socket address as trust.h's transcript has it: ::ffff:a.b.c.d and the port."""
    return b"\0" * 10 + b"\xff\xff" + socket.inet_aton(name[0]) + struct.pack(">H", name[1])


def proof(secret: bytes, side: bytes, ns: bytes, nc: bytes, conn: socket.socket) -> bytes:
    """trust.h's tag over protocol "executor", the nonces, the connection's addresses and no context."""
    t = (LABEL + side + bytes([8]) + b"executor" + ns + nc + address(conn.getpeername())
         + address(conn.getsockname()) + b"\0\0")
    return hmac.new(secret, t, hashlib.sha256).digest()


def pstr(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def error_reply(status: int, message: str) -> bytes:
    return frame(lib.BL_EXEC_ERROR, struct.pack(">i", status) + pstr(message.encode()))


class Reader:
    """Reads a request body field by field, as the protocol lays it out."""

    def __init__(self, body: bytes) -> None:
        self.body, self.at = body, 0

    def take(self, n: int) -> bytes:
        assert self.at + n <= len(self.body), f"body of {len(self.body)} bytes ends before byte {self.at + n}"
        out = self.body[self.at:self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack(">Q", self.take(8))[0]

    def str(self) -> bytes:
        data = self.take(struct.unpack(">H", self.take(2))[0])
        assert b"\0" not in data and len(data) <= lib.BL_EXECUTOR_MAX_NAME_BYTES
        return data

    def rest(self) -> bytes:
        return self.take(len(self.body) - self.at)


def recv_exact(conn: socket.socket, n: int) -> bytes | None:
    """n bytes, or None at EOF (a reset counts: a client that stops reading closes with a RST)."""
    data = b""
    while len(data) < n:
        try:
            chunk = conn.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


# handler(type, body) -> the reply frame, or None to close the connection
Handler = Callable[[int, bytes], "bytes | None"]


@dataclass
class Peer:
    """A server of protocol 2 on 127.0.0.1:0 for `connections` connections, on a thread.

    ``mode``: "ok" (a correct server), "silent" (accepts, sends nothing), "version1"
    (a HELLO of protocol version 1), "bad_welcome" (checks AUTH, answers a WELCOME whose
    tag is not the secret's).
    """

    secret: bytes = SECRET
    handler: Handler | None = None
    mode: str = "ok"
    connections: int = 1
    requests: list[tuple[int, bytes]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the client's bytes that broke the protocol
    client_nonces: list[bytes] = field(default_factory=list)
    auth_refused: int = 0

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(PEER_WAIT_S)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._run, name=f"executor-peer-{self.address}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for _ in range(self.connections):
                conn, _addr = self.sock.accept()
                with conn:
                    conn.settimeout(PEER_WAIT_S)
                    self._serve(conn)
        except Exception as exc:  # surfaced by stop(): the test fails with what went wrong
            self.errors.append(f"peer: {exc!r}")

    def _serve(self, conn: socket.socket) -> None:
        if self.mode == "silent":
            recv_exact(conn, 1)  # until the client gives up and closes
            return
        ns = secrets.token_bytes(lib.BL_EXECUTOR_NONCE_BYTES)
        version = 1 if self.mode == "version1" else None
        conn.sendall(frame(lib.BL_EXEC_HELLO, ns, version=version))
        header = recv_exact(conn, lib.BL_EXECUTOR_HEADER_BYTES)
        if header is None:
            if self.mode != "version1":
                self.errors.append("the client closed before AUTH")
            return
        magic, ver, kind, length = struct.unpack(">IHHI", header)
        if (magic, ver, kind, length) != (lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION,
                                          lib.BL_EXEC_AUTH, 2 * lib.BL_EXECUTOR_NONCE_BYTES):
            self.errors.append(f"AUTH header {(hex(magic), ver, kind, length)}")
            conn.sendall(frame(lib.BL_EXEC_REFUSED))
            return
        body = recv_exact(conn, length)
        nc, tag = body[:32], body[32:]
        self.client_nonces.append(nc)
        if not hmac.compare_digest(tag, proof(self.secret, b"client", ns, nc, conn)):
            self.auth_refused += 1
            conn.sendall(frame(lib.BL_EXEC_REFUSED))
            return
        welcome = proof(self.secret, b"server", ns, nc, conn)
        conn.sendall(frame(lib.BL_EXEC_WELCOME, secrets.token_bytes(32) if self.mode == "bad_welcome" else welcome))
        while True:
            header = recv_exact(conn, lib.BL_EXECUTOR_HEADER_BYTES)
            if header is None:
                return
            magic, ver, kind, length = struct.unpack(">IHHI", header)
            if (magic, ver) != (lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION) or kind not in REQUEST_LIMITS \
                    or length > REQUEST_LIMITS[kind]:
                self.errors.append(f"request header {(hex(magic), ver, kind, length)}")
                return
            body = recv_exact(conn, length)
            self.requests.append((kind, body))
            if kind == lib.BL_EXEC_CLOSE:
                if body:
                    self.errors.append(f"CLOSE with a body of {len(body)} bytes")
                conn.sendall(frame(lib.BL_EXEC_OK))
                return
            reply = self.handler(kind, body) if self.handler else None
            if reply is None:
                if not self.handler:
                    self.errors.append(f"unexpected request type {kind}")
                return
            conn.sendall(reply)

    def kinds(self) -> list[int]:
        return [kind for kind, _ in self.requests]

    def stop(self) -> None:
        self.thread.join(PEER_WAIT_S + 5)
        self.sock.close()
        assert not self.thread.is_alive(), "the peer thread did not finish"
        assert not self.errors, self.errors


@pytest.fixture
def peers() -> Iterator[Callable[..., Peer]]:
    made: list[Peer] = []

    def make(*, timeout_ms: int = 3000, secret_path: Path | None = None, **kw) -> Peer:
        peer = Peer(**kw)
        made.append(peer)
        if secret_path is not None:
            assert lib.bl_executor_configure(peer.address.encode(), str(secret_path).encode(), timeout_ms) == lib.BL_OK
        return peer

    yield make
    for peer in made:
        peer.stop()


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Each test starts with no recorded status and ends with the fds and threads it began with."""
    lib.bl_status_take()  # bl_executor_open records its failures
    fds, threads = set(os.listdir("/proc/self/fd")), set(threading.enumerate())
    yield  # (autouse: set up before, torn down after, the peers fixture)
    lib.bl_status_take()
    assert set(threading.enumerate()) <= threads
    assert set(os.listdir("/proc/self/fd")) <= fds


def write_secret(path: Path, content: bytes = SECRET + b"\n", mode: int = 0o600) -> Path:
    path.write_bytes(content)
    path.chmod(mode)
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return write_secret(tmp_path / "secret")


def last_error() -> str:
    return ffi.string(lib.bl_last_error()).decode()


def open_fails(address: str) -> tuple[int, str]:
    """bl_executor_open(address) must fail: the status it recorded and its text."""
    s = lib.bl_executor_open(address.encode())
    if s != ffi.NULL:
        lib.bl_executor_close(s)
        pytest.fail(f"bl_executor_open({address!r}) succeeded")
    status = lib.bl_status_take()
    return status, last_error()


def open_ok(address: str):
    s = lib.bl_executor_open(address.encode())
    assert s != ffi.NULL, last_error()
    return s


# ---- the header's wire constants are the protocol's ---------------------------------------


def test_header_constants_are_the_protocols() -> None:
    assert lib.BL_EXECUTOR_MAGIC == 0x424C4558 and lib.BL_EXECUTOR_MAGIC.to_bytes(4, "big") == b"BLEX"
    assert lib.BACKLINE_EXECUTOR_ABI_VERSION == 2
    assert ffi.sizeof("bl_executor_buffer") == 16
    assert ffi.offsetof("bl_executor_buffer", "bytes") == 8


# ---- handshake -------------------------------------------------------------------------------


def test_handshake_authenticates_both_ways_with_fresh_nonces(peers, secret: Path) -> None:
    peer = peers(secret_path=secret, connections=2)
    for _ in range(2):  # the second open, after the first connection closed, connects afresh
        s = open_ok(peer.address)
        assert lib.bl_executor_close(s) == lib.BL_OK, last_error()
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_CLOSE, lib.BL_EXEC_CLOSE]
    assert len(set(peer.client_nonces)) == 2 and peer.auth_refused == 0


def test_sessions_to_one_address_share_one_connection(peers, secret: Path) -> None:
    peer = peers(secret_path=secret)  # accepts one connection only
    a, b = open_ok(peer.address), open_ok(peer.address)
    assert lib.bl_executor_close(a) == lib.BL_OK
    assert peer.kinds() == []  # b still uses the connection
    assert lib.bl_executor_close(b) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_CLOSE]


def test_secret_from_the_environment(peers, secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    peer = peers()  # its address is not configured
    monkeypatch.setenv("BACKLINE_EXECUTOR_SECRET_FILE", str(secret))
    s = open_ok(peer.address)
    assert lib.bl_executor_close(s) == lib.BL_OK


def test_wrong_secret_is_refused_by_the_executor(peers, tmp_path: Path) -> None:
    mine = write_secret(tmp_path / "other", b"not the executor's secret at all")
    peer = peers(secret_path=mine)
    status, text = open_fails(peer.address)
    assert status == lib.BL_EAUTH
    assert f"the executor at {peer.address} refused authentication: check the secret" in text
    peer.stop()
    assert peer.auth_refused == 1


def test_executor_without_the_secret_is_refused_by_the_client(peers, secret: Path) -> None:
    peer = peers(secret_path=secret, mode="bad_welcome")
    status, text = open_fails(peer.address)
    assert status == lib.BL_EAUTH
    assert f"the executor at {peer.address} did not prove it holds the secret" in text


def test_protocol_version_mismatch_names_both_versions(peers, secret: Path) -> None:
    peer = peers(secret_path=secret, mode="version1")
    status, text = open_fails(peer.address)
    assert status < 0
    assert "executor speaks protocol version 1, this client speaks 2" in text and peer.address in text


def test_silent_executor_times_out_at_the_configured_deadline(peers, secret: Path) -> None:
    peer = peers(secret_path=secret, mode="silent", timeout_ms=300)
    status, text = open_fails(peer.address)
    assert status == lib.BL_ETIMEOUT
    assert peer.address in text and "300 ms" in text


def test_nothing_listening_names_the_address(secret: Path) -> None:
    with socket.socket() as s:  # bound, not listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        assert lib.bl_executor_configure(address.encode(), str(secret).encode(), 1000) == lib.BL_OK
        status, text = open_fails(address)
    assert status in (lib.BL_EPEER, lib.BL_ETIMEOUT)
    assert f"cannot connect to executor at {address}" in text


@pytest.mark.parametrize("address", ["nohost", "h:0", "h:99999", "[::1", "", "::1:9000", "h:9x", "[]:9"])
def test_bad_addresses_are_refused(address: str, secret: Path) -> None:
    assert lib.bl_executor_configure(address.encode(), str(secret).encode(), 0) == lib.BL_EINVAL
    assert "address" in last_error()
    status, text = open_fails(address)
    assert status == lib.BL_EINVAL and "address" in text


def test_bracketed_ipv6_address_is_accepted(secret: Path) -> None:
    assert lib.bl_executor_configure(b"[::1]:9", str(secret).encode(), 0) == lib.BL_OK, last_error()


def test_bad_timeout_in_the_environment(secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLINE_EXECUTOR_SECRET_FILE", str(secret))
    monkeypatch.setenv("BACKLINE_EXECUTOR_TIMEOUT_MS", "soon")
    status, text = open_fails("127.0.0.2:15")  # never configured: the environment decides
    assert status == lib.BL_EINVAL and "BACKLINE_EXECUTOR_TIMEOUT_MS='soon'" in text


def test_configure_refuses_a_timeout_out_of_range(secret: Path) -> None:
    for bad in (-1, 86400001):
        assert lib.bl_executor_configure(b"127.0.0.1:5", str(secret).encode(), bad) == lib.BL_EINVAL
        assert "timeout_ms" in last_error()


# ---- secrets (checked before anything connects: no peer needed) ----------------------------------


def test_secret_file_open_to_others_is_refused(tmp_path: Path) -> None:
    path = write_secret(tmp_path / "secret", mode=0o644)
    assert lib.bl_executor_configure(b"127.0.0.1:11", str(path).encode(), 0) == lib.BL_OK
    status, text = open_fails("127.0.0.1:11")
    assert status == lib.BL_EINVAL and f"chmod 600 {path}" in text


def test_missing_secret_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert lib.bl_executor_configure(b"127.0.0.1:12", str(path).encode(), 0) == lib.BL_OK
    status, text = open_fails("127.0.0.1:12")
    assert status == lib.BL_EINVAL and str(path) in text and "127.0.0.1:12" in text


@pytest.mark.parametrize("content", [b"short\n", b"x" * 15, b"x" * 4097, b""])
def test_secret_of_the_wrong_size_is_refused(tmp_path: Path, content: bytes) -> None:
    path = write_secret(tmp_path / "secret", content)
    assert lib.bl_executor_configure(b"127.0.0.1:13", str(path).encode(), 0) == lib.BL_OK
    status, text = open_fails("127.0.0.1:13")
    assert status == lib.BL_EINVAL and "16..4096 bytes" in text


def test_no_secret_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BACKLINE_EXECUTOR_SECRET_FILE", raising=False)
    status, text = open_fails("127.0.0.2:14")  # never configured
    assert status == lib.BL_EINVAL
    assert text == ("no secret for executor 127.0.0.2:14: call bl_executor_configure or set "
                    "BACKLINE_EXECUTOR_SECRET_FILE")


# ---- requests --------------------------------------------------------------------------------


SIG = "{i64, i32} (i64, ptr, double)"


def test_launch_marshals_args_results_and_buffers(peers, secret: Path) -> None:
    sent = bytes(range(1, 6))

    def handler(kind: int, body: bytes) -> bytes | None:
        r = Reader(body)
        assert kind == lib.BL_EXEC_LAUNCH
        assert (r.str(), r.str(), r.str(), r.u32()) == (b"kern", b"/objs/kern.o", SIG.encode(), 3)
        assert struct.unpack("<q", r.take(8)) == (-5,)  # i64, host (little-endian) layout
        assert r.u64() == len(sent) and r.take(len(sent)) == sent  # ptr: u64 BE count + bytes
        assert struct.unpack("<d", r.take(8)) == (2.5,)
        assert r.rest() == b""
        results = struct.pack("<q", -50) + struct.pack("<i", 7)  # each field at its ABI size
        return frame(lib.BL_EXEC_RESULT, results + struct.pack(">Q", len(sent)) + sent[::-1])

    peer = peers(secret_path=secret, handler=handler)
    s = open_ok(peer.address)
    data = ffi.new("uint8_t[]", sent)
    buf = ffi.new("bl_executor_buffer *", {"data": data, "bytes": len(sent)})
    a0, a1, a2 = ffi.new("int64_t *", -5), ffi.new("bl_executor_buffer **", buf), ffi.new("double *", 2.5)
    r0, r1 = ffi.new("int64_t *"), ffi.new("int32_t *")
    args, results = ffi.new("void *[3]", [a0, a1, a2]), ffi.new("void *[2]", [r0, r1])
    rc = lib.bl_executor_launch(s, b"kern", b"/objs/kern.o", SIG.encode(), args, 3, results, 2)
    assert rc == lib.BL_OK, last_error()
    assert (r0[0], r1[0]) == (-50, 7)
    assert bytes(ffi.buffer(data, len(sent))) == sent[::-1]
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_LAUNCH, lib.BL_EXEC_CLOSE]


def test_call_sends_num_input_args(peers, secret: Path) -> None:
    def handler(kind: int, body: bytes) -> bytes | None:
        r = Reader(body)
        assert kind == lib.BL_EXEC_CALL
        assert (r.str(), r.str(), r.str(), r.u32(), r.u32()) == (b"fill", b"libbackline", b"void (ptr)", 1, 0)
        assert r.u64() == 4 and r.take(4) == b"\0\0\0\0" and r.rest() == b""
        return frame(lib.BL_EXEC_RESULT, struct.pack(">Q", 4) + b"full")

    peer = peers(secret_path=secret, handler=handler)
    s = open_ok(peer.address)
    data = ffi.new("uint8_t[4]")
    buf = ffi.new("bl_executor_buffer *", {"data": data, "bytes": 4})
    slot = ffi.new("bl_executor_buffer **", buf)
    args = ffi.new("void *[1]", [slot])
    assert lib.bl_executor_call(s, b"fill", b"libbackline", b"void (ptr)", args, 1, 2, ffi.NULL, 0) == lib.BL_EINVAL
    assert lib.bl_executor_call(s, b"fill", b"libbackline", b"void (ptr)", args, 1, 0, ffi.NULL, 0) == lib.BL_OK, \
        last_error()
    assert bytes(ffi.buffer(data, 4)) == b"full"
    assert lib.bl_executor_close(s) == lib.BL_OK


def buffer_launch(s) -> int:
    """A launch of "i32 (ptr)" with a 5-byte buffer."""
    # every cdata stays named: an array of void * does not keep what it points to alive
    data = ffi.new("uint8_t[5]")
    buf = ffi.new("bl_executor_buffer *", {"data": data, "bytes": 5})
    slot, result = ffi.new("bl_executor_buffer **", buf), ffi.new("int32_t *")
    args, results = ffi.new("void *[1]", [slot]), ffi.new("void *[1]", [result])
    return lib.bl_executor_launch(s, b"k", b"o", b"i32 (ptr)", args, 1, results, 1)


@pytest.mark.parametrize("reply, expected", [
    (frame(lib.BL_EXEC_RESULT, length=lib.BL_EXECUTOR_MAX_ARGS_BYTES + 1), "over the limit"),
    (frame(lib.BL_EXEC_RESULT, b"\0" * 4 + struct.pack(">Q", 4) + b"\0" * 4), "4 bytes for the buffer of argument 0"),
    (frame(lib.BL_EXEC_TOKEN, struct.pack(">Q", 1)), "TOKEN"),
    (frame(lib.BL_EXEC_CRASHED, struct.pack(">i", 11) + pstr(b"the session process died of SIGSEGV")),
     "crashed: the session process died of SIGSEGV"),
], ids=["oversized", "buffer-count", "wrong-type", "crashed"])
def test_broken_reply_ends_the_connection(peers, secret: Path, reply: bytes, expected: str) -> None:
    peer = peers(secret_path=secret, handler=lambda kind, body: reply)
    s = open_ok(peer.address)
    assert buffer_launch(s) == lib.BL_EPEER
    first = last_error()
    assert expected in first and peer.address in first
    assert lib.bl_executor_await(s, 1) == lib.BL_EPEER  # the connection is gone: nothing is sent
    assert last_error() == f"connection to executor {peer.address} was lost: {first}"
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_LAUNCH]


def test_silent_reply_times_out_and_ends_the_connection(peers, secret: Path) -> None:
    peer = peers(secret_path=secret, handler=lambda kind, body: b"", timeout_ms=300)  # b"": answer nothing
    s = open_ok(peer.address)
    assert buffer_launch(s) == lib.BL_ETIMEOUT
    assert last_error() == f"executor {peer.address} did not answer LAUNCH of 'k' within 300 ms"
    assert buffer_launch(s) == lib.BL_EPEER and "was lost" in last_error()
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_LAUNCH]


def test_error_reply_keeps_the_connection(peers, secret: Path) -> None:
    replies = iter([error_reply(lib.BL_ENOTFOUND, "object o was not sent on this session"),
                    frame(lib.BL_EXEC_RESULT, struct.pack("<i", 1) + struct.pack(">Q", 5) + b"hello")])
    peer = peers(secret_path=secret, handler=lambda kind, body: next(replies))
    s = open_ok(peer.address)
    assert buffer_launch(s) == lib.BL_ENOTFOUND
    assert last_error() == f"executor {peer.address}: object o was not sent on this session"
    assert buffer_launch(s) == lib.BL_OK, last_error()
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_LAUNCH, lib.BL_EXEC_LAUNCH, lib.BL_EXEC_CLOSE]


def test_launch_async_and_await(peers, secret: Path) -> None:
    tokens = iter([7, 8])

    def handler(kind: int, body: bytes) -> bytes | None:
        r = Reader(body)
        if kind == lib.BL_EXEC_LAUNCH_ASYNC:
            assert (r.str(), r.str(), r.rest()) == (b"serve", b"/objs/serve.o", b"")
            return frame(lib.BL_EXEC_TOKEN, struct.pack(">Q", next(tokens)))
        assert kind == lib.BL_EXEC_AWAIT and len(body) == 12
        token, timeout_ms = r.u64(), r.u32()
        assert 0 < timeout_ms <= 3000  # within the client's own deadline
        return frame(lib.BL_EXEC_OK) if token == 7 else error_reply(lib.BL_EFN, "serve returned 3: kernel said no")

    peer = peers(secret_path=secret, handler=handler)
    s = open_ok(peer.address)
    token = ffi.new("int64_t *", -1)
    assert lib.bl_executor_launch_async(s, b"serve", b"/objs/serve.o", token) == lib.BL_OK, last_error()
    assert token[0] == 7
    assert lib.bl_executor_await(s, 7) == lib.BL_OK, last_error()
    assert lib.bl_executor_launch_async(s, b"serve", b"/objs/serve.o", token) == lib.BL_OK
    assert lib.bl_executor_await(s, token[0]) == lib.BL_EFN
    assert last_error() == f"executor {peer.address}: serve returned 3: kernel said no"
    assert lib.bl_executor_await(s, 0) == lib.BL_ESTATE  # a failed launch_async's token: nothing sent
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_LAUNCH_ASYNC, lib.BL_EXEC_AWAIT] * 2 + [lib.BL_EXEC_CLOSE]


def test_send_binary_sends_each_object_once(peers, secret: Path, tmp_path: Path) -> None:
    obj = tmp_path / "kern.o"
    obj.write_bytes(b"\x7fELF" + os.urandom(200))

    def handler(kind: int, body: bytes) -> bytes | None:
        r = Reader(body)
        assert kind == lib.BL_EXEC_SEND_BINARY
        assert (r.take(1), r.str(), r.rest()) == (bytes([lib.BL_EXEC_KIND_OBJECT]), str(obj).encode(), obj.read_bytes())
        return frame(lib.BL_EXEC_OK)

    peer = peers(secret_path=secret, handler=handler)
    s = open_ok(peer.address)
    assert lib.bl_executor_send_binary(s, str(obj).encode()) == lib.BL_OK, last_error()
    assert lib.bl_executor_send_binary(s, str(obj).encode()) == lib.BL_OK
    missing = tmp_path / "missing.o"
    assert lib.bl_executor_send_binary(s, str(missing).encode()) == lib.BL_ENOTFOUND
    assert str(missing) in last_error()
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_SEND_BINARY, lib.BL_EXEC_CLOSE]


@pytest.mark.parametrize("signature, nargs, nresults, expected", [
    ("i64 (i64)", 2, 1, "has 1 parameter, but nargs is 2"),
    ("{i64, i32} (i64)", 1, 1, "has 2 results, but nresults is 1"),
    ("<4 x i32> ()", 0, 1, "type '<4 x i32>' is not supported"),
    ("i32 (x86_fp80)", 1, 1, "type 'x86_fp80' is not supported"),
    ("i32 (i65)", 1, 1, "type 'i65' is not supported"),
    ("ptr (i64)", 1, 1, "ptr as a result is not supported"),
    ("void ({i64, ptr})", 1, 0, "ptr inside a struct is not supported"),
    ("void (i64", 1, 0, "malformed"),
])
def test_bad_signatures_and_counts_send_nothing(peers, secret: Path, signature: str, nargs: int, nresults: int,
                                                expected: str) -> None:
    peer = peers(secret_path=secret)
    s = open_ok(peer.address)
    slots = [ffi.new("int64_t[2]") for _ in range(max(nargs, nresults))]
    args = ffi.new("void *[]", slots[:nargs] or [ffi.NULL])
    results = ffi.new("void *[]", slots[:nresults] or [ffi.NULL])
    rc = lib.bl_executor_launch(s, b"k", b"o", signature.encode(), args, nargs, results, nresults)
    assert rc == lib.BL_EINVAL
    assert expected in last_error()
    assert lib.bl_executor_close(s) == lib.BL_OK
    peer.stop()
    assert peer.kinds() == [lib.BL_EXEC_CLOSE]


def test_null_session_conventions() -> None:
    assert lib.bl_executor_close(ffi.NULL) == lib.BL_OK
    token = ffi.new("int64_t *", 5)
    assert lib.bl_executor_launch_async(ffi.NULL, b"s", b"o", token) == lib.BL_ESTATE and token[0] == 0
    assert "NULL" in last_error()
    assert lib.bl_executor_send_binary(ffi.NULL, b"o") == lib.BL_ESTATE
    assert lib.bl_executor_launch(ffi.NULL, b"s", b"o", b"void ()", ffi.NULL, 0, ffi.NULL, 0) == lib.BL_ESTATE
    assert lib.bl_executor_call(ffi.NULL, b"s", b"l", b"void ()", ffi.NULL, 0, 0, ffi.NULL, 0) == lib.BL_ESTATE
    assert lib.bl_executor_await(ffi.NULL, 1) == lib.BL_ESTATE
