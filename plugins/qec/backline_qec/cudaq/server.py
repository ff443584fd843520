"""A CUDA-Q QEC decoding server whose decoders run on Backline placements (``backline decoding-server``).

It speaks their UDP transport: one socket ("ring") per decoder, one datagram per request, the
response a whole slot sent back to the request's source. Each decoder is deployed on its own
placement (default memcpy, a thread) and each completed shot is one ``session.round``. The sessions'
semantics are :mod:`.session`'s; docs/cudaq-interop.md, "backline decoding-server".
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import selectors
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from backline_core import BacklineError, Controller, Coprocessor, InvalidArgumentError, Placement, deploy

from . import wire
from .config import MAX_DECODERS
from .session import DecodingSession, Dispatcher

#: the coprocessor's name in the placement the server makes, followed by the decoder id (a process
#: registers each coprocessor's session under its name, so every decoder needs its own)
COPROCESSOR = "decoder"
LOOPBACK = "127.0.0.1"
#: how often the serving loop looks at its stop flag and deadline
POLL_S = 0.1
#: the most datagrams read from one socket before the others get a turn
BURST = 64


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


def decoder_placement(config: Any, placement: Placement | None = None) -> Placement:
    """The placement one decoder runs on: ``placement``'s single coprocessor with the decoder's
    function, or memcpy with the coprocessor in a thread; the coprocessor's name ends in the id."""
    function = config.build()
    if placement is None:
        return Placement(controller=Controller(), transport="memcpy", coprocessors=[
            Coprocessor(name=f"{COPROCESSOR}{config.id}", coprocessor_fn=function, runs_in="thread")])
    if len(placement.coprocessors) != 1:
        raise InvalidArgumentError(f"the placement has {len(placement.coprocessors)} coprocessors; each decoder "
                                   "runs on one")
    node = placement.coprocessors[0]
    return dataclasses.replace(placement, coprocessors=[
        dataclasses.replace(node, name=f"{node.name}{config.id}", coprocessor_fn=function)])


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
        if not smallest <= slot_size <= 65507:
            raise InvalidArgumentError(f"--slot-size {slot_size} is not in {smallest}..65507 (a UDP datagram)")
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
        self.dispatcher: Dispatcher | None = None
        self.send_errors = 0
        self._stack = contextlib.ExitStack()
        self._selector: selectors.BaseSelector | None = None

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
        sessions: dict[int, DecodingSession] = {}
        for c in self.configs:
            d = self._stack.enter_context(deploy(decoder_placement(c, self.placement),
                                                 in_bytes=max(1, wire.packed_bytes(c.syndrome_size)),
                                                 out_bytes=max(1, wire.packed_bytes(c.num_observables))))
            coprocessor = d.session()
            sessions[c.id] = DecodingSession.from_config(c, coprocessor.round)
        self.dispatcher = Dispatcher(sessions, self.slot_size, log=self.log)
        self._selector = self._stack.enter_context(selectors.DefaultSelector())
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
            ring = Ring(c.id, sock, sock.getsockname()[1])
            self._selector.register(sock, selectors.EVENT_READ, ring)
            self.rings.append(ring)

    def ready_line(self) -> str:
        rings = " ".join(f"ring{r.decoder_id}={r.port}" for r in self.rings)
        return (f"QEC_DECODING_SERVER_READY port={self.rings[0].port} transport=udp host={self.host} "
                f"num_slots={self.num_slots} slot_size={self.slot_size} {rings}")

    def ports(self) -> dict[int, int]:
        return {r.decoder_id: r.port for r in self.rings}

    def serve(self, should_stop: Callable[[], bool], timeout_s: float | None = None) -> None:
        """Answer requests until ``should_stop()`` or ``timeout_s`` seconds (None: no limit) pass."""
        assert self._selector is not None and self.dispatcher is not None, "start() first"
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not should_stop():
            wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if wait <= 0:
                break
            for key, _ in self._selector.select(wait):
                self._drain(key.data)

    def _drain(self, ring: Ring) -> None:
        assert self.dispatcher is not None
        for _ in range(BURST):
            try:
                # 64 KiB: any datagram whole, so one longer than a slot is seen as such and dropped
                message, peer = ring.sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ICMP port unreachable reported for an earlier reply
                self._send_error(f"receive on decoder {ring.decoder_id}'s socket: {exc.strerror or exc}")
                continue
            response = self.dispatcher.handle(message)
            if response is None:
                continue
            ring.dispatched += 1
            try:
                ring.sock.sendto(response, peer)
            except OSError as exc:
                self._send_error(f"reply to {peer}: {exc.strerror or exc}")

    def _send_error(self, message: str) -> None:
        self.send_errors += 1
        if self.send_errors == 1:
            self.log(f"backline decoding-server: {message} (further socket errors are counted, not logged)")

    def summary_lines(self) -> list[str]:
        """What it served: their RING lines, then the messages it turned away."""
        lines = [f"QEC_DECODING_SERVER_RING decoder={r.decoder_id} dispatched={r.dispatched}" for r in self.rings]
        lines.append(f"QEC_DECODING_SERVER_DISPATCHED count={sum(r.dispatched for r in self.rings)}")
        d = self.dispatcher
        dropped: Counter[str] = d.dropped if d else Counter()
        malformed: Counter[str] = d.malformed if d else Counter()
        lines.append("QEC_DECODING_SERVER_DROPPED " + " ".join(
            f"{k}={dropped[k]}" for k in ("truncated", "oversized", "magic", "function")))
        lines.append("QEC_DECODING_SERVER_BAD_REQUESTS " + " ".join(
            f"{k}={malformed[k]}" for k in ("truncated", "oversized", "invalid")))
        return lines

    def close(self) -> None:
        """Close the sockets and the deployments (idempotent)."""
        self._stack.close()
        self._selector = None
