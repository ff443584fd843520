"""The supervisor of ``backline executor serve``: authenticates connections, forks sessions.

One thread and a selector: it accepts, sends HELLO at once, reads exactly one AUTH frame
per connection without blocking (a 12-byte header, checked before the 64-byte body is
read, all within BL_TRUST_HANDSHAKE_TIMEOUT_MS of the accept), answers WELCOME or REFUSED,
and forks one session process (:mod:`.session`) per authenticated connection. The tags
are backline/trust.h's, bound to the connection's two addresses. Handshakes in progress
pass a :class:`HandshakeGate` (BL_TRUST_MAX_PENDING in all, BL_TRUST_MAX_PENDING_PER_PEER
from one address): a new connection over a limit closes the oldest pending one, so idle
or junk connections cost a bounded number of descriptors and lock no client out. It keeps its
own descriptor of each session's socket, so when a session process dies of a signal it
can still tell the client (CRASHED). It stops on SIGTERM/SIGINT/SIGHUP or when the
``--parent-pid`` process exits: sessions get SIGTERM, then SIGKILL after 2 s, and are
reaped before it exits.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import resource
import secrets
import selectors
import shutil
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from backline_core.sdk import HandshakeGate, StopWatch, connection_addresses, lib, new_nonce, signal_name, tags_equal

from . import session, wire

log = logging.getLogger("backline.executor")

MAX_PENDING = lib.BL_TRUST_MAX_PENDING  #: connections in their handshake (or drained after REFUSED) at once
MAX_PENDING_PER_PEER = lib.BL_TRUST_MAX_PENDING_PER_PEER  #: ... from one peer address
HANDSHAKE_TIMEOUT_S = lib.BL_TRUST_HANDSHAKE_TIMEOUT_MS / 1000  #: from accept to a checked AUTH
STOP_GRACE_S = 2.0  #: SIGTERM -> SIGKILL for sessions when the supervisor stops
LINGER_S = 0.5  #: how long a refused connection is drained so the client can read REFUSED
_PR_SET_PDEATHSIG = 1
_AUTH_BYTES = lib.BL_TRUST_NONCE_BYTES + lib.BL_TRUST_TAG_BYTES  # client nonce | tag_C
#: env var: "1" when the executor is reached only through a forward (Executor.ssh's -L port),
#: whose two ends see different connections: the tags then cover no addresses (all zero)
FORWARDED_ENV = "BACKLINE_EXECUTOR_FORWARDED"
_NO_ADDRESS = bytes(lib.BL_TRUST_ADDRESS_BYTES)


def format_address(host: str, port: int) -> str:
    """``127.0.0.1:9000``, ``[::1]:9000``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _peer(sock: socket.socket) -> tuple[str, str]:
    """(``host:port`` for messages, the host alone: the peer the gate counts)."""
    try:
        name = sock.getpeername()
    except OSError:
        return "?", "?"
    return format_address(name[0], name[1]), name[0]


@dataclass
class _Pending:
    """A connection in its handshake (or being drained after REFUSED)."""

    sock: socket.socket
    peer: str
    nonce: bytes
    deadline: float
    addresses: tuple[bytes, bytes] = (b"", b"")  # (client, server) as the transcript has them
    buf: bytearray = field(default_factory=bytearray)
    need: int = 0  # bytes wanted in buf before the next step
    lingering: bool = False


@dataclass
class _Child:
    pid: int
    sock: socket.socket  # the supervisor's descriptor of the session's socket (for CRASHED)
    peer: str
    asset_dir: str


class Supervisor:
    """Serves ``listener`` until stopped; :meth:`run` returns the exit status (0)."""

    def __init__(
        self,
        listener: socket.socket,
        secret: bytes,
        libraries: Mapping[str, ctypes.CDLL],
        *,
        parent_pid: int | None = None,
        max_sessions: int = 64,
        keep_fds: Sequence[int] = (),
        forwarded: bool | None = None,
    ) -> None:
        self.listener = listener
        self._secret = secret
        self.libraries = dict(libraries)
        self.parent_pid = parent_pid
        self.max_sessions = max_sessions
        self.keep_fds = set(keep_fds)
        self.forwarded = os.environ.get(FORWARDED_ENV) == "1" if forwarded is None else forwarded
        self.pid = os.getpid()
        self.pending: dict[int, _Pending] = {}
        self.gate = HandshakeGate(MAX_PENDING, MAX_PENDING_PER_PEER)  # keys: the descriptors of self.pending
        self.children: dict[int, _Child] = {}
        self.stop: StopWatch | None = None  # armed by run(): signals, the parent's exit
        self.stopping = False
        self.selector = selectors.DefaultSelector()
        self.root = ""  # the session asset dirs' parent, made at the first session (then a stop removes it)

    # -- set-up -------------------------------------------------------------------------

    def _install(self) -> StopWatch:
        stop = StopWatch(self.parent_pid)  # SIGTERM, SIGINT, SIGHUP, the parent's exit
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the watch's wakeup fd hears it
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        for fd in stop.fds():
            self.selector.register(fd, selectors.EVENT_READ, "stop")
        return stop

    # -- the loop -----------------------------------------------------------------------

    def run(self, on_ready: Callable[[], None] | None = None) -> int:
        """Serve until a stop signal or the parent's exit; then stop the sessions and clean up.

        ``on_ready`` runs once the signal handlers are in place (it prints the ready line), so
        a SIGTERM right after the ready line still stops the server cleanly.
        """
        self.stop = stop = self._install()
        try:
            if on_ready is not None:
                on_ready()
            while not stop.triggered():  # a signal byte, SIGCHLD's included, is read here
                for key, events in self.selector.select(self._timeout()):
                    if key.data == "listen":
                        self._accept()
                    elif isinstance(key.data, _Pending):
                        try:
                            self._on_pending(key.data)
                        except Exception:  # one connection's trouble must not stop the server
                            log.error("%s dropped: the handshake failed:\n%s", key.data.peer, traceback.format_exc())
                            if key.data.sock.fileno() >= 0:
                                self._drop_pending(key.data, None)
                self._reap()
                self._expire()
            log.info("stopping: %s", stop.reason)
        finally:
            self._stop()
        return 0

    def _timeout(self) -> float:
        now = time.monotonic()
        timeout = 60.0
        if self.stop is not None and self.stop.poll_interval is not None:
            timeout = self.stop.poll_interval  # no pidfd on this kernel: the parent is polled
        for p in self.pending.values():
            timeout = min(timeout, p.deadline - now)
        return max(0.0, timeout)

    # -- handshakes ---------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, so handshakes in progress are not starved
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("cannot accept a connection: %s", exc.strerror)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                raise
            accepted = time.monotonic()
            peer, host = _peer(sock)
            try:
                addresses = (_NO_ADDRESS, _NO_ADDRESS) if self.forwarded else connection_addresses(sock, server=True)
            except (OSError, ValueError) as exc:  # reset already, or not an IP connection
                log.info("%s closed: no addresses for the handshake (%s)", peer, exc)
                sock.close()
                continue
            sock.setblocking(False)
            nonce = new_nonce()
            hello = wire.frame(lib.BL_EXEC_HELLO, nonce)
            try:
                sent = sock.send(hello)
            except OSError as exc:
                log.info("%s closed: sending HELLO failed (%s)", peer, exc.strerror or exc)
                sock.close()
                continue
            if sent != len(hello):  # a fresh socket's buffer always takes 44 bytes; be safe anyway
                log.info("%s closed: HELLO did not fit the socket buffer", peer)
                sock.close()
                continue
            p = _Pending(sock=sock, peer=peer, nonce=nonce, deadline=accepted + HANDSHAKE_TIMEOUT_S,
                         addresses=addresses, need=wire.HEADER.size)
            self._admit(p, host)

    def _admit(self, p: _Pending, host: str) -> None:
        """Track ``p`` as pending; the connection it displaces from the gate (if any) is closed."""
        victim = self.gate.admit(p.sock.fileno(), host)
        if victim is not None:
            old = self.pending.get(victim)
            if old is not None:
                why = ("closed: a newer connection took its place (more than "
                       f"{MAX_PENDING_PER_PEER} handshakes from {host}, or {MAX_PENDING} in all, at once)")
                self._drop_pending(old, None if old.lingering else why)
        self.pending[p.sock.fileno()] = p
        self.selector.register(p.sock, selectors.EVENT_READ, p)

    def _drop_pending(self, p: _Pending, reason: str | None) -> None:
        if reason:
            log.info("%s %s", p.peer, reason)
        fd = p.sock.fileno()
        if self.pending.get(fd) is p:
            del self.pending[fd]
            self.gate.done(fd)
        try:
            self.selector.unregister(p.sock)
        except (KeyError, ValueError):
            pass
        p.sock.close()

    def _refuse(self, p: _Pending, why: str) -> None:
        log.info("%s refused: %s", p.peer, why)
        try:
            p.sock.send(wire.frame(lib.BL_EXEC_REFUSED))
            p.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop_pending(p, None)
            return
        p.lingering = True  # read what the client still sends, so closing does not reset the connection
        p.deadline = time.monotonic() + LINGER_S

    def _on_pending(self, p: _Pending) -> None:
        try:
            data = p.sock.recv(65536 if p.lingering else p.need - len(p.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            why = f"closed: connection error during the handshake ({exc.strerror or exc})"
            self._drop_pending(p, None if p.lingering else why)
            return
        if not data:
            self._drop_pending(p, None if p.lingering else "closed before authenticating")
            return
        if p.lingering:
            return
        p.buf += data
        if len(p.buf) < p.need:
            return
        if p.need == wire.HEADER.size:
            try:
                frame_type, length = wire.parse_header(bytes(p.buf))
            except wire.ProtocolError as exc:
                self._refuse(p, str(exc))
                return
            if frame_type != lib.BL_EXEC_AUTH:
                self._refuse(p, f"sent {wire.type_name(frame_type)} where AUTH was expected")
                return
            if length != _AUTH_BYTES:
                self._refuse(p, f"AUTH announced {length} body bytes, not {_AUTH_BYTES}")
                return
            p.need += _AUTH_BYTES
            return
        body = bytes(p.buf[wire.HEADER.size:])
        client_nonce, tag = body[: lib.BL_TRUST_NONCE_BYTES], body[lib.BL_TRUST_NONCE_BYTES:]
        if not tags_equal(wire.client_tag(self._secret, p.nonce, client_nonce, *p.addresses), tag):
            self._refuse(p, "wrong authentication tag (the client does not hold this executor's secret, "
                         "or the connection is relayed)")
            return
        self._welcome(p, client_nonce)

    def _expire(self) -> None:
        now = time.monotonic()
        for p in [p for p in self.pending.values() if p.deadline <= now]:
            self._drop_pending(p, None if p.lingering else "closed: the handshake did not finish in time")

    def _welcome(self, p: _Pending, client_nonce: bytes) -> None:
        self.pending.pop(p.sock.fileno(), None)
        self.gate.done(p.sock.fileno())
        self.selector.unregister(p.sock)
        sock = p.sock
        welcome = wire.frame(lib.BL_EXEC_WELCOME, wire.server_tag(self._secret, p.nonce, client_nonce, *p.addresses))
        try:
            if sock.send(welcome) != len(welcome):
                raise OSError("WELCOME did not fit the socket buffer")
        except OSError as exc:
            log.info("%s authenticated, then lost: %s", p.peer, exc)
            sock.close()
            return
        if len(self.children) >= self.max_sessions:
            log.info("%s authenticated, but refused: %d sessions already run (--max-sessions)", p.peer,
                     self.max_sessions)
            try:
                sock.send(wire.frame(lib.BL_EXEC_ERROR, wire.error_body(lib.BL_EBUSY, (
                    f"the executor already runs {self.max_sessions} sessions (its --max-sessions); "
                    "close one or start it with a larger --max-sessions"))))
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                sock.close()
                return
            p.lingering, p.deadline = True, time.monotonic() + LINGER_S
            self._admit(p, _peer(sock)[1])
            return
        self._fork(sock, p.peer)

    # -- sessions -----------------------------------------------------------------------

    def _fork(self, sock: socket.socket, peer: str) -> None:
        if not self.root:  # named now, made by the first session that stores an asset (session.private_dir)
            self.root = os.path.join(tempfile.gettempdir(), f"backline-executor-{self.pid}-{secrets.token_hex(8)}")
        asset_dir = os.path.join(self.root, f"session-{secrets.token_hex(8)}")
        sock.setblocking(True)
        try:
            pid = os.fork()
        except OSError as exc:
            log.error("%s authenticated, but no session process could be started: %s", peer, exc)
            try:
                sock.send(wire.frame(lib.BL_EXEC_ERROR, wire.error_body(
                    lib.BL_EBACKEND, f"the executor could not start a session process: {exc}")))
            except OSError:
                pass
            sock.close()
            shutil.rmtree(asset_dir, ignore_errors=True)
            return
        if pid == 0:
            self._child(sock, asset_dir)  # never returns
        self.children[pid] = _Child(pid=pid, sock=sock, peer=peer, asset_dir=asset_dir)
        log.info("%s authenticated; session process %d", peer, pid)

    def _child(self, sock: socket.socket, asset_dir: str) -> None:
        """The session process: shed the supervisor's state, then serve; always ``os._exit``."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the supervisor, which stops us
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != self.pid:  # the supervisor died before prctl took effect
                os._exit(1)
            _, hard = resource.getrlimit(resource.RLIMIT_CORE)
            resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # a crash of launched code leaves no core file
            self._close_inherited(sock)
            code = session.serve(sock, libraries=self.libraries, asset_dir=asset_dir)
        except BaseException:  # noqa: BLE001 - the process must end here, whatever happened
            try:
                log.error("session process %d failed:\n%s", os.getpid(), traceback.format_exc())
            except BaseException:  # noqa: BLE001
                pass
        finally:
            try:  # ended by us, not by launched code: the supervisor must not add CRASHED after this
                sock.shutdown(socket.SHUT_RDWR)
            except BaseException:  # noqa: BLE001
                pass
            os._exit(code)

    def _close_inherited(self, sock: socket.socket) -> None:
        """Close every descriptor the session does not need (stdin/stdout become /dev/null)."""
        self.selector.close()
        self.listener.close()  # the stop watch's descriptors go with the rest below
        for p in self.pending.values():
            p.sock.close()
        for c in self.children.values():
            c.sock.close()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        keep = {0, 1, 2, sock.fileno(), *self.keep_fds}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the directory listing's own descriptor, already closed

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._ended(pid, status)

    def _ended(self, pid: int, status: int) -> None:
        child = self.children.pop(pid, None)
        if child is None:
            return
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            name = signal_name(number)
            if self.stopping:
                message = f"the executor is shutting down: its session process was stopped ({name})"
            else:
                message = f"the session process died of {name} (signal {number}) while running launched code"
            log.info("%s session process %d died of %s (signal %d)", child.peer, pid, name, number)
            self._tell_crashed(child.sock, number, message)
        else:
            code = os.waitstatus_to_exitcode(status)
            log.info("%s session process %d ended (exit status %d)", child.peer, pid, code)
            if code != 0:  # e.g. launched code called exit(); after its own ending the socket is shut down
                message = f"the session process exited with status {code} while running launched code"
                self._tell_crashed(child.sock, 0, message)
        child.sock.close()
        shutil.rmtree(child.asset_dir, ignore_errors=True)

    @staticmethod
    def _tell_crashed(sock: socket.socket, number: int, message: str) -> None:
        """CRASHED (signal ``number``, 0 for an exit) on the dead session's socket, without blocking."""
        try:
            sock.setblocking(False)
            try:  # unread request bytes would turn close() into a reset that eats CRASHED
                while sock.recv(65536):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            sock.send(wire.frame(lib.BL_EXEC_CRASHED, wire.crashed_body(number, message)))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # -- stopping -----------------------------------------------------------------------

    def _stop(self) -> None:
        self.stopping = True
        stop = self.stop
        for fd in stop.fds()[1:] if stop is not None else []:  # a gone parent's pidfd stays readable
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        for p in list(self.pending.values()):
            self._drop_pending(p, None)
        try:
            self.selector.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        while self.children and time.monotonic() < deadline:
            self.selector.select(min(0.05, max(0.0, deadline - time.monotonic())))
            if stop is not None:
                stop.triggered()  # empties the wakeup pipe (SIGCHLD)
            self._reap()
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(self.children):
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                self.children.pop(pid, None)
                continue
            self._ended(pid, status)
        self.selector.close()
        if stop is not None:
            stop.close()  # puts back the wakeup fd and the handlers it replaced
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
        log.info("stopped")
