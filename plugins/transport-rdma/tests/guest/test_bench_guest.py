"""The bench's bare RDMA floor and `backline bench --transport rdma` over a real verbs device.

They run where libibverbs finds a device (the Soft-RoCE guest of ``guest/run-in-guest``);
elsewhere the ``rdma_device`` fixture skips them. Under TCG Python runs ~14x slower and
the scheduler makes the tails long: the checks are on what must hold (no round lost, every
byte checked, nothing left running), not on latencies. A killed or stopped responder is the
conformance suite's (test_conformance.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from backline_transport_rdma import floor

from backline_core.sdk import ChildProcess
from backline_core.testing import ServeProcess, free_port, gone, test_secret

pytestmark = pytest.mark.usefixtures("rdma_device")

HOST = "127.0.0.1"
BENCH_TIMEOUT_S = 900


def cpus() -> tuple[int | None, int | None]:
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) >= 2 else (None, None)


def leftovers(*needles: bytes) -> list[str]:
    """Processes whose command line holds one of ``needles`` (other than this one)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if any(n in cmd for n in needles):
            shown = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid}: {shown}")
    return found


def test_floor_runs_2000_rounds_with_every_byte_checked() -> None:
    controller, coprocessor = cpus()
    out = np.zeros(2000, dtype=np.uint64)
    with floor.Floor(HOST, 40, cpu=coprocessor, controller_cpu=controller) as f:
        pid = f.pid
        assert "RoCE v2" in f.description and f.label == "floor (bare RDMA WRITE ping-pong)"
        for block in range(4):  # paused between blocks, as the bench does
            f.resume()
            f.run(1 + 500 * block, out[500 * block:500 * (block + 1)])  # raises on a lost or differing reply
            f.pause()
        f.resume()
        print(f"floor: median {np.median(out) / 1e3:.1f} us, P99 {np.percentile(out, 99) / 1e3:.1f} us")
    assert (out > 0).all()
    assert gone(pid), "the responder outlived its Floor"


def test_a_framework_coprocessor_on_the_port_is_refused_clearly() -> None:
    port = free_port(HOST)
    with ServeProcess("rdma", port, "steane", host=HOST):
        ffi, lib = floor.native()
        err = ffi.new("char[]", lib.BL_RDMA_FLOOR_ERROR_BYTES)
        out = ffi.new("bl_rdma_floor **")
        rc = lib.bl_rdma_floor_open(HOST.encode(), port, b"", 0, -1, 8, 1000, out, err, len(err))
        text = ffi.string(err).decode()
        assert rc < 0 and out[0] == ffi.NULL
        assert "floor" in text and "Backline rdma coprocessor" in text, text


def test_the_responder_refuses_a_framework_controller_and_keeps_waiting() -> None:
    # A framework controller's HELLO ("BLRD") on the floor's port is dropped; the right initiator still gets in.
    proc = ChildProcess([sys.executable, "-P", "-m", "backline_transport_rdma.floor", "serve", "--host", HOST, "--port", "0"],
                        name="the floor responder", ready=r"^ready port=(\d+)")
    try:
        port = int(proc.wait_ready(60).group(1))
        with socket.create_connection((HOST, port)) as s:
            s.sendall(b"BLRD\x00\x01\x00\x01\x00\x00\x00\x48" + bytes(72))
            try:
                assert s.recv(1) == b""  # dropped (closed with the HELLO's body unread: perhaps a reset)
            except ConnectionResetError:
                pass
        ffi, lib = floor.native()
        err = ffi.new("char[]", lib.BL_RDMA_FLOOR_ERROR_BYTES)
        out = ffi.new("bl_rdma_floor **")
        assert lib.bl_rdma_floor_open(HOST.encode(), port, b"", 0, -1, 8, 1000, out, err, len(err)) == 0, \
            ffi.string(err)
        rtt = np.zeros(10, dtype=np.uint64)
        res = ffi.new("bl_bench_result *")
        assert lib.bl_rdma_floor_rounds(out[0], 0, 10, ffi.from_buffer("uint64_t[]", rtt), res) == 0
        assert (res.done, res.lost, res.mismatched) == (10, 0, 0)
        lib.bl_rdma_floor_close(out[0])
        assert proc.wait(30) == 0  # its initiator disconnected: it is done
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("extra", [["--coprocessor-fn", "echo"],
                                   ["--coprocessor-fn", "steane", "--payload-bytes", "1"]], ids=["echo", "steane"])
def test_bench_rdma_prints_framework_floor_and_perftest(extra, tmp_path) -> None:
    out_json = tmp_path / "bench.json"
    controller, coprocessor = cpus()
    cpu_args = ["--controller-cpu", str(controller), "--coprocessor-cpu", str(coprocessor)] if controller is not None \
        else ["--controller-cpu", "none", "--coprocessor-cpu", "none"]
    result = subprocess.run([sys.executable, "-m", "backline_core", "bench", "--transport", "rdma", "--rounds",
                             "20000", "--block", "5000", "--no-progress", "--json", str(out_json), *cpu_args, *extra],
                            capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, cwd=str(tmp_path))
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    for needle in ("rdma/process (native driver)", "floor (bare RDMA WRITE ping-pong)",
                   "perftest ib_write_lat (2 x one-way)", "framework/floor: median", "floor/perftest: median",
                   "perftest ran after the last block", "lost: 0  mismatched replies: 0"):
        assert needle in text, f"{needle!r} missing from:\n{text}"
    data = json.loads(out_json.read_text())
    assert data["floor_name"] == "floor (bare RDMA WRITE ping-pong)"
    assert data["steady"]["rounds"] == 19999 and data["floor"]["rounds"] == 19999
    ref = data["reference"]
    assert ref["rounds"] == 20000  # min(--rounds, 100000)
    assert all(ref[k] > 0 for k in ("median_ns", "p99_ns", "p999_ns"))
    assert data["lost"] == 0 and data["mismatched"] == 0
    left = leftovers(b"backline_transport_rdma.floor", b"ib_write_lat", b"coprocessor\0serve")
    assert not left, f"left running: {left}"


def test_bench_against_a_bench_peer_runs_with_nothing_started_here(tmp_path) -> None:
    # The two-host mode on one host: the peer serves the coprocessor and the floor's responder,
    # the bench starts neither. (test_two_guests.py runs it across two guests.)
    port = free_port(HOST)
    peer = ChildProcess([sys.executable, "-m", "backline_core", "rdma", "bench-peer", "--host", HOST,
                         "--port", str(port), "--fn", "steane", "--cpu", "none", "--floor-cpu", "none",
                         "--duration", str(BENCH_TIMEOUT_S), "--secret-file", test_secret()], name="rdma bench-peer", ready=r"^ready .*")
    try:
        ready = peer.wait_ready(120).group(0)
        assert ready.startswith(f"ready peer={HOST}:{port} coprocessor=steane"), (ready, peer.output_tail())
        result = subprocess.run([sys.executable, "-m", "backline_core", "bench", "--transport", "rdma",
                                 "--peer", f"{HOST}:{port}", "--coprocessor-fn", "steane", "--payload-bytes", "1",
                                 "--rounds", "2000", "--block", "1000", "--no-progress", "--controller-cpu", "none",
                                 "--transport-arg", f"secret_file={test_secret()}"],  # the peer's secret
                                capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, cwd=str(tmp_path))
        print(result.stdout)
        assert result.returncode == 0, result.stdout + result.stderr
        for needle in (f"cpus=None->peer {HOST}:{port}", "rdma/process (native driver)",
                       "floor (bare RDMA WRITE ping-pong)", "framework/floor: median",
                       "perftest not run: its server would have to run on the peer's host",
                       "lost: 0  mismatched replies: 0"):
            assert needle in result.stdout, f"{needle!r} missing from:\n{result.stdout}"
        assert peer.wait(60) == 0, peer.output_tail()  # the bench closed its floor: the peer's run is over
    finally:
        peer.terminate()
    left = leftovers(b"backline_transport_rdma.floor", b"coprocessor\0serve")
    assert not left, f"left running: {left}"
