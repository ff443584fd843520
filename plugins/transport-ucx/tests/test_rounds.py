"""What only the ucx transport has, over UCX shared memory and TCP on this host: its handshake's
refusals, its missing backend, its bench. Rounds, geometry and the faults every transport shares
are the conformance suite's (test_conformance.py, conftest.py).

Every coprocessor here is a real `backline coprocessor serve --transport ucx` process and
every round goes through libucp; nothing is mocked.
"""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from backline_core import (
    BacklineError,
    Controller,
    Coprocessor,
    Endpoint,
    Placement,
    Session,
    TransportError,
)
from backline_core.testing import endpoint_config, free_port, run_cli, usage_error

HOST = "127.0.0.1"
TLS = ["shm", "tcp"]
#: generous: the machines these run on are shared, and two spinning threads share two CPUs
SLOW = 10000


def config(port: int, **extra: object) -> str:
    return endpoint_config(HOST, port, **{"timeout_ms": SLOW, **extra})


class FakePeer:
    """A TCP server on a free port that answers each connection with `reply` and closes."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.sendall(self.reply)  # a coprocessor speaks first (its CHALLENGE)
            conn.recv(4096)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


@pytest.mark.parametrize("reply, says", [  # (an SSH server is the conformance suite's)
    (b"BLUX" + struct.pack(">HHI", 3, 5, 32), "speaks version 3 of the ucx handshake"),
    (b"BLRD" + struct.pack(">HHI", 2, 5, 32), "is not a Backline ucx peer"),
], ids=["version-3", "rdma-peer"])
def test_a_peer_that_is_not_a_ucx_coprocessor_is_a_clear_error(reply: bytes, says: str) -> None:
    peer = FakePeer(reply)
    try:
        with pytest.raises(BacklineError) as info:
            Session.open("ucx", "controller", "dec", config=config(peer.port, connect_timeout_ms=5000), in_bytes=1,
                         out_bytes=1)
        assert says in str(info.value), info.value
    finally:
        peer.close()


def test_without_its_backend_resolution_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """An install on a machine without libucp's headers has no backend library (setup.py skips it)."""
    from backline_transport_ucx import plugin

    from backline_core import resolve

    monkeypatch.setattr(plugin, "get_library", lambda: str(tmp_path / "libbackline_transport_ucx.so"))
    with pytest.raises(TransportError) as info:
        resolve(Placement(controller=Controller(), transport="ucx",
                          coprocessors=[Coprocessor(name="nobackend", coprocessor_fn="echo", runs_in="process",
                                                    endpoint=Endpoint(host=HOST, port=free_port(HOST)))]))
    assert "apt-get install libucx-dev" in str(info.value)


@pytest.mark.parametrize("tls", TLS)
def test_bench_over_ucx_checks_every_reply(tls: str) -> None:
    result = run_cli("bench", "--transport", "ucx", "--transport-arg", f"tls={tls}", "--rounds", "5000", "--block",
                     "1000", "--no-progress", "--controller-cpu", "none", "--coprocessor-cpu", "none")
    assert result.rc == 0, result.stdout + result.stderr
    assert f"transport=ucx runs_in=process fn=echo tls={tls} " in result.stdout, result.stdout
    assert "lost: 0  mismatched replies: 0" in result.stdout
    assert f"UCX transports: {'tcp/lo' if tls == 'tcp' else ''}" in result.stderr


def test_bench_refuses_a_key_the_transport_does_not_have() -> None:
    result = run_cli("bench", "--transport", "ucx", "--transport-arg", "device=mlx5_0", "--rounds", "100",
                     "--no-progress")
    usage_error(result, "--transport-arg device: not a key of transport 'ucx'", "tls")
