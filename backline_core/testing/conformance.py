"""The conformance suite: one set of test bodies that every transport runs (as PennyLane runs
one device suite against every plugin).

A transport's tests collect it with one line in a test module::

    from backline_core.testing.conformance import *  # noqa: F403  (the suite's tests)

and say what the transport is in their conftest.py, with a ``backline_transport`` fixture
that returns a :class:`~backline_core.testing.TransportUnderTest` (parametrize it for
variants). Each test takes ``backline_case`` (:class:`Case`): a key of its own, the
transport's placement and config, and a check afterwards that nothing was left running and
no shared-memory segment was left behind. A test that does not apply to a transport (a busy
port of one without endpoints, the floor of one without a floor) skips and says why.
docs/plugins.md, "Testing a transport with the conformance suite", shows a conftest.py.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from .. import (
    AuthenticationError,
    BacklineError,
    Controller,
    Coprocessor,
    DeadlineError,
    Endpoint,
    InvalidArgumentError,
    KeyTakenError,
    NotFoundError,
    NothingPostedError,
    PeerError,
    Placement,
    PlacementError,
    RingFullError,
    Session,
    TransportError,
    deploy,
    resolve,
)
from .._hookspecs import RUNS_IN
from .._process import children, gone
from . import ServeProcess, TransportUnderTest, children_running, endpoint_config, run_cli, shm_segments, usage_error

__all__ = [
    "test_steane_rounds_on_every_syndrome_and_both_decoder_ids",
    "test_payloads_of_every_size_up_to_the_slot",
    "test_the_controller_takes_the_coprocessors_geometry",
    "test_pipelined_rounds_come_back_in_order",
    "test_a_killed_coprocessor_fails_the_round_and_does_not_hang",
    "test_a_second_controller_is_refused_and_the_next_one_continues",
    "test_a_killed_controller_lets_the_next_one_in",
    "test_a_busy_port_is_one_line_and_exit_status_2",
    "test_a_server_that_is_not_a_coprocessor_is_refused",
    "test_a_client_that_is_not_a_controller_is_dropped_and_the_coprocessor_serves_on",
    "test_a_controller_for_another_key_is_refused_and_not_told_the_served_key",
    "test_a_silent_server_is_a_deadline_error",
    "test_a_controller_without_the_secret_is_refused_before_anything_is_said",
    "test_a_coprocessor_without_the_secret_is_refused_by_the_controller",
    "test_a_relay_cannot_reuse_the_handshake_of_a_controller",
    "test_a_missing_or_open_secret_file_is_a_clear_error",
    "test_stalled_handshakes_do_not_deny_the_coprocessor",
    "test_a_thousand_junk_connections_leave_no_descriptor_or_memory_behind",
    "test_a_coprocessor_without_an_endpoint_needs_one",
    "test_a_place_the_transport_does_not_run_coprocessors_in_is_refused",
    "test_a_runs_in_that_is_no_place_is_refused",
    "test_the_ghz_demo_gives_the_samples_memcpy_gives",
    "test_a_coprocessor_in_an_executor_answers",
    "test_a_killed_floor_responder_ends_the_round_with_an_error",
    "test_a_stopped_floor_responder_ends_the_round_at_its_deadline",
    "test_bad_configuration_is_refused_and_leaves_the_key_free",
    "test_the_transports_own_bad_values_are_refused",
    "test_nothing_is_left_behind_after_a_deployment",
]

#: The Steane [[7,1,3]] lookup (syndrome -> correction mask), the builtin ``steane`` function.
STEANE = (0x00, 0x01, 0x10, 0x02, 0x40, 0x08, 0x20, 0x04)
#: A deadline only for a fault the transport should see at once (a hang guard, not a timing).
HANG_GUARD_S = 30.0


class Peer:
    """A coprocessor the suite started: a ``coprocessor serve`` child, or a Session in this process."""

    def __init__(self, serve: ServeProcess | None = None, session: Session | None = None) -> None:
        self.serve, self.session = serve, session

    def kill(self) -> None:
        """SIGKILL the child (and reap it); stop an in-process coprocessor."""
        if self.serve is not None:
            self.serve.proc.send_signal(signal.SIGKILL)
            self.serve.proc.wait(30)
        else:
            self.session.stop()

    def close(self) -> None:
        if self.serve is not None:
            self.serve.__exit__(None, None, None)
        else:
            self.session.destroy()


class Case:
    """One conformance test: the transport, a session key of its own, and what the test started
    (closed in reverse order at the end, however the test went)."""

    def __init__(self, transport: TransportUnderTest) -> None:
        if not isinstance(transport, TransportUnderTest):
            pytest.fail(f"backline_transport returned {transport!r}; return a backline_core.testing."
                        "TransportUnderTest", pytrace=False)
        self.transport = transport
        self.key = f"bltest-{uuid.uuid4().hex[:12]}"
        self._items: list[Any] = []
        self._children = set(children())
        self._shm = shm_segments()

    @property
    def name(self) -> str:
        return self.transport.name

    def port(self) -> int | None:
        return self.transport.port()

    def add(self, item: Any) -> Any:
        self._items.append(item)
        return item

    def coprocessor(self, port: int | None, *fns: Any, key: str | None = None, **extra: object) -> Peer:
        """Start a coprocessor for ``key`` (default the case's) serving ``fns`` (default steane) where
        the transport's suite runs them (``extra``: its config keys)."""
        t = self.transport
        if t.in_process:
            session = Session.open(t.name, "coprocessor", key or self.key, config=t.coprocessor_config(port, **extra),
                                   runs_in=t.place, functions=list(fns or ("steane",)))
            return self.add(Peer(session=session))
        serve = ServeProcess(t.name, port, *(fns or ("steane",)), key=key or self.key, host=t.host,
                             **{**t.init_args, **extra})
        peer = Peer(serve=serve)
        serve.__enter__()
        return self.add(peer)

    def controller(self, port: int | None, *, key: str | None = None, in_bytes: int = 1, out_bytes: int = 1,
                   **extra: object) -> Session:
        """Open a controller for the coprocessor at ``port`` (destroyed at the end)."""
        return self.add(Session.open(self.name, "controller", key or self.key,
                                     config=self.transport.config(port, **extra), in_bytes=in_bytes,
                                     out_bytes=out_bytes))

    def placement(self, port: int | None, fn: Any = "steane", **init_args: object) -> Placement:
        return self.transport.placement(self.key, port, fn, **init_args)

    def needs(self, what: str) -> None:
        """Skip unless the transport has ``what``: "endpoint", "floor", "process" (a coprocessor in
        another process) or a place."""
        t = self.transport
        if what == "endpoint" and not t.networked:
            pytest.skip(f"transport {t.name!r} has no endpoints")
        if what == "floor" and t.record.bench_floor is None:
            pytest.skip(f"transport {t.name!r} has no bench floor")
        if what == "process" and t.in_process:
            pytest.skip(f"the suite runs {t}'s coprocessors in this process (runs_in={t.place})")
        if what in RUNS_IN and what not in t.places:
            pytest.skip(f"transport {t.name!r} runs no coprocessor in {what!r}")

    def close(self) -> None:
        for item in reversed(self._items):
            try:
                item.close() if isinstance(item, Peer) else item.destroy()
            except Exception:  # teardown goes on; the test itself reports what failed
                pass
        self._items.clear()

    def check_nothing_left(self) -> None:
        """No child process this test started still runs, and no shared-memory segment it made is left."""
        deadline = time.monotonic() + 10  # a child told to stop may take a moment to exit
        while True:
            new = set(children()) - self._children
            if not new or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        left = [line for line in children_running() if int(line.split(":")[0]) in new]
        segments = sorted(s for s in shm_segments() - self._shm if self.key in s)
        assert not left and not segments, f"left behind: processes {left}, shared memory {segments}"


@contextmanager
def _listening(reply: bytes) -> Iterator[int]:
    """A TCP server on a free port that greets one connection with ``reply`` and closes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def answer() -> None:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            try:
                conn.sendall(reply)  # as an SSH server does: it speaks first
                conn.recv(4096)
            except OSError:
                pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
        thread.join(10)


# ---- rounds, geometry, pipelining ---------------------------------------------------------------


def test_steane_rounds_on_every_syndrome_and_both_decoder_ids(backline_case: Case) -> None:
    c = backline_case
    with deploy(c.placement(c.port()), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert s is d.session(c.key)
        for decoder_id in (0, 1):  # X and Z checks: Hx == Hz
            got = [s.round(bytes([i & 7]), decoder_id)[0] for i in range(200)]
            assert got == [STEANE[i & 7] for i in range(200)], f"decoder_id {decoder_id}"
    with pytest.raises(TransportError):
        s.round(b"\x01")  # destroyed with the deployment
    d.close()  # a second close is nothing


def test_payloads_of_every_size_up_to_the_slot(backline_case: Case) -> None:
    c = backline_case
    port = c.port()
    c.coprocessor(port, "echo")
    ctl = c.controller(port, in_bytes=224, out_bytes=224)  # 224 = the default slot_bytes 256 - 32
    rng = random.Random(20240501)
    sizes = [0, 1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 127, 128, 200, 223, 224]
    sizes += [rng.randint(0, 224) for _ in range(100)]
    for n in sizes:
        payload = rng.randbytes(n)
        assert ctl.round(payload) == payload, f"{n}-byte echo"
    for n in (1, 224, 0, 17):  # echo also serves decoder_id 1
        payload = rng.randbytes(n)
        assert ctl.round(payload, decoder_id=1) == payload


def test_the_controller_takes_the_coprocessors_geometry(backline_case: Case) -> None:
    c = backline_case
    port = c.port()
    peer = c.coprocessor(port, "echo", slots=8, slot_bytes=128)
    if peer.session is not None:
        assert (peer.session.geometry["slots"], peer.session.geometry["slot_bytes"]) == (8, 128)
    with pytest.raises(InvalidArgumentError) as info:
        c.controller(port, slots=16, slot_bytes=128, in_bytes=96, out_bytes=96)
    said = str(info.value)
    assert "slots=16" in said and "slots=8" in said and "coprocessor" in said, said
    ctl = c.controller(port, in_bytes=96, out_bytes=96)  # the refused session left the key free
    assert ctl.geometry == {"slots": 8, "slot_bytes": 128, "in_bytes": 96, "out_bytes": 96}
    payload = bytes(range(96))
    assert ctl.round(payload) == payload  # the largest payload the slot holds


def test_pipelined_rounds_come_back_in_order(backline_case: Case) -> None:
    c = backline_case
    port = c.port()
    c.coprocessor(port, "echo", slots=8, slot_bytes=128)
    ctl = c.controller(port, in_bytes=96, out_bytes=96)
    for lap in range(4):  # several laps of the ring
        sent = [f"lap{lap}-round{i}".encode() for i in range(8)]
        for payload in sent:
            ctl.stage_payload(payload)
            ctl.post()
        with pytest.raises(RingFullError, match="8 slots"):
            ctl.stage_payload(b"one too many")
        for i, payload in enumerate(sent):
            got = bytes(ctl.reply_slot()) if i % 2 else ctl.collect()
            assert got == payload, f"lap {lap} reply {i}"
        with pytest.raises(NothingPostedError):
            ctl.collect()
    # payloads of every length up to 96, eight in flight at once
    for start in range(0, 97, 8):
        sent = [bytes((start + k + j) & 0xFF for j in range((start + k) % 97)) for k in range(8)]
        for payload in sent:
            ctl.stage_payload(payload)
            ctl.post()
        assert [ctl.collect() for _ in sent] == sent
    # partial pipelines between single rounds
    for depth in (1, 3, 5, 8):
        for i in range(depth):
            ctl.stage_payload(bytes([depth, i]))
            ctl.post()
        assert [ctl.collect() for _ in range(depth)] == [bytes([depth, i]) for i in range(depth)]
        assert ctl.round(b"single") == b"single"


# ---- faults: a dead coprocessor, a second and a killed controller ---------------------------------


def test_a_killed_coprocessor_fails_the_round_and_does_not_hang(backline_case: Case) -> None:
    """A coprocessor process killed (SIGKILL) is a PeerError well before the round's deadline; one
    in this process that stopped is a PeerError or the deadline, every round, never a hang."""
    c = backline_case
    port = c.port()
    peer = c.coprocessor(port)
    if c.transport.in_process:
        ctl = c.controller(port, timeout_ms=300)
        assert ctl.round(b"\x01") == b"\x01"
        peer.kill()
        for _ in range(3):
            with pytest.raises((PeerError, DeadlineError)):
                ctl.round(b"\x01")
        peer.close()
        with pytest.raises((PeerError, DeadlineError)):
            ctl.round(b"\x01")
        return
    ctl = c.controller(port, timeout_ms=60000)
    assert ctl.round(b"\x01") == b"\x01"
    peer.kill()
    t0 = time.monotonic()
    with pytest.raises(PeerError) as info:
        ctl.round(b"\x01")
    # the peer's going, not the 60 s deadline (that would be a DeadlineError); a loose hang guard
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert any(word in str(info.value) for word in c.transport.peer_gone), info.value
    with pytest.raises((PeerError, DeadlineError)):
        ctl.round(b"\x01")  # and it stays failed


def test_a_second_controller_is_refused_and_the_next_one_continues(backline_case: Case) -> None:
    c = backline_case
    port = c.port()
    c.coprocessor(port)
    first = c.controller(port)
    with pytest.raises(KeyTakenError) as info:  # one controller per key in a process
        Session.open(c.name, "controller", c.key, config=c.transport.config(port), in_bytes=1, out_bytes=1)
    assert "already" in str(info.value)
    assert first.round(b"\x03") == b"\x02"
    first.destroy()
    second = c.controller(port)  # the key is free again; the sequence continues
    assert [second.round(bytes([i]))[0] for i in range(8)] == list(STEANE)


def test_a_killed_controller_lets_the_next_one_in(backline_case: Case) -> None:
    """While a controller in another process lives a second one is refused; once it is killed the
    next one gets in and the rounds go on."""
    c = backline_case
    c.needs("process")
    port = c.port()
    c.coprocessor(port)
    code = ("import sys; from backline_core import Session; "
            f"s = Session.open({c.name!r}, 'controller', {c.key!r}, config={c.transport.config(port)!r}, "
            "in_bytes=1, out_bytes=1); [s.round(b'\\x02') for _ in range(5)]; print('up', flush=True); "
            "sys.stdin.read()")
    ctl = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert ctl.stdout.readline().strip() == "up"
        with pytest.raises((KeyTakenError, TransportError)) as info:
            Session.open(c.name, "controller", c.key, config=c.transport.config(port, connect_timeout_ms=3000),
                         in_bytes=1, out_bytes=1)
        assert c.transport.second_controller_says in str(info.value), info.value
    finally:
        ctl.kill()
        ctl.wait(30)
        ctl.stdin.close()
        ctl.stdout.close()
    s = c.controller(port)
    assert [s.round(bytes([i]))[0] for i in (1, 2, 4)] == [0x01, 0x10, 0x40]


# ---- the endpoint: a busy port, a foreign peer, none at all ---------------------------------------


def test_a_busy_port_is_one_line_and_exit_status_2(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    with socket.socket() as taken:
        taken.bind((c.transport.host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("coprocessor", "serve", "--transport", c.name, "--key", c.key, "--fn", "steane",
                         "--config", c.transport.coprocessor_config(port), timeout=120)
    usage_error(result, f"port {port} on {c.transport.host} is in use")


def test_a_server_that_is_not_a_coprocessor_is_refused(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    with _listening(b"SSH-2.0-OpenSSH_9.2\r\n") as port:
        with pytest.raises(BacklineError) as info:
            Session.open(c.name, "controller", c.key, config=c.transport.config(port, connect_timeout_ms=5000),
                         in_bytes=1, out_bytes=1)
    assert f"is not a Backline {c.name} peer" in str(info.value), info.value


def test_a_client_that_is_not_a_controller_is_dropped_and_the_coprocessor_serves_on(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    port = c.port()
    peer = c.coprocessor(port)
    with socket.create_connection((c.transport.host, port)) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.settimeout(30)
        said = b""
        try:
            while chunk := s.recv(4096):
                said += chunk
        except ConnectionResetError:
            pass
    assert len(said) <= 12 + 32, said  # at most the coprocessor's CHALLENGE: nothing about what it serves
    assert c.controller(port).round(b"\x03") == b"\x02"
    assert peer.serve.proc.poll() is None


def test_a_controller_for_another_key_is_refused_and_not_told_the_served_key(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    port = c.port()
    c.coprocessor(port)
    with pytest.raises(NotFoundError) as info:
        c.controller(port, key=f"{c.key}-other")
    said = str(info.value)
    assert f"does not serve key '{c.key}-other'" in said and f"'{c.key}'" not in said, said  # nothing of what it serves
    assert c.controller(port).round(b"\x03") == b"\x02"


def test_a_silent_server_is_a_deadline_error(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    with socket.socket() as silent:
        silent.bind((c.transport.host, 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(DeadlineError) as info:
            Session.open(c.name, "controller", c.key, config=c.transport.config(port, connect_timeout_ms=1500),
                         in_bytes=1, out_bytes=1)
    assert "no CHALLENGE message" in str(info.value), info.value


# ---- the trust model: both ends prove they hold the placement's secret, on this connection --------


def _other_secret(tmp: str) -> str:
    from .._trust import generate_secret_file

    return generate_secret_file(os.path.join(tmp, f"other-{uuid.uuid4().hex[:8]}"))


def _handshake(host: str, port: int, key: str, secret: bytes | None, *, protocol: str,
               tamper: Any = None) -> tuple[int, bytes]:
    """A controller's side of the handshake in Python (backline/trust.h, remote.h): the OFFER's
    status and text. ``secret`` None sends a tag of zeros; ``tamper(hello) -> hello`` edits HELLO."""
    import struct

    from .._trust import connection_addresses, new_nonce, tag

    with socket.create_connection((host, port), timeout=HANG_GUARD_S) as s:
        head = _recv_exactly(s, 12)
        magic, version, kind, size = struct.unpack(">IHHI", head)
        assert kind == 5 and size == 32, (kind, size)  # CHALLENGE
        ns = _recv_exactly(s, 32)
        ask = struct.pack(">I", _abi_version()) + key.encode().ljust(64, b"\0") + b"\0" * 4
        nc = new_nonce()
        client, server = connection_addresses(s, server=False)
        proof = tag(secret, "client", protocol, ns, nc, client, server, ask) if secret else b"\0" * 32
        hello = ask + nc + proof
        if tamper is not None:
            hello = tamper(hello)
        s.sendall(struct.pack(">IHHI", magic, version, 1, len(hello)) + hello)
        head = _recv_exactly(s, 12)
        _, _, kind, size = struct.unpack(">IHHI", head)
        body = _recv_exactly(s, size)
        assert kind == 2, kind  # OFFER
        return struct.unpack(">i", body[:4])[0], body[-32 - 160:-32].rstrip(b"\0")


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            raise ConnectionError(f"closed after {len(got)} of {n} bytes")
        got += chunk
    return got


def _abi_version() -> int:
    from .._abi import lib

    return lib.BACKLINE_ABI_VERSION


def test_a_controller_without_the_secret_is_refused_before_anything_is_said(backline_case: Case, tmp_path: Any) -> None:
    from .._abi import lib
    from .._trust import read_secret_file
    from . import test_secret

    c = backline_case
    c.needs("endpoint")
    port = c.port()
    c.coprocessor(port)
    with pytest.raises(AuthenticationError) as info:
        c.controller(port, secret_file=_other_secret(str(tmp_path)))
    said = str(info.value)
    assert "refused this controller's authentication" in said and "secret_file" in said, said
    # The same from a client written to the spec (a cross-check of the Python and C transcripts):
    # a wrong tag is refused, the right one taken, and a wrong key is told nothing the port serves.
    status, text = _handshake(c.transport.host, port, c.key, None, protocol=c.name)
    assert status == lib.BL_EAUTH and c.key.encode() not in text, (status, text)
    secret = read_secret_file(test_secret())
    status, text = _handshake(c.transport.host, port, c.key + "x", secret, protocol=c.name)
    assert status == lib.BL_ENOTFOUND and f"'{c.key}'".encode() not in text, (status, text)
    # A HELLO whose asked-for key was changed after it was signed is refused.
    status, _ = _handshake(c.transport.host, port, c.key, secret, protocol=c.name,
                           tamper=lambda h: h[:4] + b"Z" + h[5:])
    assert status == lib.BL_EAUTH, status
    assert c.controller(port).round(b"\x03") == b"\x02"


def test_a_coprocessor_without_the_secret_is_refused_by_the_controller(backline_case: Case, tmp_path: Any) -> None:
    """Another user's coprocessor on the port answers with forged corrections: it cannot prove it holds the secret."""
    c = backline_case
    c.needs("endpoint")
    port = c.port()
    c.coprocessor(port, secret_file=_other_secret(str(tmp_path)))
    with pytest.raises(AuthenticationError) as info:
        c.controller(port)
    assert "did not prove it holds" in str(info.value) or "refused this controller's authentication" in \
        str(info.value), info.value


@contextmanager
def _relay(host: str, to_port: int) -> Iterator[int]:
    """A TCP relay on a free port forwarding bytes both ways to ``to_port`` (a man in the middle)."""
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen()
    stop = threading.Event()

    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while not stop.is_set():
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve() -> None:
        try:
            a, _ = listener.accept()
        except OSError:
            return
        b = socket.create_connection((host, to_port), timeout=HANG_GUARD_S)
        a.settimeout(HANG_GUARD_S)
        t = threading.Thread(target=pump, args=(b, a), daemon=True)
        t.start()
        pump(a, b)
        t.join(HANG_GUARD_S)
        a.close()
        b.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(HANG_GUARD_S)


def test_a_relay_cannot_reuse_the_handshake_of_a_controller(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    port = c.port()
    c.coprocessor(port)
    with _relay(c.transport.host, port) as relayed:
        with pytest.raises(AuthenticationError):
            c.controller(relayed)
    assert c.controller(port).round(b"\x03") == b"\x02"


def test_a_missing_or_open_secret_file_is_a_clear_error(backline_case: Case, tmp_path: Any) -> None:
    c = backline_case
    c.needs("endpoint")
    port = c.port()
    with pytest.raises(InvalidArgumentError, match="authenticates both ends with a secret: give both nodes secret_file"):
        c.controller(port, secret_file=None)
    open_file = tmp_path / "open"
    open_file.write_text("a secret that all may read\n")
    open_file.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="open to group/other .*chmod 600"):
        c.controller(port, secret_file=str(open_file))
    result = run_cli("coprocessor", "serve", "--transport", c.name, "--key", c.key, "--fn", "steane",
                     "--config", c.transport.coprocessor_config(port, secret_file=str(tmp_path / "none")), timeout=120)
    usage_error(result, "cannot open the secret file")


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def test_stalled_handshakes_do_not_deny_the_coprocessor(backline_case: Case) -> None:
    """Connections that say nothing, or a HELLO header and stall, hold no controller out."""
    import struct

    c = backline_case
    c.needs("endpoint")
    c.needs("process")
    port = c.port()
    c.coprocessor(port)
    held = []
    try:
        for i in range(200):
            s = socket.create_connection((c.transport.host, port), timeout=HANG_GUARD_S)
            held.append(s)
            if i % 2:
                head = _recv_exactly(s, 12)
                magic, version = struct.unpack(">IH", head[:6])
                s.sendall(struct.pack(">IHHI", magic, version, 1, 136))  # a HELLO's header, then nothing
        assert c.controller(port).round(b"\x03") == b"\x02"
    finally:
        for s in held:
            s.close()


def test_a_thousand_junk_connections_leave_no_descriptor_or_memory_behind(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    c.needs("process")
    port = c.port()
    peer = c.coprocessor(port)
    pid = peer.serve.proc.pid
    ctl = c.controller(port)
    assert ctl.round(b"\x03") == b"\x02"  # warm: what a served controller allocates is there
    fds, rss = _descriptors(pid), _rss_kib(pid)
    junk = [b"", b"GET / HTTP/1.0\r\n\r\n", os.urandom(12), b"\xff" * 4096]
    for i in range(1000):
        try:
            with socket.create_connection((c.transport.host, port), timeout=HANG_GUARD_S) as s:
                if junk[i % 4]:
                    s.sendall(junk[i % 4])
                if i % 3 == 0:
                    s.shutdown(socket.SHUT_WR)  # half-open
        except OSError:
            pass  # refused or reset under the flood: that is allowed
    deadline = time.monotonic() + HANG_GUARD_S  # the coprocessor closes what it dropped when it next runs
    while _descriptors(pid) > fds and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _descriptors(pid) <= fds, (fds, _descriptors(pid))
    assert _rss_kib(pid) < rss + 8 * 1024, (rss, _rss_kib(pid))  # the pending table is fixed-size: no growth
    assert ctl.round(b"\x05") == steane(5)
    ctl.destroy()
    assert c.controller(port).round(b"\x06") == steane(6)  # and a new controller is still let in
    assert peer.serve.proc.poll() is None


def steane(syndrome: int) -> bytes:
    return bytes([STEANE[syndrome]])


def test_a_coprocessor_without_an_endpoint_needs_one(backline_case: Case) -> None:
    c = backline_case
    c.needs("endpoint")
    with pytest.raises(PlacementError) as info:
        resolve(c.placement(None))
    said = str(info.value)
    assert f"transport '{c.name}' needs a network endpoint on each coprocessor" in said and "Endpoint" in said, said


# ---- where coprocessors run --------------------------------------------------------------------------


def test_a_place_the_transport_does_not_run_coprocessors_in_is_refused(backline_case: Case) -> None:
    c = backline_case
    t = c.transport
    refused = [p for p in RUNS_IN if p not in t.places and p != "executor"]
    if not refused:
        pytest.skip(f"transport {t.name!r} runs coprocessors in every place but an executor")
    for place in refused:
        with pytest.raises(PlacementError) as info:
            resolve(t.placement(c.key, c.port(), runs_in=place))
        assert f"runs coprocessors in {', '.join(t.places)}, not {place!r}" in str(info.value), info.value


def test_a_runs_in_that_is_no_place_is_refused(backline_case: Case) -> None:
    c = backline_case
    with pytest.raises(PlacementError) as info:
        Coprocessor(name=c.key, coprocessor_fn="echo", runs_in="inline")  # memcpy's old locality name
    said = str(info.value)
    assert "runs_in='inline'" in said and "'controller-thread'" in said and "'process'" in said, said
    config = c.transport.coprocessor_config(c.port())
    with pytest.raises(PlacementError, match="runs coprocessors in .*not 'nowhere'"):
        Session.create(c.name, "coprocessor", c.key, config, runs_in="nowhere")
    with pytest.raises(TransportError, match="runs_in='nowhere' is not a place"):
        Session.create(c.name, "controller", c.key, c.transport.config(c.port()), runs_in="nowhere")


# ---- what the rest of Backline runs over the transport ---------------------------------------------


@pytest.mark.parametrize("extraction", ["bare", "flag"])
def test_the_ghz_demo_gives_the_samples_memcpy_gives(backline_case: Case, extraction: str) -> None:
    """Only the placement changes (``backline demo ghz --transport T --compare [--extraction flag]`` does
    the same): the steane table after every gate, or flagged extraction decoded once per shot by a
    decoder built from the program's detector error model."""
    c = backline_case
    t = c.transport
    if (t.name, t.place) == ("memcpy", "thread"):
        pytest.skip("memcpy in a thread is what the demo is compared with")
    demo = pytest.importorskip("backline_compiler.demos.ghz_steane", reason="needs backline-compiler[frontend]")
    decoder, params = demo.DECODERS[extraction]
    if extraction == "flag":
        pytest.importorskip("backline_decoder_lut", reason="flag extraction's demo decoder is the lut plugin")
    code = {"extraction": extraction, "coprocessor_fn": decoder, "decoder_params": params or None}
    port = c.port()
    shots = 30
    over = demo.run(demo.device("default.clifford", noise=0.01, seed=7, transport=t.name, runs_in=t.place,
                                endpoint=None if port is None else Endpoint(host=t.host, port=port), **code), shots)
    in_thread = demo.run(demo.device("default.clifford", noise=0.01, seed=7, **code), shots)
    assert over.samples.tolist() == in_thread.samples.tolist()
    assert over.rtt[demo.DECODER_NODE]["rounds"] == in_thread.rtt[demo.DECODER_NODE]["rounds"] > 0


def test_a_coprocessor_in_an_executor_answers(backline_case: Case) -> None:
    """runs_in="executor": the coprocessor's compiled code runs in an executor's process (and
    listens on its endpoint there, for a transport with endpoints)."""
    c = backline_case
    c.needs("executor")
    orc = pytest.importorskip("backline_executor_orc", reason="needs backline-executor-orc")
    pytest.importorskip("backline_compiler", reason="an executor coprocessor is compiled by backline-compiler")
    t = c.transport
    port = c.port()
    with orc.Executor.local() as ex:
        p = Placement(controller=Controller(init_args={"timeout_ms": t.timeout_ms, **t.init_args}), transport=t.name,
                      coprocessors=[Coprocessor(name=c.key, coprocessor_fn="steane", executor=ex,
                                                endpoint=None if port is None else Endpoint(host=t.host, port=port),
                                                init_args=dict(t.init_args))])
        with deploy(p, in_bytes=1, out_bytes=1) as d:
            assert [d.session().round(bytes([i]))[0] for i in (1, 2, 7)] == [0x01, 0x10, 0x04]


# ---- the bench floor -----------------------------------------------------------------------------------


def _floor(c: Case, timeout_ms: int) -> Any:
    """The transport's bench floor for 8-byte rounds, not started yet."""
    import numpy as np  # the floor's round trips are an array

    from ..sdk import BenchConfig

    cfg = BenchConfig(transport=c.name, rounds=100, payload_bytes=8, host=c.transport.host)
    return c.transport.record.bench_floor(cfg, {**c.transport.init_args, "timeout_ms": timeout_ms}), np


def test_a_killed_floor_responder_ends_the_round_with_an_error(backline_case: Case) -> None:
    c = backline_case
    c.needs("floor")
    f, np = _floor(c, 2000)
    with f:
        out = np.zeros(50, dtype=np.uint64)
        f.run(1, out)
        assert (out > 0).all()
        pid = f.pid
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(PeerError, match="closed|failed"):
            f.run(51, out)
        assert time.monotonic() - t0 < HANG_GUARD_S
        with pytest.raises(BacklineError, match="broken by an earlier failure"):
            f.run(101, out[:1])  # the handle is done for
    assert gone(pid)


def test_a_stopped_floor_responder_ends_the_round_at_its_deadline(backline_case: Case) -> None:
    c = backline_case
    c.needs("floor")
    f, np = _floor(c, 300)
    with f:
        out = np.zeros(10, dtype=np.uint64)
        f.run(1, out)
        assert (out > 0).all()
        f.pause()
        with pytest.raises(DeadlineError, match="did not answer round 11 within 300 ms"):
            f.run(11, out)
        pid = f.pid
    assert gone(pid), "a stopped responder outlived its floor"


# ---- refusals -------------------------------------------------------------------------------------------

#: configuration the core refuses for every transport: (item, words of the refusal)
BAD_CONFIGS = [
    ("slots", ["malformed configuration item 'slots'", "key=value"]),
    ("slots=3", ["slots=3", "power of two"]),
    ("slot_bytes=100", ["slot_bytes=100", "multiple of 64"]),
    ("bogus=1", ["unknown configuration key 'bogus'", "{name}", "known keys"]),
    ("timeout_ms=0", ["timeout_ms=0", "from 1 to"]),
    ("locality=thread", ["unknown configuration key 'locality'", "known keys"]),
    ("a=b=c", ["a=b=c"]),
    ("slots=4;;slot_bytes=64", ["malformed configuration item ''", "key=value"]),
]


@pytest.mark.parametrize("role", ["coprocessor", "controller"])
def test_bad_configuration_is_refused_and_leaves_the_key_free(backline_case: Case, role: str) -> None:
    c = backline_case
    t = c.transport
    port = c.port()
    where = endpoint_config(t.host, port)  # the endpoint only (empty without one): the item is the rest
    runs_in = t.place if role == "coprocessor" else None
    cases = [*BAD_CONFIGS, (";;", ["malformed configuration", "ends with ';'"])]
    if "cpu" in t.record.init_args:  # a poller thread to pin
        cases += [("cpu=99999", ["cpu=99999"]), ("cpu=-2", ["cpu=-2"])]  # what else it says is the backend's
    for item, words in cases:
        with pytest.raises(InvalidArgumentError) as info:
            Session.create(t.name, role, c.key, f"{where};{item}" if where else item, runs_in=runs_in)
        said = str(info.value)
        for word in words:
            word = word.format(name=t.name)
            assert word in said, f"{item}: {word!r} not in {said!r}"
        assert info.value.status == "BL_EINVAL"
    if t.record.init_args:  # the unknown key's refusal lists the transport's own keys
        with pytest.raises(InvalidArgumentError) as info:
            Session.create(t.name, role, c.key, f"{where};bogus=1" if where else "bogus=1", runs_in=runs_in)
        assert all(k in str(info.value) for k in t.record.init_args), info.value
    good = t.config(port) if role == "controller" else t.coprocessor_config(port)
    with Session.create(t.name, role, c.key, good, runs_in=runs_in) as again:  # the refusals left the key free
        assert again.key == c.key


def test_the_transports_own_bad_values_are_refused(backline_case: Case) -> None:
    c = backline_case
    t = c.transport
    if not t.bad_values:
        pytest.skip(f"the conftest of {t} names no bad values of its own keys")
    for args, words in t.bad_values:
        with pytest.raises(BacklineError) as info:
            Session.open(t.name, "controller", c.key, config=t.config(c.port(), **args), in_bytes=1, out_bytes=1)
        for word in words:
            assert word in str(info.value), f"{args}: {word!r} not in {info.value}"
        with pytest.raises(PlacementError) as info:  # and resolution says so before anything starts
            resolve(Placement(controller=Controller(init_args={**t.init_args, **args}), transport=t.name,
                              coprocessors=[Coprocessor(name=c.key, coprocessor_fn="steane", runs_in=t.place,
                                                        endpoint=None if not t.networked else
                                                        Endpoint(host=t.host, port=c.port()))]))
        assert words[0] in str(info.value), f"{args}: {words[0]!r} not in {info.value}"


# ---- nothing left behind ---------------------------------------------------------------------------------


def test_nothing_is_left_behind_after_a_deployment(backline_case: Case) -> None:
    """A deployment's rounds, then its end: no child process and no segment of its key remain
    (``backline_case`` checks that after every test of the suite; this one is nothing else)."""
    c = backline_case
    with deploy(c.placement(c.port(), "echo"), in_bytes=8, out_bytes=8) as d:
        assert d.session().round(b"x") == b"x"
        pids = [p.pid for p in d.processes.values()]
    assert all(gone(pid) for pid in pids), pids
