"""The trust kit's Python half (backline/trust.h): secret files, the transcript, the gate on
pending handshakes, per-deployment secrets. The C half is checked against it by the conformance
suite's handshakes written in Python (test_a_controller_without_the_secret_...)."""

from __future__ import annotations

import hmac
import os
import socket
import stat

import pytest

from backline_core import Controller, Coprocessor, Placement
from backline_core.sdk import (DeploymentSecret, HandshakeGate, SecretError, address_bytes, connection_addresses,
                               generate_secret_file, lib, new_nonce, read_secret_file, tag, transcript)
from backline_core.testing import run_cli


def test_a_generated_secret_is_private_and_reads_back(tmp_path) -> None:
    path = generate_secret_file(str(tmp_path / "s"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret = read_secret_file(path)
    assert len(secret) == 2 * lib.BL_TRUST_SECRET_HEX_BYTES
    with pytest.raises(SecretError, match="cannot create"):
        generate_secret_file(path)


@pytest.mark.parametrize("mode, content, says", [
    (0o644, b"0123456789abcdef0123", "open to group or others"),
    (0o600, b"short", "a secret has 16 to 4096 bytes"),
    (0o600, b"x" * 5000, "a secret has 16 to 4096 bytes"),
])
def test_a_bad_secret_file_says_what_to_do(tmp_path, mode: int, content: bytes, says: str) -> None:
    path = tmp_path / "s"
    path.write_bytes(content)
    path.chmod(mode)
    with pytest.raises(SecretError, match=says):
        read_secret_file(str(path))


def test_a_fifo_or_a_link_is_not_a_secret_file(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretError, match="not a regular file"):
        read_secret_file(str(fifo))  # and does not block
    real = generate_secret_file(str(tmp_path / "real"))
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(SecretError, match="symbolic link"):
        read_secret_file(str(tmp_path / "link"))


def test_the_transcript_is_the_documented_bytes() -> None:
    ns, nc = bytes(range(32)), bytes(range(32, 64))
    client, server = address_bytes(("127.0.0.1", 40000)), address_bytes(("::1", 9000))
    assert client == b"\0" * 10 + b"\xff\xff" + bytes([127, 0, 0, 1]) + (40000).to_bytes(2, "big")
    t = transcript("client", "ucx", ns, nc, client, server, b"ask")
    assert t == b"backline-trust/1 client" + b"\x03ucx" + ns + nc + client + server + b"\x00\x03ask"
    secret = b"s" * 16
    assert tag(secret, "client", "ucx", ns, nc, client, server, b"ask") == hmac.digest(secret, t, "sha256")
    # Each side, protocol, nonce, address and context gives another tag.
    base = tag(secret, "client", "ucx", ns, nc, client, server, b"ask")
    for other in (tag(secret, "server", "ucx", ns, nc, client, server, b"ask"),
                  tag(secret, "client", "rdma", ns, nc, client, server, b"ask"),
                  tag(secret, "client", "ucx", nc, ns, client, server, b"ask"),
                  tag(secret, "client", "ucx", ns, nc, server, client, b"ask"),
                  tag(secret, "client", "ucx", ns, nc, client, server, b"asK")):
        assert other != base
    with pytest.raises(ValueError):
        transcript("both", "ucx", ns, nc, client, server)


def test_both_ends_agree_on_a_connections_addresses() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()) as c:
            s, _ = listener.accept()
            with s:
                assert connection_addresses(c, server=False) == connection_addresses(s, server=True)
    assert len(new_nonce()) == lib.BL_TRUST_NONCE_BYTES and new_nonce() != new_nonce()


def test_the_gate_lets_the_oldest_of_a_peer_make_room() -> None:
    gate = HandshakeGate(total=4, per_peer=2)
    assert gate.admit("a1", "A") is None and gate.admit("a2", "A") is None
    assert gate.admit("a3", "A") == "a1"  # a flood from A evicts only A's
    assert gate.admit("b1", "B") is None and gate.admit("c1", "C") is None
    assert gate.admit("d1", "D") == "a2"  # the total: the oldest of all
    gate.done("b1")
    assert "b1" not in gate and len(gate) == 3



def test_with_secret_puts_one_file_on_both_ends() -> None:
    from backline_core._resolution import with_secret

    placement = Placement(controller=Controller(init_args={"timeout_ms": 100}), transport="memcpy",
                          coprocessors=[Coprocessor(name="a", coprocessor_fn="echo"),
                                        Coprocessor(name="b", coprocessor_fn="echo",
                                                    init_args={"secret_file": "/mine"})])
    out = with_secret(placement, "/made")
    assert out.controller.init_args == {"timeout_ms": 100, "secret_file": "/made"}
    assert out.coprocessors[0].init_args["secret_file"] == "/made"
    assert out.coprocessors[1].init_args["secret_file"] == "/mine"  # one the owner gave stays


def test_a_deployment_secret_goes_with_it() -> None:
    secret = DeploymentSecret()
    assert read_secret_file(secret.path)
    assert stat.S_IMODE(os.stat(secret.folder).st_mode) == 0o700
    secret.remove()
    secret.remove()
    assert not os.path.exists(secret.folder)


def test_backline_secret_new_writes_a_private_file(tmp_path) -> None:
    path = tmp_path / "s"
    result = run_cli("secret", "new", str(path))
    assert result.rc == 0, result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and read_secret_file(str(path))
    again = run_cli("secret", "new", str(path))
    assert again.rc == 2 and again.stderr.count("\n") == 1 and "File exists" in again.stderr
