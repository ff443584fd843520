"""The executor server end to end: a real ``serve`` process, spoken to over TCP from Python.

The client here is a small independent implementation of the protocol (hmac, struct,
the frame codec), so these tests check the server against the brief, not against the C
client. Every server a test starts is stopped (and its session processes checked gone)
in the fixture's teardown.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import llvmlite.binding as llvm
import pytest
from backline_executor_orc import wire
from backline_executor_orc.secret import generate_secret_file, read_secret_file

from backline_core import TransportError
from backline_core.sdk import ChildProcess, children, connection_addresses, gone, lib, stop_process

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()

READY_TIMEOUT = 60.0
REPLY_TIMEOUT = 30.0

KERNELS = """
declare i32 @usleep(i32)
declare i32 @bl_await(i64)
declare void @_exit(i32)
@flag = global i32 0
@__dso_handle = external hidden global i8  ; what C++ static destructors use: the JIT defines it

define i64 @dso() {
  %p = ptrtoint ptr @__dso_handle to i64
  ret i64 %p
}

define void @quit() {
  call void @_exit(i32 3)
  unreachable
}

define i64 @add1(i64 %x) {
  %y = add i64 %x, 1
  ret i64 %y
}
define {i64, i32} @pair(i64 %x) {
  %y = mul i64 %x, 2
  %r0 = insertvalue {i64, i32} undef, i64 %y, 0
  %r1 = insertvalue {i64, i32} %r0, i32 -3, 1
  ret {i64, i32} %r1
}
define i32 @crash() {
  store volatile i32 1, ptr inttoptr (i64 8 to ptr)
  ret i32 0
}
define void @inc(ptr %p, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %body]
  %done = icmp uge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %at = getelementptr i8, ptr %p, i64 %i
  %v = load i8, ptr %at
  %w = add i8 %v, 1
  store i8 %w, ptr %at
  %next = add i64 %i, 1
  br label %loop
exit:
  ret void
}
define i32 @ok() {
  ret i32 0
}
define i32 @fail() {
  %r = call i32 @bl_await(i64 987654321)
  ret i32 %r
}
define i32 @wait_flag() {
entry:
  br label %check
check:
  %f = load volatile i32, ptr @flag
  %set = icmp ne i32 %f, 0
  br i1 %set, label %exit, label %sleep
sleep:
  %u = call i32 @usleep(i32 1000)
  br label %check
exit:
  ret i32 0
}
define void @release() {
  store volatile i32 1, ptr @flag
  ret void
}
"""

UNDEFINED = """
declare i32 @no_such_symbol_anywhere_1()
declare i32 @no_such_symbol_anywhere_2()
define i32 @uses() {
  %a = call i32 @no_such_symbol_anywhere_1()
  %b = call i32 @no_such_symbol_anywhere_2()
  %c = add i32 %a, %b
  ret i32 %c
}
"""


def build_object(text: str, triple: str | None = None) -> bytes:
    triple = triple or llvm.get_process_triple()
    module = llvm.parse_assembly(text)
    module.triple = triple
    tm = llvm.Target.from_triple(triple).create_target_machine(reloc="pic", codemodel="default")
    return tm.emit_object(module)


@pytest.fixture(scope="module")
def kernels() -> bytes:
    return build_object(KERNELS)


# -- processes ---------------------------------------------------------------------------


def alive(pid: int) -> bool:
    return not gone(pid)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (waited {timeout} s)")
        time.sleep(0.02)


@dataclass
class Server:
    child: ChildProcess
    address: str
    pid: int
    triple: str
    log: Path
    sessions_seen: set[int] = field(default_factory=set)

    @property
    def proc(self) -> subprocess.Popen:
        return self.child.proc

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host.strip("[]"), int(port)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def sessions(self) -> list[int]:
        pids = children(self.pid, zombies=True)  # unreaped ones too: the supervisor reaps its sessions
        self.sessions_seen.update(pids)
        return pids


def serve_child(cmd: list[str], log: Path, env: dict | None = None) -> tuple[ChildProcess, str]:
    """``serve`` started with its stderr in ``log``, and its ready line (AssertionError with the log if none)."""
    with open(log, "wb") as err:  # in this test's process group, as a shell would start it
        child = ChildProcess(cmd, name="the executor server", ready=r"^backline-executor ready .*", stderr=err,
                             env=env, process_group=False)
    try:
        return child, child.wait_ready(READY_TIMEOUT).group(0)
    except TransportError as exc:
        child.terminate(15)
        raise AssertionError(f"{exc}; log: {log.read_text()}") from None


def stop(server: Server) -> None:
    server.sessions()
    server.child.terminate(15)  # SIGTERM, SIGKILL after 15 s
    for pid in server.sessions_seen:  # session processes die with the supervisor (PDEATHSIG)
        with contextlib.suppress(ProcessLookupError):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    return generate_secret_file(str(tmp_path / "secret"))


@pytest.fixture
def start(tmp_path: Path, secret_file: str) -> Iterator:
    """start(*args) -> a running Server (``serve --bind 127.0.0.1:0 --secret-file F --parent-pid US``)."""
    started: list[Server] = []

    def run(*args: str, secret: str | None = secret_file, env: dict | None = None) -> Server:
        log = tmp_path / f"server-{len(started)}.log"
        cmd = [sys.executable, "-m", "backline_executor_orc", "serve", "--bind", "127.0.0.1:0",
               "--parent-pid", str(os.getpid()), *args]
        if secret:
            cmd += ["--secret-file", secret]
        child, line = serve_child(cmd, log, env)
        server = Server(child, "", child.pid, "", log)
        started.append(server)
        parts = dict(p.split("=", 1) for p in line.split()[2:])
        assert parts["pid"] == str(child.pid), line
        assert parts["protocol"] == str(lib.BL_EXECUTOR_PROTOCOL_VERSION)
        server.address, server.triple = parts["address"], parts["triple"]
        return server

    try:
        yield run
    finally:
        for server in started:
            stop(server)
        for server in started:
            assert server.proc.returncode == 0, f"server exited {server.proc.returncode}: {server.log_text()}"
            left = [pid for pid in server.sessions_seen if alive(pid)]
            assert not left, f"session processes left behind: {left}"


@pytest.fixture
def server(start) -> Server:
    return start()


# -- a client ------------------------------------------------------------------------------


class Refused(Exception):
    pass


class Reply:
    def __init__(self, frame_type: int, body: bytes) -> None:
        self.type, self.body = frame_type, body

    @property
    def name(self) -> str:
        return wire.type_name(self.type)

    def error(self) -> tuple[int, str]:
        assert self.type in (lib.BL_EXEC_ERROR, lib.BL_EXEC_CRASHED), f"expected ERROR, got {self.name}"
        r = wire.Reader(self.body, self.name)
        return r.i32("status"), r.str("message")

    def __repr__(self) -> str:
        detail = self.error() if self.type in (lib.BL_EXEC_ERROR, lib.BL_EXEC_CRASHED) else self.body[:40]
        return f"Reply({self.name}, {detail!r})"


class Client:
    """One connection: handshake in ``__init__``; ``request`` sends a frame and reads one reply."""

    def __init__(self, server: Server, secret: bytes, *, nonce: bytes | None = None) -> None:
        self.sock = socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT)
        try:
            started = time.monotonic()
            t, self.server_nonce = self.read()
            assert t == lib.BL_EXEC_HELLO and len(self.server_nonce) == lib.BL_EXECUTOR_NONCE_BYTES
            nonce = nonce or os.urandom(lib.BL_EXECUTOR_NONCE_BYTES)
            self.addresses = connection_addresses(self.sock, server=False)
            self.auth = wire.frame(lib.BL_EXEC_AUTH,
                                   nonce + wire.client_tag(secret, self.server_nonce, nonce, *self.addresses))
            self.sock.sendall(self.auth)
            t, body = self.read()
            if t == lib.BL_EXEC_REFUSED:
                raise Refused()
            assert t == lib.BL_EXEC_WELCOME and body == wire.server_tag(secret, self.server_nonce, nonce, *self.addresses)
            self.handshake_seconds = time.monotonic() - started
        except BaseException:
            self.sock.close()
            raise

    def read(self) -> tuple[int, bytes]:
        return wire.read_frame(self.sock, idle_deadline=time.monotonic() + REPLY_TIMEOUT)

    def request(self, frame_type: int, body: bytes = b"") -> Reply:
        self.sock.sendall(wire.frame(frame_type, body))
        return Reply(*self.read())

    def send_binary(self, name: str, data: bytes, kind: int = lib.BL_EXEC_KIND_OBJECT) -> Reply:
        return self.request(lib.BL_EXEC_SEND_BINARY, wire.pack_u8(kind) + wire.pack_str(name) + data)

    def launch(self, symbol: str, obj: str, sig: str, args: list[bytes]) -> Reply:
        from backline_executor_orc import signature

        blob = signature.pack_args(signature.parse(sig), args)
        return self.request(lib.BL_EXEC_LAUNCH, wire.pack_str(symbol) + wire.pack_str(obj) + wire.pack_str(sig)
                            + wire.pack_u32(len(args)) + blob)

    def call(self, symbol: str, library: str, sig: str, args: list[bytes], num_input: int | None = None) -> Reply:
        from backline_executor_orc import signature

        blob = signature.pack_args(signature.parse(sig), args)
        n = len(args) if num_input is None else num_input
        return self.request(lib.BL_EXEC_CALL, wire.pack_str(symbol) + wire.pack_str(library) + wire.pack_str(sig)
                            + wire.pack_u32(len(args)) + wire.pack_u32(n) + blob)

    def launch_async(self, symbol: str, obj: str) -> Reply:
        return self.request(lib.BL_EXEC_LAUNCH_ASYNC, wire.pack_str(symbol) + wire.pack_str(obj))

    def await_(self, token: int, timeout_ms: int) -> Reply:
        return self.request(lib.BL_EXEC_AWAIT, wire.pack_u64(token) + wire.pack_u32(timeout_ms))

    def close(self) -> None:
        self.sock.close()

    def at_eof(self) -> bool:
        """The server closed this connection (reads EOF, or a reset)."""
        self.sock.settimeout(REPLY_TIMEOUT)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def secret(secret_file: str) -> bytes:
    return read_secret_file(secret_file)


def _i64(v: int) -> bytes:
    return struct.pack("<q", v)


def _result(reply: Reply) -> bytes:
    assert reply.type == lib.BL_EXEC_RESULT, reply
    return reply.body


def _ok(reply: Reply) -> None:
    assert reply.type == lib.BL_EXEC_OK, reply


# -- the handshake ----------------------------------------------------------------------------


def test_ready_line_and_handshake(server, secret):
    assert server.triple == llvm.get_process_triple()
    with Client(server, secret) as c:
        _ok(c.request(lib.BL_EXEC_CLOSE))
        assert c.at_eof()
    text = wait_until(lambda: "ended" in server.log_text() and server.log_text(), 30, "no end logged")
    assert "authenticated" in text
    assert secret.decode() not in server.log_text()


def test_hello_reveals_only_version_and_a_fresh_nonce(server, secret):
    nonces = []
    for _ in range(2):
        with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
            hello = wire.recv_exact(s, 12 + lib.BL_EXECUTOR_NONCE_BYTES, time.monotonic() + REPLY_TIMEOUT, "HELLO")
            assert struct.unpack(">IHHI", hello[:12]) == (lib.BL_EXECUTOR_MAGIC, lib.BL_EXECUTOR_PROTOCOL_VERSION,
                                                          lib.BL_EXEC_HELLO, lib.BL_EXECUTOR_NONCE_BYTES)
            nonces.append(hello[12:])
            s.sendall(wire.frame(lib.BL_EXEC_AUTH, bytes(64)))  # wrong: the very next bytes are REFUSED, then EOF
            refused = wire.recv_exact(s, 12, time.monotonic() + REPLY_TIMEOUT, "REFUSED")
            assert refused == wire.frame(lib.BL_EXEC_REFUSED)
            assert s.recv(1) == b""
    assert nonces[0] != nonces[1]


def test_wrong_secret_is_refused_and_the_server_goes_on(server, secret):
    with pytest.raises(Refused):
        Client(server, b"not the secret at all, sorry")
    with Client(server, secret) as c:
        _ok(c.request(lib.BL_EXEC_CLOSE))
    assert "refused: wrong authentication tag" in server.log_text()


def test_replayed_auth_is_refused(server, secret):
    with Client(server, secret) as good:
        captured = good.auth
    with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
        wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT)  # a new HELLO, a new nonce
        s.sendall(captured)
        assert wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT) == (lib.BL_EXEC_REFUSED, b"")


@pytest.mark.parametrize("header, what", [
    (wire.pack_header(lib.BL_EXEC_AUTH, 1 << 30), "AUTH announced 1073741824 body bytes"),
    (wire.pack_header(lib.BL_EXEC_LAUNCH, 64), "sent LAUNCH where AUTH was expected"),
    (struct.pack(">IHHI", 0xDEADBEEF, 1, lib.BL_EXEC_AUTH, 64), "bad frame magic"),
    (struct.pack(">IHHI", lib.BL_EXECUTOR_MAGIC, 9, lib.BL_EXEC_AUTH, 64), "version 9"),
])
def test_bad_auth_headers_are_refused_before_the_body(server, header, what):
    with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
        wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT)
        s.sendall(header)  # no body: the refusal must come from the header alone
        assert wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT) == (lib.BL_EXEC_REFUSED, b"")
    wait_until(lambda: what in server.log_text(), 30, f"{what!r} not logged")


def test_truncated_auth_gets_no_welcome(server):
    with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
        wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT)
        s.sendall(wire.pack_header(lib.BL_EXEC_AUTH, 64) + b"only a part")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(100) == b""  # closed, nothing sent
    wait_until(lambda: "closed before authenticating" in server.log_text(), 30, "truncated AUTH not logged")


def test_silent_client_is_dropped_at_the_handshake_deadline(server):
    with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
        wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT)
        assert s.recv(1) == b""  # BL_TRUST_HANDSHAKE_TIMEOUT_MS after the accept
    assert "did not finish in time" in server.log_text()


def test_junk_connections_leave_the_server_as_it_was(server, secret):
    baseline = fd_count(server.pid)  # idle, before any connection

    def back_to_baseline(what: str) -> None:
        wait_until(lambda: fd_count(server.pid) == baseline, 30,
                   f"{what}: the server's descriptors did not return to {baseline} (now {fd_count(server.pid)})")

    with Client(server, secret) as c:
        before = c.handshake_seconds
        _ok(c.request(lib.BL_EXEC_CLOSE))
    back_to_baseline("after a session")
    rng = random.Random(7)
    hello_bytes = 12 + lib.BL_EXECUTOR_NONCE_BYTES
    done = 0
    while done < 1000:
        batch = []
        for _ in range(50):
            kind = rng.randrange(5)
            s = socket.socket()
            s.settimeout(REPLY_TIMEOUT)
            try:
                s.connect(server.host_port)
                if kind == 0:  # random bytes
                    s.sendall(os.urandom(rng.randint(1, 300)))
                elif kind == 1:  # half-open: our side stops sending, never authenticates
                    s.shutdown(socket.SHUT_WR)
                elif kind == 2:  # early close with a reset
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif kind == 3:  # a valid-looking AUTH header, then garbage
                    s.sendall(wire.pack_header(lib.BL_EXEC_AUTH, 64) + os.urandom(rng.randint(0, 200)))
                # kind 4: connect and close at once
            except OSError:
                pass
            batch.append(s)
        for s in batch:
            s.close()
        done += len(batch)
    back_to_baseline(f"after {done} junk connections")
    assert server.proc.poll() is None
    with Client(server, secret) as c:
        after = c.handshake_seconds
        _ok(c.request(lib.BL_EXEC_CLOSE))
    back_to_baseline("after the last session")
    print(f"handshake latency before the junk: {before * 1e3:.2f} ms, after: {after * 1e3:.2f} ms "
          f"({done} junk connections, HELLO is {hello_bytes} bytes)")


# -- objects and launches ---------------------------------------------------------------------


def test_launch_add1_and_a_struct_return(server, secret, kernels):
    with Client(server, secret) as c:
        _ok(c.send_binary("/host/kernels.o", kernels))
        assert _result(c.launch("add1", "/host/kernels.o", "i64 (i64)", [_i64(41)])) == _i64(42)
        pair = _result(c.launch("pair", "/host/kernels.o", "{i64, i32} (i64)", [_i64(21)]))
        assert pair == _i64(42) + struct.pack("<i", -3)
        assert _result(c.launch("add1", "/host/kernels.o", "i64 (i64)", [_i64(-1)])) == _i64(0)  # cached wrapper
        assert _result(c.launch("dso", "/host/kernels.o", "i64 ()", [])) != _i64(0)
        _ok(c.request(lib.BL_EXEC_CLOSE))


def test_request_errors_keep_the_session(server, secret, kernels):
    with Client(server, secret) as c:
        _ok(c.send_binary("k.o", kernels))
        status, message = c.send_binary("k.o", kernels).error()
        assert status == lib.BL_ESTATE and "already sent" in message
        status, message = c.launch("nope", "k.o", "i64 (i64)", [_i64(1)]).error()
        assert status == lib.BL_ENOTFOUND and "does not define symbol 'nope'" in message
        status, message = c.launch("add1", "other.o", "i64 (i64)", [_i64(1)]).error()
        assert status == lib.BL_ENOTFOUND and "other.o was not sent" in message
        status, message = c.request(lib.BL_EXEC_LAUNCH, wire.pack_str("add1") + wire.pack_str("k.o")
                                    + wire.pack_str("i64 (i64)") + wire.pack_u32(2) + _i64(1)).error()
        assert status == lib.BL_EINVAL and "2 arguments sent" in message
        status, message = c.request(lib.BL_EXEC_LAUNCH, wire.pack_str("add1") + wire.pack_str("k.o")
                                    + wire.pack_str("<2 x i64> (i64)") + wire.pack_u32(1) + _i64(1)).error()
        assert status == lib.BL_EINVAL and "'<2 x i64>'" in message
        status, message = c.request(lib.BL_EXEC_LAUNCH, wire.pack_str("add1") + wire.pack_str("k.o")
                                    + wire.pack_str("i64 (i64)") + wire.pack_u32(1) + b"\1\2").error()
        assert status == lib.BL_EINVAL and "args blob" in message
        status, message = c.send_binary("x", b"", kind=7).error()
        assert status == lib.BL_EINVAL and "unknown kind 7" in message
        assert _result(c.launch("add1", "k.o", "i64 (i64)", [_i64(1)])) == _i64(2)
        _ok(c.request(lib.BL_EXEC_CLOSE))


def test_crash_is_reported_and_other_sessions_live(server, secret, kernels):
    with Client(server, secret) as other, Client(server, secret) as victim:
        for c in (other, victim):
            _ok(c.send_binary("k.o", kernels))
        reply = victim.launch("crash", "k.o", "i32 ()", [])
        assert reply.type == lib.BL_EXEC_CRASHED, reply
        number, message = reply.error()
        assert number == signal.SIGSEGV and "SIGSEGV" in message and "launched code" in message
        assert victim.at_eof()
        assert _result(other.launch("add1", "k.o", "i64 (i64)", [_i64(9)])) == _i64(10)
        _ok(other.request(lib.BL_EXEC_CLOSE))
    with Client(server, secret) as fresh:
        _ok(fresh.send_binary("k.o", kernels))
        assert _result(fresh.launch("add1", "k.o", "i64 (i64)", [_i64(1)])) == _i64(2)
    assert "died of SIGSEGV" in server.log_text()


def test_exit_in_launched_code_is_reported(server, secret, kernels):
    with Client(server, secret) as c:
        _ok(c.send_binary("k.o", kernels))
        reply = c.launch("quit", "k.o", "void ()", [])
        assert reply.type == lib.BL_EXEC_CRASHED, reply
        assert reply.error() == (0, "the session process exited with status 3 while running launched code")
        assert c.at_eof()


def test_undefined_symbols_are_named_and_nothing_is_linked(server, secret):
    with Client(server, secret) as c:
        status, message = c.send_binary("u.o", build_object(UNDEFINED)).error()
        assert status == lib.BL_ENOTFOUND
        assert "no_such_symbol_anywhere_1, no_such_symbol_anywhere_2" in message and "--preload" in message
        status, message = c.launch("uses", "u.o", "i32 ()", []).error()
        assert status == lib.BL_ENOTFOUND and "was not sent" in message


def test_other_machines_are_refused(server, secret):
    with Client(server, secret) as c:
        status, message = c.send_binary("arm.o", build_object(KERNELS, "aarch64-unknown-linux-gnu")).error()
        here = "x86-64" if server.triple.startswith("x86_64") else "aarch64"
        other = "aarch64 (ELF machine 183)" if here == "x86-64" else "x86-64 (ELF machine 62)"
        if here == "aarch64":
            status, message = c.send_binary("x86.o", build_object(KERNELS, "x86_64-unknown-linux-gnu")).error()
        assert status == lib.BL_EINVAL and f"is for {other}; this executor runs {here} code" in message
        status, message = c.send_binary("junk.o", b"\x7fELF" + os.urandom(200)).error()
        assert status == lib.BL_EINVAL and "junk.o" in message
        status, message = c.send_binary("text.o", b"hello").error()
        assert status == lib.BL_EINVAL and "not a valid ELF object" in message


def test_buffers_round_trip(server, secret, kernels):
    data = bytes(range(256)) * 40
    with Client(server, secret) as c:
        _ok(c.send_binary("k.o", kernels))
        body = _result(c.launch("inc", "k.o", "void (ptr, i64)", [data, _i64(len(data))]))
        assert body == struct.pack(">Q", len(data)) + bytes((b + 1) % 256 for b in data)
        assert _result(c.launch("inc", "k.o", "void (ptr, i64)", [b"", _i64(0)])) == struct.pack(">Q", 0)


def test_call_preloaded_libraries(start, secret):
    server = start("--preload", "libm.so.6")
    with Client(server, secret) as c:
        version = _result(c.call("bl_abi_version", "libbackline", "i32 ()", []))
        assert struct.unpack("<i", version)[0] == lib.bl_abi_version()
        cos = _result(c.call("cos", "libm.so.6", "double (double)", [struct.pack("<d", 0.0)]))
        assert cos == struct.pack("<d", 1.0)
        status, message = c.call("bl_abi_version", "libnothere.so", "i32 ()", []).error()
        assert status == lib.BL_ENOTFOUND and "libbackline" in message and "libm.so.6" in message
        status, message = c.call("no_such_fn", "libbackline", "i32 ()", []).error()
        assert status == lib.BL_ENOTFOUND and "no_such_fn" in message
        status, message = c.call("bl_abi_version", "libbackline", "i32 ()", [], num_input=1).error()
        assert status == lib.BL_EINVAL and "num_input_args" in message


def test_launch_async_and_await(server, secret, kernels):
    with Client(server, secret) as c:
        _ok(c.send_binary("k.o", kernels))

        def token(reply: Reply) -> int:
            assert reply.type == lib.BL_EXEC_TOKEN, reply
            return wire.Reader(reply.body, "TOKEN").u64("token")

        t_ok = token(c.launch_async("ok", "k.o"))
        t_fail = token(c.launch_async("fail", "k.o"))
        t_wait = token(c.launch_async("wait_flag", "k.o"))
        assert 1 <= t_ok < t_fail < t_wait
        _ok(c.await_(t_ok, 30000))
        status, message = c.await_(t_fail, 30000).error()
        assert status == lib.BL_EINVAL and "names no asynchronous step" in message  # libbackline's text, that thread's
        status, message = c.await_(t_wait, 0).error()
        assert status == lib.BL_ETIMEOUT and "still running" in message
        _result(c.launch("release", "k.o", "void ()", []))
        _ok(c.await_(t_wait, 30000))  # the token stayed valid after the timeout
        for t in (t_ok, 999):
            status, message = c.await_(t, 1000).error()
            assert status == lib.BL_ESTATE
        status, message = c.launch_async("nope", "k.o").error()
        assert status == lib.BL_ENOTFOUND
        _ok(c.request(lib.BL_EXEC_CLOSE))


def test_close_with_a_launch_still_running(server, secret, kernels):
    with Client(server, secret) as c:
        _ok(c.send_binary("k.o", kernels))
        assert c.launch_async("wait_flag", "k.o").type == lib.BL_EXEC_TOKEN
        status, message = c.request(lib.BL_EXEC_CLOSE).error()  # after BL_EXECUTOR_CLOSE_TIMEOUT_MS
        assert status == lib.BL_ETIMEOUT and "still running" in message
        assert c.at_eof()
    wait_until(lambda: not server.sessions(), 30, "the session process did not exit")


def test_assets_live_in_a_private_dir_removed_with_the_session(server, secret):
    with Client(server, secret) as c:
        _ok(c.send_binary("/data/table.bin", b"\0\1\2" * 100, kind=lib.BL_EXEC_KIND_ASSET))
        wait_until(server.sessions, 30, "no session process")
        roots = [p for p in Path(tempfile.gettempdir()).glob(f"backline-executor-{server.pid}-*")]
        assert len(roots) == 1
        files = list(roots[0].rglob("*table.bin"))
        assert len(files) == 1 and files[0].read_bytes() == b"\0\1\2" * 100
        assert files[0].stat().st_mode & 0o777 == 0o600 and files[0].parent.stat().st_mode & 0o777 == 0o700
        status, message = c.launch("f", "/data/table.bin", "void ()", []).error()
        assert status == lib.BL_EINVAL and "asset" in message
        _ok(c.request(lib.BL_EXEC_CLOSE))
    wait_until(lambda: not list(roots[0].iterdir()), 30, "the session's asset dir was not removed")


@pytest.mark.parametrize("frame, status, what", [
    (wire.pack_header(lib.BL_EXEC_LAUNCH, wire.body_limit(lib.BL_EXEC_LAUNCH) + 1), lib.BL_ETOOBIG, "announced"),
    (wire.pack_header(lib.BL_EXEC_AWAIT, 12) + b"\0" * 5, lib.BL_EPEER, "truncated frame"),
    (wire.frame(lib.BL_EXEC_LAUNCH, b"\0\x09add"), lib.BL_EPEER, "malformed LAUNCH"),
    (wire.frame(lib.BL_EXEC_AWAIT, b"\0" * 11), lib.BL_EPEER, "malformed AWAIT"),
    (wire.frame(99, b""), lib.BL_EINVAL, "type 99 is not a request"),
    (wire.frame(lib.BL_EXEC_OK, b""), lib.BL_EINVAL, "OK is not a request"),
])
def test_malformed_requests_end_the_session(server, secret, frame, status, what):
    with Client(server, secret) as c:
        c.sock.sendall(frame)
        if status == lib.BL_EPEER and what == "truncated frame":
            c.sock.shutdown(socket.SHUT_WR)
        got, message = Reply(*c.read()).error()
        assert got == status and what in message
        assert c.at_eof()


def test_max_sessions(start, secret):
    server = start("--max-sessions", "1")
    with Client(server, secret) as first:
        _result(first.call("bl_abi_version", "libbackline", "i32 ()", []))  # it has its session
        with Client(server, secret) as second:  # authenticated, then told why it gets no session
            status, message = Reply(*second.read()).error()
            assert status == lib.BL_EBUSY and "--max-sessions" in message
            assert second.at_eof()
        _result(first.call("bl_abi_version", "libbackline", "i32 ()", []))


def test_ipv6_loopback_and_log_file(start, secret, tmp_path):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"cannot bind [::1] here: {exc}")
    log = tmp_path / "executor.log"
    server = start("--bind", "[::1]:0", "--log-file", str(log))
    assert server.address.startswith("[::1]:")
    with Client(server, secret) as c:
        _ok(c.request(lib.BL_EXEC_CLOSE))
    wait_until(lambda: "ended" in log.read_text(), 30, "the session's end was not logged in the --log-file")
    assert server.log_text() == ""  # nothing on stderr


# -- stopping -----------------------------------------------------------------------------------


def test_sigterm_stops_everything(start, secret, kernels):
    server = start()
    clients = [Client(server, secret) for _ in range(2)]
    try:
        for c in clients:
            _ok(c.send_binary("k.o", kernels))
        sessions = wait_until(lambda: len(server.sessions()) == 2 and server.sessions(), 30, "no two sessions")
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
        assert not [pid for pid in sessions if alive(pid)]
        for c in clients:
            reply = Reply(*c.read())
            assert reply.type == lib.BL_EXEC_CRASHED and "shutting down" in reply.error()[1]
    finally:
        for c in clients:
            c.close()
    assert not list(Path(tempfile.gettempdir()).glob(f"backline-executor-{server.pid}-*"))


def test_parent_exit_stops_the_server(tmp_path, secret_file):
    parent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    log = tmp_path / "server.log"
    server = None
    try:
        server, _ = serve_child([sys.executable, "-m", "backline_executor_orc", "serve", "--secret-file", secret_file,
                                 "--parent-pid", str(parent.pid)], log)
        parent.stdin.close()
        parent.wait(30)
        assert server.wait(30) == 0
        assert f"stopping: parent process {parent.pid} exited" in log.read_text()
    finally:
        if server is not None:
            server.terminate(15)
        stop_process(parent, 30.0)


# -- the command line ---------------------------------------------------------------------------


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_executor_orc", "serve", *args], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args, match", [
    (["--bind", "0.0.0.0:0"], "not a loopback address"),
    (["--bind", "[::]:0"], "not a loopback address"),
    (["--bind", "127.0.0.1"], "give HOST:PORT"),
    (["--bind", "127.0.0.1:70000"], "not in 0..65535"),
    (["--preload", "/no/such/libx.so"], "--preload /no/such/libx.so: cannot load it"),
    (["--max-sessions", "0"], "at least 1"),
    (["--bogus"], "unrecognized arguments"),
])
def test_user_errors_are_one_line(secret_file, args, match):
    done = _serve("--secret-file", secret_file, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and match in done.stderr, done.stderr


def test_secret_errors_are_one_line(tmp_path, secret_file):
    os.chmod(secret_file, 0o644)
    done = _serve("--secret-file", secret_file)
    assert done.returncode == 2 and f"chmod 600 {secret_file}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    env = {k: v for k, v in os.environ.items() if k != "BACKLINE_EXECUTOR_SECRET"}
    done = _serve(env=env)
    assert done.returncode == 2 and "--secret-file" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_secret_from_the_environment(start, secret):
    server = start(secret=None, env={**os.environ, "BACKLINE_EXECUTOR_SECRET": secret.decode()})
    with Client(server, secret) as c:
        _ok(c.request(lib.BL_EXEC_CLOSE))


# -- the trust kit: bounded handshakes, connection-bound tags, malformed objects ----------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


def c_client_runs(address: str, secret_file: str) -> int:
    """The real C client (libbackline): open a session at ``address``, call bl_abi_version there, close.

    Returns what the executor's call returned; a failed open raises its Backline error.
    """
    from backline_core.sdk import check, ffi

    check(lib.bl_executor_configure(address.encode(), secret_file.encode(), int(REPLY_TIMEOUT * 1000)))
    session = lib.bl_executor_open(address.encode())
    if session == ffi.NULL:
        check(lib.bl_status_take())  # the open recorded its failure
        raise AssertionError(f"bl_executor_open({address}) failed without a status")
    try:
        slot = ffi.new("int32_t *")
        results = ffi.new("void *[1]", [slot])
        check(lib.bl_executor_call(session, b"bl_abi_version", b"libbackline", b"i32 ()", ffi.NULL, 0, 0, results, 1))
        return slot[0]
    finally:
        check(lib.bl_executor_close(session))


def _junk_connection(server: Server, kind: int, source: str, rng: random.Random) -> socket.socket:
    """One connection from ``source`` that never authenticates: idle, half-open or sending junk."""
    s = socket.socket()
    s.settimeout(REPLY_TIMEOUT)
    try:
        s.bind((source, 0))
        s.connect(server.host_port)
        if kind == 1:  # half-open: our side stops sending
            s.shutdown(socket.SHUT_WR)
        elif kind == 2:  # random bytes
            s.sendall(os.urandom(rng.randint(1, 300)))
        elif kind == 3:  # a valid AUTH header, then less than its body
            s.sendall(wire.pack_header(lib.BL_EXEC_AUTH, 64) + os.urandom(rng.randint(0, 63)))
        # kind 0: idle
    except OSError:
        pass  # the server may already have closed it to make room: that is the point
    return s


@pytest.mark.defect("128 idle unauthenticated connections locked every client out of the executor")
def test_idle_and_junk_connections_lock_no_client_out(server, secret_file):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # this test holds ~1,150 sockets at once
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    version = lib.bl_abi_version()
    assert c_client_runs(server.address, secret_file) == version  # warm: the first session's imports are done
    wait_until(lambda: not server.sessions(), 30, "the first session did not end")
    fds, rss = fd_count(server.pid), rss_kib(server.pid)
    # the bound while junk is connected: the gate's pending handshakes, plus a little slack
    bound = fds + lib.BL_TRUST_MAX_PENDING + 8
    rng = random.Random(11)
    held: list[socket.socket] = []
    try:
        for _ in range(128):  # idle, each accepted (it got its HELLO): the old limit, all used up
            s = _junk_connection(server, 0, "127.0.0.1", rng)
            held.append(s)
            with contextlib.suppress(OSError, wire.ProtocolError):
                wire.recv_exact(s, 12 + lib.BL_EXECUTOR_NONCE_BYTES, time.monotonic() + REPLY_TIMEOUT, "HELLO")
        assert c_client_runs(server.address, secret_file) == version
        assert fd_count(server.pid) <= bound
        for i in range(1000):  # idle, half-open and junk-sending, from five loopback addresses
            held.append(_junk_connection(server, i % 4, f"127.0.0.{1 + i % 5}", rng))
        assert c_client_runs(server.address, secret_file) == version
        assert fd_count(server.pid) <= bound, f"{fd_count(server.pid)} descriptors, over {bound}"
    finally:
        for s in held:
            s.close()
    # gone again: at most a session's descriptor still being reaped, and no growth of memory
    # beyond allocator slack (16 MiB: the flood's 1,128 HELLOs and log lines are far less)
    wait_until(lambda: not server.sessions() and fd_count(server.pid) <= fds, 30,
               f"the server's descriptors did not return to {fds} (now {fd_count(server.pid)})")
    assert rss_kib(server.pid) <= rss + 16 * 1024, f"VmRSS grew from {rss} KiB to {rss_kib(server.pid)} KiB"
    assert server.proc.poll() is None
    assert "a newer connection took its place" in server.log_text()


class Relay:
    """A TCP relay on 127.0.0.1: each connection to it is forwarded, both ways, to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        import threading

        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.closing = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        import threading

        while not self.closing:
            try:
                a, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            b = socket.create_connection(self.target, timeout=REPLY_TIMEOUT)
            for src, dst in ((a, b), (b, a)):
                t = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
                self.threads.append(t)
                t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.1)
        with contextlib.suppress(OSError):
            while not self.closing:
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        for t in self.threads:
            t.join(REPLY_TIMEOUT)
        assert not any(t.is_alive() for t in self.threads), "a relay thread did not stop"

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.mark.defect("a relay on the port a client dials could authenticate to the executor with the client's AUTH")
def test_a_relayed_handshake_is_refused(server, secret_file):
    from backline_core import AuthenticationError

    with Relay(server.host_port) as relay:
        with pytest.raises(AuthenticationError, match="refused authentication"):
            c_client_runs(relay.address, secret_file)
        assert relay.connections == 1
    wait_until(lambda: "refused: wrong authentication tag" in server.log_text(), 30, "the refusal was not logged")
    assert "authenticated" not in server.log_text() and not server.sessions_seen and not server.sessions()
    assert c_client_runs(server.address, secret_file) == lib.bl_abi_version()  # a direct connection works


def test_a_version_1_client_is_told_the_versions(server):
    with socket.create_connection(server.host_port, timeout=REPLY_TIMEOUT) as s:
        wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT)
        s.sendall(struct.pack(">IHHI", lib.BL_EXECUTOR_MAGIC, 1, lib.BL_EXEC_AUTH, 64) + bytes(64))
        assert wire.read_frame(s, idle_deadline=time.monotonic() + REPLY_TIMEOUT) == (lib.BL_EXEC_REFUSED, b"")
    wait_until(lambda: "peer speaks protocol version 1, this executor speaks 2" in server.log_text(), 30,
               "the version was not logged")


@pytest.mark.parametrize("frame_type", ["SEND_BINARY", "LAUNCH", "CALL", "CLOSE", "AWAIT"])
def test_oversized_headers_are_refused_before_any_body_is_read(server, secret, frame_type):
    kind = getattr(lib, f"BL_EXEC_{frame_type}")
    with Client(server, secret) as c:
        sessions = wait_until(server.sessions, 30, "no session process")
        c.sock.sendall(wire.pack_header(kind, 0xFFFFFFFF))  # 4 GiB announced, nothing follows
        status, message = Reply(*c.read()).error()
        assert status == lib.BL_ETOOBIG and f"a {frame_type} frame announced 4294967295 body bytes" in message
        for pid in sessions:  # nothing like 4 GiB was allocated for the body
            with contextlib.suppress(FileNotFoundError):  # the session may have ended already
                status = Path(f"/proc/{pid}/status").read_text()
                rss = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
                assert all(kib < 1 << 20 for kib in rss), f"session process {pid}: VmRSS {rss} KiB"
        assert c.at_eof()


SMALL = """
declare i32 @usleep(i32)
@counter = global i64 5
define i64 @add1(i64 %x) {
  %y = add i64 %x, 1
  ret i64 %y
}
define i64 @bump() {
  %c = load i64, ptr @counter
  %d = add i64 %c, 1
  store i64 %d, ptr @counter
  %u = call i32 @usleep(i32 0)
  ret i64 %d
}
"""


def _fuzz_positions(data: bytes, rng: random.Random) -> list[int]:
    """Every byte of the ELF header, the section headers, the symbol table and the relocation
    sections; one byte in five of the rest (code, unwind tables, strings)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    every = set(range(64)) | set(range(shoff, shoff + 64 * shnum))
    for i in range(shnum):
        sh_type, _flags, _addr, offset, size = struct.unpack_from("<IQQQQ", data, shoff + 64 * i + 4)
        if sh_type in (2, 4, 9):  # SYMTAB, RELA, REL
            every |= set(range(offset, offset + size))
    rest = [i for i in range(len(data)) if i not in every]
    return sorted(every | set(rng.sample(rest, len(rest) // 5)))


@pytest.mark.defect("a one-byte-corrupt object killed the session inside LLVM's link (SIGABRT)")
def test_corrupt_objects_are_errors_and_the_session_goes_on(server, secret):
    good = build_object(SMALL)
    rng = random.Random(5)
    outcomes: dict[str, int] = {}
    with Client(server, secret) as c:
        _ok(c.send_binary("good.o", good))
        for n, i in enumerate(_fuzz_positions(good, rng)):
            broken = bytearray(good)
            broken[i] ^= 0xFF
            reply = c.send_binary(f"broken-{i}.o", bytes(broken))
            assert reply.type in (lib.BL_EXEC_OK, lib.BL_EXEC_ERROR), f"byte {i}: {reply}"
            if reply.type == lib.BL_EXEC_ERROR:
                status, message = reply.error()
                assert status in (lib.BL_EINVAL, lib.BL_ENOTFOUND), f"byte {i}: {reply}"
                assert f"broken-{i}.o" in message
                kind = "the trial link failed" if "LLVM's linker" in message else "refused by the checks"
            else:
                kind = "linked"
            outcomes[kind] = outcomes.get(kind, 0) + 1
            if n % 50 == 0:  # the session still answers
                assert _result(c.launch("add1", "good.o", "i64 (i64)", [_i64(n)])) == _i64(n + 1)
        assert _result(c.launch("bump", "good.o", "i64 ()", [])) == _i64(6)
        _ok(c.request(lib.BL_EXEC_CLOSE))
    assert "died of" not in server.log_text()
    print("outcomes:", outcomes)


def test_an_object_llvm_aborts_on_is_an_error(server, secret):
    """A relocation whose addend LLVM cannot apply passes every structural check, and aborts
    LLVM's linker: the trial link in a child finds that out, and the session goes on."""
    good = build_object(SMALL)
    with Client(server, secret) as c:
        found = None
        shoff, = struct.unpack_from("<Q", good, 0x28)
        shnum, = struct.unpack_from("<H", good, 0x3C)
        for k in range(shnum):
            sh_type, _f, _a, offset, size = struct.unpack_from("<IQQQQ", good, shoff + 64 * k + 4)
            if sh_type == 4 and size:
                found = offset
                break
        assert found is not None, "the object has no RELA section"
        broken = bytearray(good)
        broken[found + 16 + 7] ^= 0x40  # the first relocation's addend: ~2**62 away
        status, message = c.send_binary("abort.o", bytes(broken)).error()
        assert status == lib.BL_EINVAL and "abort.o is not a valid relocatable object" in message, message
        _ok(c.send_binary("good.o", good))
        assert _result(c.launch("add1", "good.o", "i64 (i64)", [_i64(1)])) == _i64(2)
    print(message)


def test_a_trusted_forward_authenticates_without_addresses(start, secret_file):
    """Executor.ssh's forward is a relay by design: a server started with
    BACKLINE_EXECUTOR_FORWARDED=1 and a client that marked the forward's port agree on tags
    that cover no addresses; neither end alone does."""
    from backline_core import AuthenticationError

    server = start(env={**os.environ, "BACKLINE_EXECUTOR_FORWARDED": "1"})
    with Relay(server.host_port) as forward:
        with pytest.raises(AuthenticationError):  # the client does not know it goes through a forward
            c_client_runs(forward.address, secret_file)
        check_status = lib.bl_executor_configure_forwarded(forward.address.encode(), 1)
        assert check_status == lib.BL_OK
        assert c_client_runs(forward.address, secret_file) == lib.bl_abi_version()
    with pytest.raises(AuthenticationError):  # a forwarded server refuses the bound tags of a direct client
        c_client_runs(server.address, secret_file)
