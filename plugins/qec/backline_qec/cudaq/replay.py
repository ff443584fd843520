"""CUDA-Q QEC's playback files sent through a decoding server, and a client of its UDP protocol.

The playback format is their ``--save_syndrome`` capture (docs/cudaq-interop.md, "Replay"): each
``ROUND_START`` group is one captured enqueue, a byte-aligned dump written most significant bit
first, and ``CORRECTIONS_START``..``CORRECTIONS_END`` holds one expected bit a shot (any observable
of any logical flipped). Replay does what their ``--load_syndrome`` does: per shot,
``reset_decoder`` each logical, enqueue its groups, ``get_corrections`` without reset, compare.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backline_core import BacklineError, DeadlineError, InvalidArgumentError

from . import wire
from .wire import Status

#: the largest playback file read
MAX_PLAYBACK_BYTES = 1 << 30
#: how long an in-process server may take to build its decoders and bind
SERVER_START_S = 300.0


class RpcError(BacklineError):
    """A response whose status is not OK."""

    def __init__(self, function: str, status: int) -> None:
        name = Status(status).name if status in Status._value2member_map_ else str(status)
        super().__init__(f"{function}: the server answered {name}")
        self.status = status


class Client:
    """Requests to a decoding server's UDP rings: one request in flight, each reply awaited with a
    deadline (a reply whose request_id is not the one awaited is a late one, and is skipped).
    :class:`SessionClient` sends the same requests as rounds of a Backline session instead."""

    def __init__(self, ports: dict[int, int], host: str = "127.0.0.1", *, slot_size: int = wire.DEFAULT_SLOT_SIZE,
                 timeout_s: float = 5.0) -> None:
        self.ports, self.host, self.slot_size, self.timeout_s = dict(ports), host, slot_size, timeout_s
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(timeout_s)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, decoder_id: int, function_id: int, payload: bytes, *, ptp_timestamp: int = 0
             ) -> tuple[wire.ResponseHeader, bytes]:
        """Send one request to ``decoder_id``'s ring; its (response header, result)."""
        port = self.ports.get(decoder_id)
        if port is None:
            raise InvalidArgumentError(f"decoder {decoder_id} has no ring; the server has {sorted(self.ports)}")
        request_id = next(self._ids) & 0xFFFFFFFF
        self.sock.sendto(wire.encode_request(function_id, payload, request_id=request_id, ptp_timestamp=ptp_timestamp,
                                             slot_size=self.slot_size), (self.host, port))
        while True:
            try:
                message = self.sock.recv(65536)
            except TimeoutError:
                raise DeadlineError(f"no reply from {self.host}:{port} within {self.timeout_s:g} s to "
                                    f"{wire.FUNCTION_NAMES.get(function_id, hex(function_id))}") from None
            header, result = wire.decode_response(message)
            if header.request_id == request_id:
                return header, result

    def enqueue(self, decoder_id: int, bits: np.ndarray | Sequence[int]) -> None:
        """enqueue_syndromes, split into as many requests as the slot needs."""
        a = np.asarray(bits, dtype=np.uint8).ravel()
        room = (self.slot_size - wire.HEADER_BYTES - wire.ENQUEUE_FIXED_BYTES) * 8
        for start in range(0, a.size, room):
            header, _ = self.call(decoder_id, wire.ENQUEUE_SYNDROMES, wire.encode_enqueue(decoder_id, a[start:start + room]))
            if header.status != Status.OK:
                raise RpcError("enqueue_syndromes", header.status)

    def get_corrections(self, decoder_id: int, return_size: int, reset: bool = False) -> np.ndarray:
        header, result = self.call(decoder_id, wire.GET_CORRECTIONS,
                                   wire.encode_get_corrections(decoder_id, return_size, reset))
        if header.status != Status.OK:
            raise RpcError("get_corrections", header.status)
        return wire.decode_corrections(result, return_size)

    def reset(self, decoder_id: int) -> None:
        header, _ = self.call(decoder_id, wire.RESET_DECODER, wire.encode_reset(decoder_id))
        if header.status != Status.OK:
            raise RpcError("reset_decoder", header.status)


class SessionClient(Client):
    """CUDA-Q's requests as rounds of a Backline controller session (any transport: memcpy, ucx,
    rdma) whose coprocessor runs the CUQR session function (:func:`.session.session_function`):
    a round is one request slot, its reply the response slot. The round's own deadline bounds the
    wait (the transport's); the session is the caller's to close."""

    def __init__(self, session: Any, *, slot_size: int = wire.DEFAULT_SLOT_SIZE) -> None:
        self.session, self.slot_size = session, slot_size
        self._ids = itertools.count(1)

    def close(self) -> None:
        """Nothing to close: the session belongs to the caller."""

    def call(self, decoder_id: int, function_id: int, payload: bytes, *, ptp_timestamp: int = 0
             ) -> tuple[wire.ResponseHeader, bytes]:
        """One request as one round; its (response header, result)."""
        request_id = next(self._ids) & 0xFFFFFFFF
        reply = self.session.round(wire.encode_request(function_id, payload, request_id=request_id,
                                                       ptp_timestamp=ptp_timestamp, slot_size=self.slot_size))
        header, result = wire.decode_response(reply, self.slot_size)
        if header.request_id != request_id:
            raise BacklineError(f"the reply answers request {header.request_id}, not {request_id}")
        return header, result


@contextlib.contextmanager
def running_server(configs: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
    """A :class:`~.server.DecodingServer` serving on loopback in a thread of this process (which
    deploys, serves and closes it, all in that thread); yields it once it is ready."""
    from .server import DecodingServer

    ready, stop = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            with DecodingServer(configs, **kwargs) as server:
                box["server"] = server
                ready.set()
                server.serve(stop.is_set)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="backline-decoding-server", daemon=True)
    thread.start()
    try:
        if not ready.wait(SERVER_START_S):
            raise DeadlineError(f"the decoding server was not ready within {SERVER_START_S:g} s")
        if "error" in box:
            raise box["error"]
        yield box["server"]
    finally:
        stop.set()
        thread.join(10.0)
    if "error" in box:
        raise box["error"]


# -- the playback format -------------------------------------------------------------------

@dataclass
class Playback:
    num_data: int
    num_logical: int
    shots: list[list[list[int]]] = field(default_factory=list)  #: shot -> group -> bits
    widths: list[list[int | None]] = field(default_factory=list)  #: the width a ROUND_START line gave, if any
    corrections: list[int] = field(default_factory=list)


def parse_playback(text: str, source: str = "the playback file") -> Playback:
    """Their capture format; every error names the line."""
    header: dict[str, int] = {}
    pb: Playback | None = None
    in_corrections = done = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{number}"
        parts = line.split()
        tag = parts[0]
        if done:
            raise InvalidArgumentError(f"{where}: {line!r} after CORRECTIONS_END")
        if in_corrections:
            if tag == "CORRECTIONS_END":
                in_corrections, done = False, True
            elif line in ("0", "1"):
                assert pb is not None
                pb.corrections.append(int(line))
            else:
                raise InvalidArgumentError(f"{where}: {line!r} in the corrections (0 or 1 a line)")
            continue
        if tag in ("NUM_DATA", "NUM_LOGICAL"):
            if len(parts) != 2 or not parts[1].isdigit() or pb is not None:
                raise InvalidArgumentError(f"{where}: {line!r}: give '{tag} N' once, before the first shot")
            header[tag] = int(parts[1])
        elif tag == "SHOT_START":
            if pb is None:
                if "NUM_DATA" not in header or "NUM_LOGICAL" not in header or header["NUM_LOGICAL"] < 1:
                    raise InvalidArgumentError(f"{where}: a shot before NUM_DATA and NUM_LOGICAL (at least 1)")
                pb = Playback(header["NUM_DATA"], header["NUM_LOGICAL"])
            pb.shots.append([])
            pb.widths.append([])
        elif tag == "ROUND_START":
            if pb is None or not pb.shots:
                raise InvalidArgumentError(f"{where}: ROUND_START before SHOT_START")
            width = None
            if len(parts) == 3 and parts[2].isdigit():  # their Ising demo writes the group's true width
                width = int(parts[2])
            elif len(parts) != 2:
                raise InvalidArgumentError(f"{where}: {line!r}: give 'ROUND_START R [NBITS]'")
            pb.shots[-1].append([])
            pb.widths[-1].append(width)
        elif tag == "CORRECTIONS_START":
            if pb is None:
                raise InvalidArgumentError(f"{where}: CORRECTIONS_START before any shot")
            in_corrections = True
        elif line in ("0", "1"):
            if pb is None or not pb.shots:
                raise InvalidArgumentError(f"{where}: a bit before SHOT_START")
            if not pb.shots[-1]:  # a shot without ROUND_START lines is one group
                pb.shots[-1].append([])
                pb.widths[-1].append(None)
            pb.shots[-1][-1].append(int(line))
        else:
            raise InvalidArgumentError(f"{where}: {line!r} is not part of the playback format")
    if in_corrections:
        raise InvalidArgumentError(f"{source}: CORRECTIONS_START without CORRECTIONS_END")
    if pb is None:
        raise InvalidArgumentError(f"{source}: no shots (SHOT_START)")
    if pb.corrections and len(pb.corrections) != len(pb.shots):
        raise InvalidArgumentError(f"{source}: {len(pb.shots)} shots but {len(pb.corrections)} expected corrections")
    return pb


def shot_groups(pb: Playback, shot: int, num_measurements: dict[int, int]) -> dict[int, list[np.ndarray]]:
    """Logical (decoder id) -> its groups of measurement bits in a shot: the groups split evenly
    among the logicals in order, each cut to its stated width, and the last one's byte padding
    cut so that the shot has the decoder's measurement count."""
    groups, widths = pb.shots[shot], pb.widths[shot]
    k = pb.num_logical
    if len(groups) % k:
        raise InvalidArgumentError(f"shot {shot}: {len(groups)} groups do not split among {k} logicals")
    per = len(groups) // k
    out: dict[int, list[np.ndarray]] = {}
    for logical in range(k):
        if logical not in num_measurements:
            raise InvalidArgumentError(f"the playback has {k} logicals; the config has no decoder {logical}")
        mine = [np.array(g[:w] if w is not None else g, dtype=np.uint8)
                for g, w in zip(groups[logical * per:(logical + 1) * per], widths[logical * per:(logical + 1) * per])]
        m = num_measurements[logical]
        excess = sum(g.size for g in mine) - m
        if 0 < excess < 8 and mine and mine[-1].size > excess:
            mine[-1] = mine[-1][:-excess]  # the capture's byte padding of the last group
            excess = 0
        if excess:
            raise InvalidArgumentError(f"shot {shot}, logical {logical}: {m + excess} measurement bits; decoder "
                                       f"{logical} takes {m} a shot (give each group's width as "
                                       "'ROUND_START R NBITS')")
        out[logical] = mine
    return out


@dataclass
class ReplayResult:
    shots: int
    matched: int = 0
    mismatched: int = 0
    failed: int = 0  #: shots whose get_corrections was not OK
    expected: bool = True  #: whether the file held expected corrections
    first: list[str] = field(default_factory=list)  #: the first few mismatches, described

    def summary(self, source: str) -> str:
        if not self.expected:
            return f"replay {source}: {self.shots} shots sent; the file holds no expected corrections"
        text = (f"replay {source}: {self.shots} shots, {self.matched} matched, {self.mismatched} mismatched"
                f"{f' ({self.failed} failed)' if self.failed else ''}")
        return text + (f"; {'; '.join(self.first)}" if self.first else "")


def replay(pb: Playback, configs: Sequence[Any], client: Client, *, show: int = 5) -> ReplayResult:
    """Send every shot through ``client`` and compare with the expected corrections."""
    by_id = {c.id: c for c in configs}
    counts = {i: c.num_measurements for i, c in by_id.items()}
    result = ReplayResult(shots=len(pb.shots), expected=bool(pb.corrections))
    for shot in range(len(pb.shots)):
        groups = shot_groups(pb, shot, counts)
        flipped, status = 0, None
        for logical, mine in groups.items():
            client.reset(logical)
            for g in mine:
                client.enqueue(logical, g)
        for logical in groups:
            try:
                flipped |= int(client.get_corrections(logical, by_id[logical].num_observables).any())
            except RpcError as exc:
                status = exc
        if not pb.corrections:
            continue
        expected = pb.corrections[shot]
        if status is None and flipped == expected:
            result.matched += 1
            continue
        result.mismatched += 1
        result.failed += status is not None
        if len(result.first) < show:
            result.first.append(f"shot {shot}: {status}" if status is not None
                                else f"shot {shot}: replayed {flipped}, expected {expected}")
    return result


def write_playback(path: str, num_data: int, shots: Sequence[Sequence[Sequence[int]]],
                   corrections: Sequence[int] | None = None, num_logical: int = 1) -> None:
    """Write shots (shot -> groups -> bits) in the playback format, each group padded to whole
    bytes as their capture pads it."""
    with open(path, "w") as fh:
        fh.write(f"NUM_DATA {num_data}\nNUM_LOGICAL {num_logical}\n")
        count = 0
        for s, groups in enumerate(shots):
            fh.write(f"SHOT_START {s}\n")
            for g in groups:
                bits = list(g) + [0] * (-len(g) % 8)
                fh.write(f"ROUND_START {count}\n" + "".join(f"{int(b)}\n" for b in bits))
                count += 1
        if corrections is not None:
            fh.write("CORRECTIONS_START\n" + "".join(f"{int(c)}\n" for c in corrections) + "CORRECTIONS_END\n")
