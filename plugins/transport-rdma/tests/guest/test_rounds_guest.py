"""Rounds, geometry and faults of the rdma transport over a real verbs device.

These run where libibverbs finds a device (the Soft-RoCE guest of ``guest/run-in-guest``);
elsewhere the ``rdma_device`` fixture skips them. Kept small: Python runs ~14x slower under TCG.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
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
    PlacementError,
    Session,
    TransportError,
    deploy,
)
from backline_core.testing import ServeProcess, endpoint_config, free_port

pytestmark = pytest.mark.usefixtures("rdma_device")

HOST = "127.0.0.1"
#: Soft-RoCE does its work in the guest's kernel, whose softirqs compete with the two spinning
#: threads for the guest's two emulated CPUs (on a host that may be busy); a round there can
#: stall for longer than the default 1 s. The deadline tests set their own.
SLOW = 10000


def config(port: int, **extra: object) -> str:
    return endpoint_config(HOST, port, **{"timeout_ms": SLOW, **extra})


def serving(port: int, *fns: str, **extra: object) -> ServeProcess:
    """`backline coprocessor serve --transport rdma` (steane unless `fns` say) in a child process."""
    return ServeProcess("rdma", port, *(fns or ("steane",)), host=HOST, **{"timeout_ms": SLOW, **extra})


def placement(port: int, fn: str = "steane", **init_args: object) -> Placement:
    return Placement(controller=Controller(init_args={"timeout_ms": SLOW}), transport="rdma",
                     coprocessors=[Coprocessor(name="dec", coprocessor_fn=fn, runs_in="process",
                                               endpoint=Endpoint(host=HOST, port=port), init_args=init_args)])


def test_deploy_runs_every_steane_syndrome_and_variable_echo_payloads_pipelined() -> None:
    t0 = time.perf_counter()
    with deploy(placement(free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        first = s.round(bytes([0b010]))
        print(f"placement to first round: {time.perf_counter() - t0:.2f} s")
        assert first == bytes([0x10])
        table = [0x00, 0x01, 0x10, 0x02, 0x40, 0x08, 0x20, 0x04]
        assert [s.round(bytes([i]))[0] for i in range(8)] == table
    # A small ring the coprocessor owns (the controller takes its geometry), payloads of every
    # length up to the slot, eight rounds in flight at once.
    with deploy(placement(free_port(HOST), fn="echo", slots=8, slot_bytes=128), in_bytes=96, out_bytes=96) as d:
        s = d.session()
        assert (s.geometry["slots"], s.geometry["slot_bytes"]) == (8, 128)
        for start in range(0, 97, 8):
            sent = [bytes((start + k + j) & 0xFF for j in range((start + k) % 97)) for k in range(8)]
            for payload in sent:
                s.stage_payload(payload)
                s.post()
            assert [s.collect() for _ in sent] == sent


def test_a_killed_coprocessor_fails_the_round_with_peer_error_well_within_the_deadline() -> None:
    port = free_port(HOST)
    with serving(port) as serve:
        s = Session.open("rdma", "controller", "dec", config=config(port, timeout_ms=60000), in_bytes=1,
                         out_bytes=1)
        try:
            assert s.round(b"\x01") == b"\x01"
            serve.proc.send_signal(signal.SIGKILL)
            serve.proc.wait(30)
            t0 = time.monotonic()
            with pytest.raises(PeerError) as info:
                s.round(b"\x01")
            # The connection's closing (or the QP's error), not the 60 s deadline: a deadline
            # would be a TimeoutError; the bound is loose so a loaded machine cannot fail it.
            assert time.monotonic() - t0 < 30
            assert "closed" in str(info.value) or "RDMA WRITE" in str(info.value)
        finally:
            s.destroy()


def test_a_killed_controller_lets_the_next_one_in_and_it_continues_the_sequence() -> None:
    port = free_port(HOST)
    code = ("import sys; from backline_core import Session; "
            f"s = Session.open('rdma', 'controller', 'dec', config={config(port)!r}, in_bytes=1, out_bytes=1); "
            "[s.round(b'\\x02') for _ in range(5)]; print('up', flush=True); sys.stdin.read()")
    with serving(port):
        ctl = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert ctl.stdout.readline().strip() == "up"
            # While it lives, a second controller is refused.
            with pytest.raises((KeyTakenError, TransportError)) as info:
                Session.open("rdma", "controller", "dec", config=config(port, connect_timeout_ms=3000), in_bytes=1,
                             out_bytes=1)
            assert "another controller" in str(info.value)
        finally:
            ctl.kill()
            ctl.wait(30)
        s = Session.open("rdma", "controller", "dec", config=config(port), in_bytes=1, out_bytes=1)
        try:
            assert [s.round(bytes([i]))[0] for i in (1, 2, 4)] == [0x01, 0x10, 0x40]
        finally:
            s.destroy()


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--transport", "rdma",
                               "--key", "dec", "--fn", "steane", "--config", config(port)],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port} on {HOST} is in use" in lines[0], proc.stderr


@pytest.mark.parametrize("extra, words", [
    ({"device": "mlx5_9"}, ["no RDMA device named 'mlx5_9'", "rxe0"]),
    ({"ib_port": 2}, ["no RDMA device has an active port 2", "rxe0 (port 1 ACTIVE)"]),
    ({"gid_index": 1000}, ["GID index 1000", "::ffff:127.0.0.1 (RoCE v2)"]),
])
def test_a_wrong_device_port_or_gid_lists_what_exists(extra: dict[str, object], words: list[str]) -> None:
    with pytest.raises(BacklineError) as info:
        Session.open("rdma", "controller", "dec", config=config(free_port(HOST), **extra), in_bytes=1, out_bytes=1)
    for word in words:
        assert word in str(info.value)
    with pytest.raises(PlacementError) as info:  # and resolution says so before anything starts
        from backline_core import resolve

        resolve(Placement(controller=Controller(init_args=extra), transport="rdma",
                          coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="process",
                                                    endpoint=Endpoint(host=HOST, port=free_port(HOST)))]))
    assert words[0] in str(info.value)


def test_the_ghz_demo_over_rdma_gives_the_samples_memcpy_gives() -> None:
    """Only the placement changes (``backline demo ghz --transport rdma --compare`` in CI does the same)."""
    demo = pytest.importorskip("backline_compiler.demos.ghz_steane", reason="needs backline-compiler[frontend]")
    shots = 30
    over_rdma = demo.run(demo.device("default.clifford", noise=0.01, seed=7, transport="rdma", runs_in="process",
                                     endpoint=Endpoint(host=HOST, port=free_port(HOST))), shots)
    in_thread = demo.run(demo.device("default.clifford", noise=0.01, seed=7), shots)
    assert over_rdma.samples.tolist() == in_thread.samples.tolist()
    assert over_rdma.rtt["steane-decoder"]["rounds"] == in_thread.rtt["steane-decoder"]["rounds"] > 0


def test_a_coprocessor_in_an_executor_answers_over_rdma() -> None:
    """runs_in="executor": the coprocessor's compiled code runs in an executor's process and
    listens on its endpoint there (on another host, the executor's host would be that host)."""
    orc = pytest.importorskip("backline_executor_orc", reason="needs backline-executor-orc")
    pytest.importorskip("backline_compiler", reason="an executor coprocessor is compiled by backline-compiler")
    with orc.Executor.local() as ex:
        p = Placement(controller=Controller(init_args={"timeout_ms": SLOW}), transport="rdma",
                      coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", executor=ex,
                                                endpoint=Endpoint(host=HOST, port=free_port(HOST)))])
        with deploy(p, in_bytes=1, out_bytes=1) as d:
            assert [d.session().round(bytes([i]))[0] for i in (1, 2, 7)] == [0x01, 0x10, 0x04]
