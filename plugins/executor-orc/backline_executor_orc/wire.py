"""Frame codec of the executor protocol (version 2; ``docs/executor-protocol.md``).

Every message is a 12-byte big-endian header (magic, version, type, body length) and a
body. The numbers (magic, version, types, limits, deadlines) come from
``backline/executor.h`` through ``backline_core.sdk.lib``; the handshake's tags are the
trust kit's (``backline/trust.h``), bound to the connection's addresses.

>>> from backline_executor_orc import wire
>>> data = wire.frame(wire.lib.BL_EXEC_OK)
>>> wire.parse_header(data)
(32, 0)
"""

from __future__ import annotations

import socket
import struct
import time

from backline_core.sdk import lib, tag

#: the handshake transcript's protocol name (backline/trust.h); the context is empty
PROTOCOL = "executor"

HEADER = struct.Struct(">IHHI")
if HEADER.size != lib.BL_EXECUTOR_HEADER_BYTES:  # pragma: no cover - a header/codec mismatch
    raise ImportError("backline/executor.h's BL_EXECUTOR_HEADER_BYTES disagrees with the frame codec")

_U8, _U16, _U32, _U64, _I32 = (struct.Struct(f">{c}") for c in "BHIQi")

HANDSHAKE_TIMEOUT_S = lib.BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS / 1000
FRAME_TIMEOUT_S = lib.BL_EXECUTOR_FRAME_TIMEOUT_MS / 1000
CLOSE_TIMEOUT_S = lib.BL_EXECUTOR_CLOSE_TIMEOUT_MS / 1000

TYPE_NAMES: dict[int, str] = {
    getattr(lib, f"BL_EXEC_{name}"): name
    for name in (
        "HELLO", "AUTH", "WELCOME", "REFUSED", "SEND_BINARY", "LAUNCH", "LAUNCH_ASYNC", "AWAIT",
        "CALL", "CLOSE", "OK", "RESULT", "TOKEN", "ERROR", "CRASHED",
    )
}
REQUEST_TYPES = frozenset(
    getattr(lib, f"BL_EXEC_{n}") for n in ("SEND_BINARY", "LAUNCH", "LAUNCH_ASYNC", "AWAIT", "CALL", "CLOSE")
)


class ProtocolError(Exception):
    """The peer broke the protocol (or went silent mid-frame); ``status`` is the BL_E* to report."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = lib.BL_EPEER if status is None else status


class PeerClosed(ProtocolError):
    """The peer closed the connection between frames (a clean end, not an error)."""


class FrameTooBig(ProtocolError):
    """A header announced a body over its type's limit; the body was not read."""

    def __init__(self, message: str) -> None:
        super().__init__(message, lib.BL_ETOOBIG)


def type_name(frame_type: int) -> str:
    """``"LAUNCH"`` for 17; ``"type 99"`` for a number the protocol does not define."""
    return TYPE_NAMES.get(frame_type, f"type {frame_type}")


def body_limit(frame_type: int) -> int:
    """The largest body a frame of this type may announce (the brief's limits)."""
    name = lib.BL_EXECUTOR_MAX_NAME_BYTES
    if frame_type == lib.BL_EXEC_SEND_BINARY:
        return lib.BL_EXECUTOR_MAX_OBJECT_BYTES + name + 3
    if frame_type in (lib.BL_EXEC_LAUNCH, lib.BL_EXEC_CALL):
        return lib.BL_EXECUTOR_MAX_ARGS_BYTES + 3 * name + 16
    if frame_type == lib.BL_EXEC_RESULT:
        return lib.BL_EXECUTOR_MAX_ARGS_BYTES
    return lib.BL_EXECUTOR_MAX_SMALL_BYTES


def pack_header(frame_type: int, length: int) -> bytes:
    """The 12 header bytes of a frame."""
    return HEADER.pack(lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION, frame_type, length)


def frame(frame_type: int, body: bytes = b"") -> bytes:
    """A whole frame (header and body)."""
    return pack_header(frame_type, len(body)) + body


def parse_header(data: bytes) -> tuple[int, int]:
    """``(type, length)`` of a header; ProtocolError on a wrong magic or version."""
    if len(data) != HEADER.size:
        raise ProtocolError(f"a frame header is {HEADER.size} bytes, got {len(data)}")
    magic, version, frame_type, length = HEADER.unpack(data)
    if magic != lib.BL_EXECUTOR_MAGIC:
        raise ProtocolError(f"bad frame magic 0x{magic:08x} (not a backline executor peer)")
    if version != lib.BL_EXECUTOR_PROTOCOL_VERSION:
        raise ProtocolError(
            f"peer speaks protocol version {version}, this executor speaks {lib.BL_EXECUTOR_PROTOCOL_VERSION}"
        )
    return frame_type, length


def check_str(text: str) -> bytes:
    """The UTF-8 bytes of a protocol ``str``; ValueError if it cannot be one."""
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{text!r} contains a NUL byte")
    if len(data) > lib.BL_EXECUTOR_MAX_NAME_BYTES:
        raise ValueError(f"a protocol string is at most {lib.BL_EXECUTOR_MAX_NAME_BYTES} bytes, got {len(data)}")
    return data


def pack_str(text: str) -> bytes:
    """u16 byte count + UTF-8 bytes."""
    data = check_str(text)
    return _U16.pack(len(data)) + data


def fit_str(text: str) -> str:
    """``text`` shortened (at a character boundary) and NUL-free, so it always packs (for messages)."""
    text = text.replace("\0", "\\0")
    data = text.encode("utf-8")
    limit = lib.BL_EXECUTOR_MAX_NAME_BYTES
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", errors="ignore") + "..."


def pack_u8(v: int) -> bytes:
    return _U8.pack(v)


def pack_u32(v: int) -> bytes:
    return _U32.pack(v)


def pack_u64(v: int) -> bytes:
    return _U64.pack(v)


def pack_i32(v: int) -> bytes:
    return _I32.pack(v)


def error_body(status: int, message: str) -> bytes:
    """Body of ERROR: i32 status, str message."""
    return _I32.pack(status) + pack_str(fit_str(message))


def crashed_body(signal_number: int, message: str) -> bytes:
    """Body of CRASHED: i32 signal number, str message."""
    return _I32.pack(signal_number) + pack_str(fit_str(message))


class Reader:
    """Reads the fields of one frame body in order; ProtocolError on a short or bad field."""

    def __init__(self, body: bytes, what: str) -> None:
        self._view = memoryview(body)
        self._pos = 0
        self._what = what

    def _take(self, n: int, field: str) -> memoryview:
        if self._pos + n > len(self._view):
            raise ProtocolError(f"{self._what}: body ends inside {field}")
        out = self._view[self._pos : self._pos + n]
        self._pos += n
        return out

    def u8(self, field: str) -> int:
        return self._take(1, field)[0]

    def u16(self, field: str) -> int:
        return _U16.unpack(self._take(2, field))[0]

    def u32(self, field: str) -> int:
        return _U32.unpack(self._take(4, field))[0]

    def u64(self, field: str) -> int:
        return _U64.unpack(self._take(8, field))[0]

    def i32(self, field: str) -> int:
        return _I32.unpack(self._take(4, field))[0]

    def str(self, field: str) -> str:
        n = self.u16(field)
        if n > lib.BL_EXECUTOR_MAX_NAME_BYTES:
            raise ProtocolError(f"{self._what}: {field} is {n} bytes, at most {lib.BL_EXECUTOR_MAX_NAME_BYTES}")
        data = bytes(self._take(n, field))
        if b"\0" in data:
            raise ProtocolError(f"{self._what}: {field} contains a NUL byte")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{self._what}: {field} is not UTF-8") from None

    def rest(self) -> bytes:
        out = bytes(self._view[self._pos :])
        self._pos = len(self._view)
        return out

    def end(self) -> None:
        """The body must be used up."""
        if self._pos != len(self._view):
            raise ProtocolError(f"{self._what}: {len(self._view) - self._pos} unexpected bytes after the last field")


def client_tag(secret: bytes, server_nonce: bytes, client_nonce: bytes, client: bytes, server: bytes) -> bytes:
    """AUTH's proof: trust.h's tag(K, "client", "executor", Ns, Nc, client address, server address)."""
    return tag(secret, "client", PROTOCOL, server_nonce, client_nonce, client, server)


def server_tag(secret: bytes, server_nonce: bytes, client_nonce: bytes, client: bytes, server: bytes) -> bytes:
    """WELCOME's proof: the same transcript, side "server"."""
    return tag(secret, "server", PROTOCOL, server_nonce, client_nonce, client, server)


def recv_exact(sock: socket.socket, n: int, deadline: float | None, what: str) -> bytes:
    """Exactly ``n`` bytes from a blocking socket by ``deadline`` (time.monotonic; None: no limit).

    ProtocolError (message naming ``what``) on EOF or a passed deadline.
    """
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is None:
            sock.settimeout(None)
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError(f"truncated frame: {what} did not arrive in time ({got} of {n} bytes)")
            sock.settimeout(left)
        try:
            k = sock.recv_into(view[got:])
        except TimeoutError:
            continue  # the loop re-checks the deadline
        except OSError as exc:
            raise ProtocolError(f"connection failed while reading {what}: {exc.strerror or exc}") from None
        if k == 0:
            raise ProtocolError(f"truncated frame: the peer closed the connection inside {what} ({got} of {n} bytes)")
        got += k
    return bytes(buf)


def read_frame(sock: socket.socket, *, idle_deadline: float | None = None) -> tuple[int, bytes]:
    """One frame: the header's first byte by ``idle_deadline`` (None: wait), the rest within
    BL_EXECUTOR_FRAME_TIMEOUT_MS of it.

    PeerClosed on EOF before a frame starts; FrameTooBig (body not read) when the header
    announces more than :func:`body_limit`; ProtocolError on anything else wrong.
    """
    first = b""
    while not first:
        if idle_deadline is None:
            sock.settimeout(None)
        else:
            left = idle_deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("no frame arrived in time", lib.BL_ETIMEOUT)
            sock.settimeout(left)
        try:
            first = sock.recv(1)
        except TimeoutError:
            continue
        except OSError as exc:
            raise ProtocolError(f"connection failed: {exc.strerror or exc}") from None
        if not first:
            raise PeerClosed("the peer closed the connection")
    deadline = time.monotonic() + FRAME_TIMEOUT_S
    frame_type, length = parse_header(first + recv_exact(sock, HEADER.size - 1, deadline, "a frame header"))
    limit = body_limit(frame_type)
    if length > limit:
        raise FrameTooBig(
            f"a {type_name(frame_type)} frame announced {length} body bytes; at most {limit} are accepted")
    body = recv_exact(sock, length, deadline, f"the body of a {type_name(frame_type)} frame") if length else b""
    return frame_type, body


def send_frame(sock: socket.socket, frame_type: int, body: bytes = b"", timeout_s: float = FRAME_TIMEOUT_S) -> None:
    """Send one frame; the peer must take it within ``timeout_s`` (socket.timeout/OSError otherwise)."""
    header = pack_header(frame_type, len(body))
    sock.settimeout(timeout_s)
    if len(body) < 65536:
        sock.sendall(header + body)
    else:  # large bodies go unjoined: no 64 MiB copy
        sock.sendall(header)
        sock.sendall(body)
