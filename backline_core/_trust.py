"""The Python side of the trust kit (backline/trust.h): secret files, handshake tags bound to a
connection, and the limits on handshakes in progress.

The C side (backline/sdk/oob.h) implements the same transcript for the networked transports and
the executor client; ``tests/core/test_trust.py`` checks the two agree byte for byte.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import shutil
import socket
import stat
import struct
from collections import OrderedDict
from collections.abc import Hashable

from ._abi import lib
from ._errors import BacklineError
from ._process import private_tempdir

#: restated from backline/trust.h (cffi reads only numeric defines)
LABEL_PREFIX = b"backline-trust/1 "
NONCE_BYTES: int = lib.BL_TRUST_NONCE_BYTES
TAG_BYTES: int = lib.BL_TRUST_TAG_BYTES
MIN_SECRET_BYTES: int = lib.BL_TRUST_MIN_SECRET_BYTES
MAX_SECRET_BYTES: int = lib.BL_TRUST_MAX_SECRET_BYTES
MAX_CONTEXT_BYTES: int = lib.BL_TRUST_MAX_CONTEXT_BYTES
HANDSHAKE_TIMEOUT_S: float = lib.BL_TRUST_HANDSHAKE_TIMEOUT_MS / 1000
MAX_PENDING: int = lib.BL_TRUST_MAX_PENDING
MAX_PENDING_PER_PEER: int = lib.BL_TRUST_MAX_PENDING_PER_PEER


class SecretError(BacklineError, ValueError):
    """A secret file that cannot be read or is not acceptable; the message says what to do."""


def _check_length(secret: bytes, where: str) -> bytes:
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise SecretError(f"the secret in {where} is {len(secret)} bytes; a secret has {MIN_SECRET_BYTES} to "
                          f"{MAX_SECRET_BYTES} bytes (make one with `backline secret new PATH`)")
    return secret


def read_secret_file(path: str) -> bytes:
    """The secret in ``path``: a regular file of this user, no group/other bits, one trailing newline ignored."""
    try:  # O_NONBLOCK: a FIFO planted at the path must not hang the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        hint = " (it must not be a symbolic link)" if os.path.islink(path) else ""
        raise SecretError(f"cannot open the secret file {path}: {exc.strerror or exc}{hint}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretError(f"the secret file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise SecretError(f"the secret file {path} is owned by uid {st.st_uid}, not by this user "
                              f"(uid {os.geteuid()}): use a copy of your own")
        if st.st_mode & 0o077:
            raise SecretError(f"the secret file {path} is open to group or others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}")
        limit = MAX_SECRET_BYTES + 2  # one byte too many, and the newline
        data = bytearray()
        while len(data) < limit:
            chunk = os.read(fd, limit - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if data.endswith(b"\n"):
        del data[-1]
    return _check_length(bytes(data), f"file {path}")


def generate_secret_file(path: str) -> str:
    """Create ``path`` (it must not exist), mode 0600, holding a new random secret; return it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SecretError(f"cannot create the secret file {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)  # never more than 0600, whatever the umask
        view = memoryview((secrets.token_hex(lib.BL_TRUST_SECRET_HEX_BYTES) + "\n").encode("ascii"))
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise SecretError(f"cannot write the secret file {path}: {exc.strerror or exc}") from None
    os.close(fd)
    return path


class DeploymentSecret:
    """A secret made for one deployment: a file in a private folder, removed by :meth:`remove`."""

    def __init__(self) -> None:
        self.folder = private_tempdir("backline-secret-")  # 0700, removed by a reaper should this process be killed
        self.path = generate_secret_file(os.path.join(self.folder, "secret"))

    def remove(self) -> None:
        """Delete the file and its folder (idempotent)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> DeploymentSecret:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def new_nonce() -> bytes:
    """A fresh nonce from the operating system's CSPRNG."""
    return secrets.token_bytes(NONCE_BYTES)


def address_bytes(address: tuple) -> bytes:
    """A socket address as the transcript has it: 16-byte IPv6 form (IPv4 mapped) and a big-endian port."""
    ip = ipaddress.ip_address(address[0].split("%", 1)[0])
    if ip.version == 4:
        ip = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
    return ip.packed + struct.pack(">H", address[1])


def connection_addresses(sock: socket.socket, *, server: bool) -> tuple[bytes, bytes]:
    """(client address, server address) of the connection ``sock``, as both ends agree on them."""
    mine, theirs = address_bytes(sock.getsockname()), address_bytes(sock.getpeername())
    return (theirs, mine) if server else (mine, theirs)


def transcript(side: str, protocol: str, server_nonce: bytes, client_nonce: bytes, client: bytes, server: bytes,
               context: bytes = b"") -> bytes:
    """The bytes each side's tag is computed over (backline/trust.h)."""
    if side not in ("client", "server"):
        raise ValueError(f"side is 'client' or 'server', not {side!r}")
    name = protocol.encode("ascii")
    if not 0 < len(name) < 256:
        raise ValueError(f"protocol name {protocol!r}: 1..255 ASCII characters")
    if len(server_nonce) != NONCE_BYTES or len(client_nonce) != NONCE_BYTES:
        raise ValueError(f"nonces are {NONCE_BYTES} bytes")
    if len(context) > MAX_CONTEXT_BYTES:
        raise ValueError(f"a context of {len(context)} bytes is over the {MAX_CONTEXT_BYTES} allowed")
    return b"".join((LABEL_PREFIX, side.encode(), bytes([len(name)]), name, server_nonce, client_nonce, client,
                     server, struct.pack(">H", len(context)), context))


def tag(secret: bytes, side: str, protocol: str, server_nonce: bytes, client_nonce: bytes, client: bytes,
        server: bytes, context: bytes = b"") -> bytes:
    """HMAC-SHA256 of the transcript under ``secret``."""
    return hmac.digest(secret, transcript(side, protocol, server_nonce, client_nonce, client, server, context),
                       "sha256")


def tags_equal(a: bytes, b: bytes) -> bool:
    """Constant-time comparison."""
    return hmac.compare_digest(a, b)


class HandshakeGate:
    """The handshakes a server has in progress, at most ``per_peer`` from one peer address and
    ``total`` in all. When a new one would pass a limit, the oldest of its peer (or, for the total,
    the oldest of all) makes room: a client that holds the secret answers in one round trip, so
    it is never the oldest for long, while a flood of idle connections only evicts itself.
    """

    def __init__(self, total: int = MAX_PENDING, per_peer: int = MAX_PENDING_PER_PEER) -> None:
        if total < 1 or per_peer < 1:
            raise ValueError("limits are at least 1")
        self.total, self.per_peer = total, per_peer
        self._pending: OrderedDict[Hashable, str] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, item: Hashable) -> bool:
        return item in self._pending

    def admit(self, item: Hashable, peer: str) -> Hashable | None:
        """Add ``item`` from ``peer``; return the handshake it displaces (to be closed), or None."""
        victim = None
        same = [k for k, p in self._pending.items() if p == peer]
        if len(same) >= self.per_peer:
            victim = same[0]
        elif len(self._pending) >= self.total:
            victim = next(iter(self._pending))
        if victim is not None:
            del self._pending[victim]
        self._pending[item] = peer
        return victim

    def done(self, item: Hashable) -> None:
        """``item`` finished its handshake (or was closed)."""
        self._pending.pop(item, None)
