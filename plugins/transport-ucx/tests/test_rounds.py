"""Rounds, geometry and faults of the ucx transport, over UCX shared memory and TCP on this host.

Every coprocessor here is a real `backline coprocessor serve --transport ucx` process and
every round goes through libucp; nothing is mocked.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from backline_core import (
    BacklineError,
    Controller,
    Coprocessor,
    Endpoint,
    KeyTakenError,
    PeerError,
    Placement,
    Session,
    TransportError,
    deploy,
)
from backline_core.testing import ServeProcess, endpoint_config, free_port

HOST = "127.0.0.1"
TLS = ["shm", "tcp"]
STEANE = [0x00, 0x01, 0x10, 0x02, 0x40, 0x08, 0x20, 0x04]
#: generous: the machines these run on are shared, and two spinning threads share two CPUs
SLOW = 10000


def config(port: int, **extra: object) -> str:
    return endpoint_config(HOST, port, **{"timeout_ms": SLOW, **extra})


def serving(port: int, *fns: str, **extra: object) -> ServeProcess:
    """`backline coprocessor serve --transport ucx` (steane unless `fns` say) in a child process."""
    return ServeProcess("ucx", port, *(fns or ("steane",)), host=HOST, **{"timeout_ms": SLOW, **extra})


def placement(port: int, tls: str, fn: str = "steane", **init_args: object) -> Placement:
    return Placement(controller=Controller(init_args={"timeout_ms": SLOW, "tls": tls}), transport="ucx",
                     coprocessors=[Coprocessor(name="dec", coprocessor_fn=fn, runs_in="process",
                                               endpoint=Endpoint(host=HOST, port=port),
                                               init_args={"tls": tls, **init_args})])


@pytest.mark.parametrize("tls", TLS)
def test_deploy_runs_every_steane_syndrome_and_variable_payloads_pipelined(tls: str) -> None:
    with deploy(placement(free_port(HOST), tls), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert [s.round(bytes([i & 7]))[0] for i in range(400)] == [STEANE[i & 7] for i in range(400)]
    # A small ring the coprocessor owns (the controller takes its geometry), payloads of every
    # length up to the slot, eight rounds in flight at once.
    with deploy(placement(free_port(HOST), tls, fn="echo", slots=8, slot_bytes=128), in_bytes=96, out_bytes=96) as d:
        s = d.session()
        assert (s.geometry["slots"], s.geometry["slot_bytes"]) == (8, 128)
        for start in range(0, 97, 8):
            sent = [bytes((start + k + j) & 0xFF for j in range((start + k) % 97)) for k in range(8)]
            for payload in sent:
                s.stage_payload(payload)
                s.post()
            assert [s.collect() for _ in sent] == sent


@pytest.mark.parametrize("tls", TLS)
def test_a_killed_coprocessor_fails_the_round_with_peer_error_not_the_deadline(tls: str) -> None:
    port = free_port(HOST)
    with serving(port, tls=tls) as serve:
        s = Session.open("ucx", "controller", "dec", config=config(port, tls=tls, timeout_ms=60000), in_bytes=1,
                         out_bytes=1)
        try:
            assert s.round(b"\x01") == b"\x01"
            serve.proc.send_signal(signal.SIGKILL)
            serve.proc.wait(30)
            t0 = time.monotonic()
            with pytest.raises(PeerError) as info:
                s.round(b"\x01")
            # The connection's closing or UCX's endpoint error, not the 60 s deadline (that would
            # be a TimeoutError); the bound is loose so a loaded machine cannot fail it.
            assert time.monotonic() - t0 < 30
            assert "closed" in str(info.value) or "UCX" in str(info.value), info.value
        finally:
            s.destroy()


@pytest.mark.parametrize("tls", TLS)
def test_a_killed_controller_lets_the_next_one_in_and_it_continues_the_sequence(tls: str) -> None:
    port = free_port(HOST)
    code = ("import sys; from backline_core import Session; "
            f"s = Session.open('ucx', 'controller', 'dec', config={config(port, tls=tls)!r}, in_bytes=1, out_bytes=1); "
            "[s.round(b'\\x02') for _ in range(5)]; print('up', flush=True); sys.stdin.read()")
    with serving(port, tls=tls):
        ctl = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert ctl.stdout.readline().strip() == "up"
            # While it lives, a second controller is refused.
            with pytest.raises((KeyTakenError, TransportError)) as info:
                Session.open("ucx", "controller", "dec", config=config(port, tls=tls, connect_timeout_ms=3000),
                             in_bytes=1, out_bytes=1)
            assert "another controller" in str(info.value)
        finally:
            ctl.kill()
            ctl.wait(30)
            ctl.stdin.close()
            ctl.stdout.close()
        s = Session.open("ucx", "controller", "dec", config=config(port, tls=tls), in_bytes=1, out_bytes=1)
        try:
            assert [s.round(bytes([i]))[0] for i in (1, 2, 4)] == [0x01, 0x10, 0x40]
        finally:
            s.destroy()


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--transport", "ucx",
                               "--key", "dec", "--fn", "steane", "--config", config(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "in use" in lines[0] and str(port) in lines[0], proc.stderr


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
            conn.recv(4096)
            conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


@pytest.mark.parametrize("reply, says", [
    (b"SSH-2.0-OpenSSH_9.2\r\n", "is not a Backline ucx peer"),
    (b"BLUX" + struct.pack(">HHI", 2, 2, 0), "speaks version 2 of the ucx handshake"),
    (b"BLRD" + struct.pack(">HHI", 1, 2, 0), "is not a Backline ucx peer"),
], ids=["ssh", "version-2", "rdma-peer"])
def test_a_peer_that_is_not_a_ucx_coprocessor_is_a_clear_error(reply: bytes, says: str) -> None:
    peer = FakePeer(reply)
    try:
        with pytest.raises(BacklineError) as info:
            Session.open("ucx", "controller", "dec", config=config(peer.port, connect_timeout_ms=5000), in_bytes=1,
                         out_bytes=1)
        assert says in str(info.value), info.value
    finally:
        peer.close()


def test_a_controller_for_another_key_is_refused_with_the_key() -> None:
    port = free_port(HOST)
    with serving(port, key="dec"):
        with pytest.raises(BacklineError) as info:
            Session.open("ucx", "controller", "other", config=config(port), in_bytes=1, out_bytes=1)
    assert "serves key 'dec', not 'other'" in str(info.value)


def test_a_non_backline_client_on_the_coprocessors_port_is_dropped_and_it_keeps_serving() -> None:
    port = free_port(HOST)
    with serving(port) as serve:
        with socket.create_connection((HOST, port)) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.settimeout(30)
            try:
                assert s.recv(4096) == b""
            except ConnectionResetError:
                pass
        ctl = Session.open("ucx", "controller", "dec", config=config(port), in_bytes=1, out_bytes=1)
        try:
            assert ctl.round(b"\x03") == b"\x02"
        finally:
            ctl.destroy()
        assert serve.proc.poll() is None


@pytest.mark.parametrize("value", ["udp", "SHM", "shm,tcp"])
def test_an_unknown_tls_is_refused_by_name(value: str) -> None:
    with pytest.raises(BacklineError) as info:
        Session.open("ucx", "controller", "dec", config=config(free_port(HOST), tls=value), in_bytes=1, out_bytes=1)
    assert f"tls={value}" in str(info.value) and "shm" in str(info.value) and "tcp" in str(info.value)


def test_a_coprocessor_without_an_endpoint_needs_one() -> None:
    from backline_core import PlacementError, resolve

    with pytest.raises(PlacementError) as info:
        resolve(Placement(controller=Controller(), transport="ucx",
                          coprocessors=[Coprocessor(name="dec", coprocessor_fn="echo", runs_in="process")]))
    assert "Endpoint" in str(info.value)


def test_a_coprocessor_in_the_controllers_process_is_refused() -> None:
    from backline_core import PlacementError, resolve

    with pytest.raises(PlacementError) as info:
        resolve(Placement(controller=Controller(), transport="ucx",
                          coprocessors=[Coprocessor(name="dec", coprocessor_fn="echo", runs_in="thread",
                                                    endpoint=Endpoint(host=HOST, port=free_port(HOST)))]))
    assert "thread" in str(info.value)


def test_the_ghz_demo_over_ucx_gives_the_samples_memcpy_gives() -> None:
    """Only the placement changes (``backline demo ghz --transport ucx --compare`` does the same)."""
    demo = pytest.importorskip("backline_compiler.demos.ghz_steane", reason="needs backline-compiler[frontend]")
    shots = 30
    over_ucx = demo.run(demo.device("default.clifford", noise=0.01, seed=7, transport="ucx", runs_in="process",
                                    endpoint=Endpoint(host=HOST, port=free_port(HOST))), shots)
    in_thread = demo.run(demo.device("default.clifford", noise=0.01, seed=7), shots)
    assert over_ucx.samples.tolist() == in_thread.samples.tolist()
    assert over_ucx.rtt["steane-decoder"]["rounds"] == in_thread.rtt["steane-decoder"]["rounds"] > 0


def test_a_coprocessor_in_an_executor_answers_over_ucx() -> None:
    """runs_in="executor": the coprocessor's compiled code runs in an executor's process and
    listens on its endpoint there."""
    orc = pytest.importorskip("backline_executor_orc", reason="needs backline-executor-orc")
    pytest.importorskip("backline_compiler", reason="an executor coprocessor is compiled by backline-compiler")
    with orc.Executor.local() as ex:
        p = Placement(controller=Controller(init_args={"timeout_ms": SLOW}), transport="ucx",
                      coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", executor=ex,
                                                endpoint=Endpoint(host=HOST, port=free_port(HOST)))])
        with deploy(p, in_bytes=1, out_bytes=1) as d:
            assert [d.session().round(bytes([i]))[0] for i in (1, 2, 7)] == [0x01, 0x10, 0x04]


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



def backline(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("tls", TLS)
def test_bench_over_ucx_checks_every_reply(tls: str) -> None:
    result = backline("bench", "--transport", "ucx", "--transport-arg", f"tls={tls}", "--rounds", "5000", "--block",
                      "1000", "--no-progress", "--controller-cpu", "none", "--coprocessor-cpu", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"transport=ucx runs_in=process fn=echo tls={tls} " in result.stdout, result.stdout
    assert "lost: 0  mismatched replies: 0" in result.stdout
    assert f"UCX transports: {'tcp/lo' if tls == 'tcp' else ''}" in result.stderr


def test_bench_refuses_a_key_the_transport_does_not_have() -> None:
    result = backline("bench", "--transport", "ucx", "--transport-arg", "device=mlx5_0", "--rounds", "100",
                      "--no-progress")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--transport-arg device: not a key of transport 'ucx'" in lines[0], result.stderr
    assert "tls" in lines[0]
