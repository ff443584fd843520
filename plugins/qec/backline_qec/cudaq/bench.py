"""The round trip of one decoded shot over the decoding server's UDP, against a bare UDP ping-pong.

A shot is one enqueue_syndromes (its measurements; the decode runs before the reply) plus one
get_corrections with reset: two request/response exchanges of one slot each. The floor is a
native echo of slot-size datagrams on loopback (the server loop's system calls alone), timed in
the same run and process, two exchanges a shot, with the same client loop, so the ratio is what
the protocol, the session and the decode on its placement add (docs/cudaq-interop.md,
"Measuring the round trip").
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import wire
from .replay import running_server


def _percentiles(ns: np.ndarray) -> dict[str, float]:
    p50, p99 = np.percentile(ns, [50, 99])
    return {"p50_us": float(p50) / 1e3, "p99_us": float(p99) / 1e3, "mean_us": float(ns.mean()) / 1e3}


def _timed_exchanges(sock: socket.socket, address: Any, requests: Sequence[Sequence[bytes]]) -> tuple[np.ndarray,
                                                                                                   list[list[bytes]]]:
    """Send each round's datagrams in turn, each answered before the next; ns per round, the replies."""
    out = np.zeros(len(requests), dtype=np.int64)
    replies: list[list[bytes]] = []
    for i, datagrams in enumerate(requests):
        got = []
        t0 = time.perf_counter_ns()
        for datagram in datagrams:
            sock.sendto(datagram, address)
            got.append(sock.recv(65536))
        out[i] = time.perf_counter_ns() - t0
        replies.append(got)
    return out, replies


@contextlib.contextmanager
def native_echo(slot_size: int) -> Iterator[tuple[str, int]]:
    """A native echo of each datagram as a slot-size reply to its source (the server loop's poll,
    recvfrom and sendto, nothing else) in a thread of this process; yields its address."""
    from ..native import lib

    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind(("127.0.0.1", 0))
    echo.setblocking(False)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set() and lib.cq_echo_poll(echo.fileno(), slot_size, 100) == 0:
            pass

    thread = threading.Thread(target=serve, name="udp-echo", daemon=True)
    thread.start()
    try:
        yield echo.getsockname()
    finally:
        stop.set()
        thread.join(5.0)
        echo.close()


def measure(configs: Sequence[Any], *, rounds: int = 2000, slot_size: int = wire.DEFAULT_SLOT_SIZE,
            decoder_id: int | None = None, placement: Any = None, seed: int = 1, p: float = 0.02,
            warmup: int = 100, blocks: int = 10) -> dict[str, Any]:
    """Time ``rounds`` shots (enqueue + get_corrections) of one decoder through an in-process server
    and as many bare exchanges with the native echo, in ``blocks`` alternating blocks (so both see
    the machine alike); the report holds both and their ratio of medians.

    Both send datagrams made before the clock starts, with the same client loop, so the ratio is
    the server's (its protocol, session and decode on the placement) against the echo's."""
    config = next((c for c in configs if c.id == decoder_id), None) if decoder_id is not None else configs[0]
    if config is None:
        raise ValueError(f"the config has no decoder {decoder_id}")
    rng = np.random.default_rng(seed)
    shots = (rng.random((rounds + warmup, config.num_measurements)) < p).astype(np.uint8)
    room = (slot_size - wire.HEADER_BYTES - wire.ENQUEUE_FIXED_BYTES) * 8
    if config.num_measurements > room:
        raise ValueError(f"decoder {config.id}'s {config.num_measurements} measurements do not fit one "
                         f"{slot_size}-byte slot ({room} bits): give a larger --slot-size")
    get = wire.encode_request(wire.GET_CORRECTIONS, wire.encode_get_corrections(config.id, config.num_observables,
                                                                               reset=True), slot_size=slot_size)
    requests = [[wire.encode_request(wire.ENQUEUE_SYNDROMES, wire.encode_enqueue(config.id, shot, counter=i),
                                     request_id=i, slot_size=slot_size), get] for i, shot in enumerate(shots)]
    bare = [[bytes(slot_size)] * 2] * len(requests)
    rtt, floor = np.zeros(0, np.int64), np.zeros(0, np.int64)
    edges = np.linspace(warmup, len(requests), blocks + 1).astype(int)
    with running_server([config], slot_size=slot_size, placement=placement) as server, \
            native_echo(slot_size) as echo, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5.0)
        target = ("127.0.0.1", server.ports()[config.id])
        _, replies = _timed_exchanges(sock, target, requests[:warmup])
        _timed_exchanges(sock, echo, bare[:warmup])
        for a, b in zip(edges[:-1], edges[1:]):
            t, got = _timed_exchanges(sock, target, requests[a:b])
            rtt, replies = np.concatenate([rtt, t]), replies + got
            floor = np.concatenate([floor, _timed_exchanges(sock, echo, bare[a:b])[0]])
    for i, got in enumerate(replies):  # every answer was an answer, not an error
        for reply in got:
            header, _ = wire.decode_response(reply, slot_size)
            if header.status != wire.Status.OK:
                raise RuntimeError(f"shot {i}: the server answered {wire.Status(header.status).name}")
    server_stats, floor_stats = _percentiles(rtt), _percentiles(floor)
    return {"decoder": config.id, "type": config.type, "rounds": rounds, "slot_size": slot_size,
            "enqueue_get_us": server_stats, "udp_ping_pong_x2_us": floor_stats,
            "ratio_p50": server_stats["p50_us"] / floor_stats["p50_us"]}


def report_text(r: dict[str, Any]) -> str:
    s, f = r["enqueue_get_us"], r["udp_ping_pong_x2_us"]
    return (f"decoder {r['decoder']} ({r['type']}), {r['rounds']} shots, {r['slot_size']}-byte slots: "
            f"enqueue+get p50 {s['p50_us']:.1f} us, p99 {s['p99_us']:.1f} us; bare UDP ping-pong x2 "
            f"p50 {f['p50_us']:.1f} us, p99 {f['p99_us']:.1f} us; ratio p50 {r['ratio_p50']:.2f}")
