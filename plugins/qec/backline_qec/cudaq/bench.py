"""The round trip of one decoded shot over the decoding server's UDP, against a bare UDP ping-pong.

A shot is one enqueue_syndromes (its measurements; the decode runs before the reply) plus one
get_corrections with reset: two request/response exchanges of one slot each. The floor is a
Python thread echoing slot-size datagrams on loopback, timed in the same run and process, two
exchanges a shot, so the ratio is what the protocol, the session and the decode on its placement
add (docs/cudaq-interop.md, "Measuring the round trip").
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import wire
from .replay import Client, running_server


def _percentiles(ns: np.ndarray) -> dict[str, float]:
    p50, p99 = np.percentile(ns, [50, 99])
    return {"p50_us": float(p50) / 1e3, "p99_us": float(p99) / 1e3, "mean_us": float(ns.mean()) / 1e3}


def udp_ping_pong(rounds: int, slot_size: int, exchanges: int = 2, timeout_s: float = 5.0) -> np.ndarray:
    """Nanoseconds for ``exchanges`` slot-size datagram round trips to an echo thread, per round."""
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind(("127.0.0.1", 0))
    echo.settimeout(0.1)  # so the thread sees the stop flag
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = echo.recvfrom(65536)
            except TimeoutError:
                continue
            echo.sendto(data, peer)

    thread = threading.Thread(target=serve, name="udp-echo", daemon=True)
    thread.start()
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.settimeout(timeout_s)
    address, payload = echo.getsockname(), bytes(slot_size)
    out = np.zeros(rounds, dtype=np.int64)
    try:
        for i in range(rounds):
            t0 = time.perf_counter_ns()
            for _ in range(exchanges):
                client.sendto(payload, address)
                client.recv(65536)
            out[i] = time.perf_counter_ns() - t0
    finally:
        stop.set()
        thread.join(5.0)
        client.close()
        echo.close()
    return out


def measure(configs: Sequence[Any], *, rounds: int = 2000, slot_size: int = wire.DEFAULT_SLOT_SIZE,
            decoder_id: int | None = None, placement: Any = None, seed: int = 1, p: float = 0.02,
            warmup: int = 100) -> dict[str, Any]:
    """Time ``rounds`` shots (enqueue + get_corrections) of one decoder through an in-process server,
    then the bare floor; the report holds both and their ratio of medians."""
    config = next((c for c in configs if c.id == decoder_id), None) if decoder_id is not None else configs[0]
    if config is None:
        raise ValueError(f"the config has no decoder {decoder_id}")
    rng = np.random.default_rng(seed)
    shots = (rng.random((rounds + warmup, config.num_measurements)) < p).astype(np.uint8)
    room = (slot_size - wire.HEADER_BYTES - wire.ENQUEUE_FIXED_BYTES) * 8
    if config.num_measurements > room:
        raise ValueError(f"decoder {config.id}'s {config.num_measurements} measurements do not fit one "
                         f"{slot_size}-byte slot ({room} bits): give a larger --slot-size")
    rtt = np.zeros(rounds, dtype=np.int64)
    with running_server([config], slot_size=slot_size, placement=placement) as server, \
            Client(server.ports(), slot_size=slot_size) as client:
        for i, shot in enumerate(shots):
            t0 = time.perf_counter_ns()
            client.enqueue(config.id, shot)
            client.get_corrections(config.id, config.num_observables, reset=True)
            if i >= warmup:
                rtt[i - warmup] = time.perf_counter_ns() - t0
    floor = udp_ping_pong(rounds + warmup, slot_size)[warmup:]
    server_stats, floor_stats = _percentiles(rtt), _percentiles(floor)
    return {"decoder": config.id, "type": config.type, "rounds": rounds, "slot_size": slot_size,
            "enqueue_get_us": server_stats, "udp_ping_pong_x2_us": floor_stats,
            "ratio_p50": server_stats["p50_us"] / floor_stats["p50_us"]}


def report_text(r: dict[str, Any]) -> str:
    s, f = r["enqueue_get_us"], r["udp_ping_pong_x2_us"]
    return (f"decoder {r['decoder']} ({r['type']}), {r['rounds']} shots, {r['slot_size']}-byte slots: "
            f"enqueue+get p50 {s['p50_us']:.1f} us, p99 {s['p99_us']:.1f} us; bare UDP ping-pong x2 "
            f"p50 {f['p50_us']:.1f} us, p99 {f['p99_us']:.1f} us; ratio p50 {r['ratio_p50']:.2f}")
