"""The shared secret: the file checks, the environment fallback, generating a file."""

from __future__ import annotations

import os
import stat

import pytest
from backline_executor_orc.secret import ENV, SecretError, generate_secret_file, load_secret, read_secret_file

from backline_core.sdk import lib


def _write(path, data: bytes, mode: int = 0o600) -> str:
    path.write_bytes(data)
    os.chmod(path, mode)
    return str(path)


def test_generated_file(tmp_path):
    path = generate_secret_file(str(tmp_path / "s"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret = read_secret_file(path)
    assert len(secret) == 64 and bytes.fromhex(secret.decode())
    with pytest.raises(SecretError, match="cannot create"):
        generate_secret_file(path)  # never overwrites


def test_one_trailing_newline_is_stripped(tmp_path):
    assert read_secret_file(_write(tmp_path / "s", b"0123456789abcdef\n")) == b"0123456789abcdef"
    assert read_secret_file(_write(tmp_path / "t", b"0123456789abcdef\n\n")) == b"0123456789abcdef\n"


def test_mode_owner_and_kind(tmp_path):
    path = _write(tmp_path / "s", b"x" * 32, 0o640)
    with pytest.raises(SecretError, match=f"chmod 600 {path}"):
        read_secret_file(path)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "s")
    with pytest.raises(SecretError, match="symbolic link"):
        read_secret_file(str(link))
    with pytest.raises(SecretError, match="not a regular file"):
        read_secret_file(str(tmp_path))
    with pytest.raises(SecretError, match="cannot open"):
        read_secret_file(str(tmp_path / "missing"))


def test_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretError, match="not a regular file"):
        read_secret_file(str(fifo))


def test_lengths(tmp_path):
    lo, hi = lib.BL_EXECUTOR_MIN_SECRET_BYTES, lib.BL_EXECUTOR_MAX_SECRET_BYTES
    with pytest.raises(SecretError, match=f"{lo} to {hi} bytes"):
        read_secret_file(_write(tmp_path / "a", b"x" * (lo - 1)))
    with pytest.raises(SecretError, match=f"is {hi + 1} bytes"):
        read_secret_file(_write(tmp_path / "b", b"x" * (hi + 1)))
    assert len(read_secret_file(_write(tmp_path / "c", b"x" * hi + b"\n"))) == hi


def test_environment():
    assert load_secret(None, {ENV: "s" * 20}) == b"s" * 20
    with pytest.raises(SecretError, match="--secret-file"):
        load_secret(None, {})
    with pytest.raises(SecretError, match="bytes"):
        load_secret(None, {ENV: "short"})
