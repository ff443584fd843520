"""The executor's shared secret: read from a private file (or the environment), or generated.

The file must be a regular file owned by this user with no group/other permission bits;
its content, less one trailing newline, is the secret (BL_EXECUTOR_MIN_SECRET_BYTES ..
BL_EXECUTOR_MAX_SECRET_BYTES bytes). Without a file, env BACKLINE_EXECUTOR_SECRET holds
the secret itself.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping

from backline_core.sdk import lib

ENV = "BACKLINE_EXECUTOR_SECRET"


class SecretError(ValueError):
    """The secret could not be read, or is not acceptable; the message says what to do."""


def _check_length(secret: bytes, where: str) -> bytes:
    lo, hi = lib.BL_EXECUTOR_MIN_SECRET_BYTES, lib.BL_EXECUTOR_MAX_SECRET_BYTES
    if not lo <= len(secret) <= hi:
        raise SecretError(f"the secret in {where} is {len(secret)} bytes; it must be {lo} to {hi} bytes")
    return secret


def read_secret_file(path: str) -> bytes:
    """The secret in ``path``; SecretError if the file is not private to this user or the length is wrong."""
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
                              f"(uid {os.geteuid()})")
        if st.st_mode & 0o077:
            raise SecretError(
                f"the secret file {path} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run: chmod 600 {path}"
            )
        limit = lib.BL_EXECUTOR_MAX_SECRET_BYTES + 2  # one more than allowed, plus the newline
        chunks = []
        got = 0
        while got < limit:
            chunk = os.read(fd, limit - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if data.endswith(b"\n"):
        data = data[:-1]
    return _check_length(data, f"file {path}")


def load_secret(path: str | None, environ: Mapping[str, str] | None = None) -> bytes:
    """The file's secret, else env BACKLINE_EXECUTOR_SECRET's; SecretError when neither is usable."""
    if path:
        return read_secret_file(path)
    if environ is None:
        value = os.environb.get(ENV.encode())
    else:
        value = os.fsencode(environ[ENV]) if environ.get(ENV) else None
    if not value:
        raise SecretError(f"no secret: give --secret-file F (a file only you can read) or set {ENV}")
    return _check_length(value, f"${ENV}")


def generate_secret_file(path: str) -> str:
    """Create ``path`` (it must not exist) holding 32 random bytes as hex, mode 0600; return it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SecretError(f"cannot create the secret file {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)  # the umask may have taken bits we want; never more than 0600
        data = (secrets.token_hex(32) + "\n").encode("ascii")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise SecretError(f"cannot write the secret file {path}: {exc.strerror or exc}") from None
    os.close(fd)
    return path
