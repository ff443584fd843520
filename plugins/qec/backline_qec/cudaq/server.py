"""A CUDA-Q QEC decoding server whose decoders run on Backline placements (``backline decoding-server``).

It speaks their UDP transport: one socket ("ring") per decoder, one datagram per request, the
response a whole slot sent back to the request's source. Each decoder is deployed on its own
placement (default memcpy, a thread) whose coprocessor runs the native CUQR session
(:mod:`.session`); each valid request is one round of a whole slot. Per datagram nothing runs in
Python: cuqr_session.c's ``cq_server_poll`` receives, classifies, routes and replies, and returns
here at least every :data:`POLL_S`. docs/cudaq-interop.md, "backline decoding-server".
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from backline_core import BacklineError, Controller, Coprocessor, InvalidArgumentError, Placement, deploy, get_library

from ..native import cq_last_error, ffi, lib
from . import wire
from .config import MAX_DECODERS
from .session import (BAD_KINDS, BAD_TEXT, DROP_KINDS, DROP_TEXT, SessionDecoder, session_function, split_counts,
                      with_slot_bytes)

#: the coprocessor's name in the placement the server makes, followed by the decoder id (a process
#: registers each coprocessor's session under its name, so every decoder needs its own)
COPROCESSOR = "decoder"
LOOPBACK = "127.0.0.1"
#: how often the serving loop looks at its stop flag and deadline
POLL_S = 0.1


@dataclass
class Ring:
    """One decoder's socket and what it served."""

    decoder_id: int
    sock: socket.socket
    port: int
    dispatched: int = 0


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _resolve(host: str) -> tuple[int, str]:
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_DGRAM, proto=socket.IPPROTO_UDP)
    except socket.gaierror as exc:
        raise InvalidArgumentError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr[0]


def decoder_placement(config: Any, placement: Placement | None = None,
                      slot_size: int = wire.DEFAULT_SLOT_SIZE) -> Placement:
    """The placement one decoder runs on: ``placement``'s single coprocessor with the decoder's
    CUQR session function, or memcpy with the coprocessor in a thread; the coprocessor's name ends
    in the id."""
    function = session_function([SessionDecoder.from_config(config)], slot_size)
    args = with_slot_bytes({}, slot_size)  # the transport's slots carry whole CUQR slots
    if placement is None:
        return Placement(controller=Controller(init_args=args), transport="memcpy", coprocessors=[
            Coprocessor(name=f"{COPROCESSOR}{config.id}", coprocessor_fn=function, runs_in="thread",
                        init_args=args)])
    if len(placement.coprocessors) != 1:
        raise InvalidArgumentError(f"the placement has {len(placement.coprocessors)} coprocessors; each decoder "
                                   "runs on one")
    node = placement.coprocessors[0]
    return dataclasses.replace(placement, coprocessors=[
        dataclasses.replace(node, name=f"{node.name}{config.id}", coprocessor_fn=function,
                            init_args=with_slot_bytes(node.init_args, slot_size))])


class DecodingServer:
    """The decoders of a config behind UDP sockets. ``start()`` deploys and binds, :meth:`serve`
    answers until told to stop or the timeout passes, :meth:`close` releases everything; use it
    as a context manager, in one thread."""

    def __init__(self, configs: Sequence[Any], *, host: str = LOOPBACK, port: int = 0,
                 num_slots: int = wire.DEFAULT_NUM_SLOTS, slot_size: int = wire.DEFAULT_SLOT_SIZE,
                 placement: Placement | None = None, allow_remote: bool = False,
                 log: Callable[[str], None] | None = None) -> None:
        if not configs:
            raise InvalidArgumentError("the config has no decoders")
        if len(configs) > MAX_DECODERS:
            raise InvalidArgumentError(f"{len(configs)} decoders; a server holds at most {MAX_DECODERS} (as CUDA-Q's)")
        ids = [c.id for c in configs]
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError(f"decoder ids {ids} repeat one")
        if not 0 <= port <= 65535:
            raise InvalidArgumentError(f"--port {port} is not in 0..65535")
        if port and len(configs) > 1:
            raise InvalidArgumentError(f"--port {port} with {len(configs)} decoders: each decoder has a port of its "
                                       "own; give --port 0 and read ring<id>=PORT from the READY line")
        if not 1 <= num_slots <= 4096:
            raise InvalidArgumentError(f"--num-slots {num_slots} is not in 1..4096")
        smallest = wire.HEADER_BYTES + wire.ENQUEUE_FIXED_BYTES + 1
        if not smallest <= slot_size <= wire.MAX_SLOT_SIZE:
            raise InvalidArgumentError(f"--slot-size {slot_size} is not in {smallest}..{wire.MAX_SLOT_SIZE} "
                                       "(a UDP datagram)")
        for c in configs:
            need = wire.HEADER_BYTES + wire.packed_bytes(c.num_observables)
            if need > slot_size:
                raise InvalidArgumentError(f"decoder {c.id}: its {c.num_observables} corrections need a "
                                           f"{need}-byte slot; --slot-size is {slot_size}")
        family, address = _resolve(host)
        if not is_loopback(address) and not allow_remote:
            raise InvalidArgumentError(f"--host {host} is not a loopback address and the protocol has no "
                                       "authentication: pass --allow-remote to serve other hosts")
        self.configs = list(configs)
        self.family, self.host, self.port = family, address, port
        self.num_slots, self.slot_size = num_slots, slot_size
        self.placement = placement
        self.log = log if log is not None else (lambda text: print(text, file=sys.stderr, flush=True))
        self.rings: list[Ring] = []
        self.dropped: Counter[str] = Counter()  # no reply: truncated header, oversized, magic, function
        self.malformed: Counter[str] = Counter()  # answered BAD_REQUEST: truncated, oversized, invalid payloads
        self.send_errors = 0
        self._stack = contextlib.ExitStack()
        self._loop: Any = None  # cq_server *
        self._logged: set[tuple[str, str]] = set()

    def __enter__(self) -> DecodingServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Deploy every decoder, then bind its socket (a slow decoder build comes before readiness)."""
        keys = []
        for c in self.configs:
            d = self._stack.enter_context(deploy(decoder_placement(c, self.placement, self.slot_size),
                                                 in_bytes=self.slot_size, out_bytes=self.slot_size))
            keys.append(d.session().key)
        for c in self.configs:
            sock = self._stack.enter_context(socket.socket(self.family, socket.SOCK_DGRAM))
            with contextlib.suppress(OSError):  # room for num_slots whole slots; the kernel may round it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(self.num_slots * self.slot_size, 4096))
            try:
                sock.bind((self.host, self.port))
            except OSError as exc:
                raise BacklineError(f"cannot bind UDP {self.host}:{self.port} for decoder {c.id}: "
                                    f"{exc.strerror or exc}") from None
            sock.setblocking(False)
            self.rings.append(Ring(c.id, sock, sock.getsockname()[1]))
        c_keys = [ffi.new("char[]", k.encode()) for k in keys]
        loop = lib.cq_server_create(get_library().encode(), ffi.new("char *[]", c_keys),
                                    ffi.new("int32_t[]", [r.sock.fileno() for r in self.rings]),
                                    ffi.new("int64_t[]", [r.decoder_id for r in self.rings]), len(self.rings),
                                    self.slot_size)
        if loop == ffi.NULL:
            raise BacklineError(f"the serving loop did not start: {cq_last_error()}")
        # closed before the deployments and sockets it uses (the stack unwinds last in, first out)
        self._stack.callback(self._close_loop)
        self._loop = loop

    def _close_loop(self) -> None:
        if self._loop is not None:
            self._update()
            loop, self._loop = self._loop, None
            lib.cq_server_free(loop)

    def ready_line(self) -> str:
        rings = " ".join(f"ring{r.decoder_id}={r.port}" for r in self.rings)
        return (f"QEC_DECODING_SERVER_READY port={self.rings[0].port} transport=udp host={self.host} "
                f"num_slots={self.num_slots} slot_size={self.slot_size} {rings}")

    def ports(self) -> dict[int, int]:
        return {r.decoder_id: r.port for r in self.rings}

    def serve(self, should_stop: Callable[[], bool], timeout_s: float | None = None) -> None:
        """Answer requests until ``should_stop()`` or ``timeout_s`` seconds (None: no limit) pass."""
        assert self._loop is not None, "start() first"
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not should_stop():
            wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if wait <= 0:
                break
            # native: polls, receives, answers; back here within wait (signals, the stop flag)
            if lib.cq_server_poll(self._loop, max(1, int(wait * 1000))) != 0:
                raise BacklineError(f"the serving loop failed: {cq_last_error()}")
            self._update()

    def _update(self) -> None:
        """Read the loop's counts; log the first message of each kind turned away."""
        for i, ring in enumerate(self.rings):
            ring.dispatched = int(lib.cq_server_dispatched(self._loop, i))
        c = ffi.new("cq_counts *")
        lib.cq_server_counts(self._loop, c)
        self.dropped, self.malformed = split_counts(c)
        for counter, texts, what in ((self.dropped, DROP_TEXT, "dropped"),
                                     (self.malformed, BAD_TEXT, "answered BAD_REQUEST")):
            for kind in counter:
                if (what, kind) not in self._logged:
                    self._logged.add((what, kind))
                    self.log(f"backline decoding-server: {texts[kind]} (further {kind} messages {what} are "
                             "counted, not logged)")
        errors = int(c.socket_errors + c.round_errors)
        if errors and not self.send_errors:
            first = ffi.string(lib.cq_server_first_error(self._loop)).decode(errors="replace")
            self.log(f"backline decoding-server: {first} (further socket and round errors are counted, not logged)")
        self.send_errors = errors

    def summary_lines(self) -> list[str]:
        """What it served: their RING lines, then the messages it turned away."""
        lines = [f"QEC_DECODING_SERVER_RING decoder={r.decoder_id} dispatched={r.dispatched}" for r in self.rings]
        lines.append(f"QEC_DECODING_SERVER_DISPATCHED count={sum(r.dispatched for r in self.rings)}")
        lines.append("QEC_DECODING_SERVER_DROPPED " + " ".join(f"{k}={self.dropped[k]}" for k in DROP_KINDS))
        lines.append("QEC_DECODING_SERVER_BAD_REQUESTS " + " ".join(f"{k}={self.malformed[k]}" for k in BAD_KINDS))
        return lines

    def close(self) -> None:
        """Close the sockets and the deployments (idempotent)."""
        self._stack.close()
