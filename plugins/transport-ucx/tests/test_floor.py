"""The ucx bench floor: real UCX active messages between this process and a responder child,
over shared memory and TCP on this host; its faults, its bad input, ucx_perftest beside it,
and `backline bench --transport ucx` end to end. Nothing is mocked."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from backline_transport_ucx import floor

from backline_core import BacklineError
from backline_core.sdk import BenchConfig, ChildProcess
from backline_core.testing import children_running, gone, one_line

HOST = "127.0.0.1"
TIMEOUT_S = 120


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "backline_transport_ucx.floor", "serve", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def backline(*args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_floor_runs_rounds_with_every_byte_checked(tls: str) -> None:
    out = np.zeros(2000, dtype=np.uint64)
    with floor.Floor(HOST, 40, tls=tls, timeout_ms=5000) as f:
        pid = f.pid
        assert f.description.startswith(f"tls={tls}, UCX transports "), f.description
        assert ("posix" in f.description or "sysv" in f.description) if tls == "shm" else "tcp" in f.description
        for block in range(4):  # paused between blocks, as the bench does
            f.resume()
            f.run(1 + 500 * block, out[500 * block:500 * (block + 1)])  # raises on a lost or differing reply
            f.pause()
        f.resume()
    assert (out > 0).all()
    assert gone(pid), "the responder outlived its Floor"


def test_random_delayed_cadence_spaces_the_rounds() -> None:
    out = np.zeros(200, dtype=np.uint64)
    with floor.Floor(HOST, 8, tls="shm", cadence="random-delayed", gap_ns=20_000, gap_span=0xFFF, seed=5) as f:
        t0 = time.monotonic()
        f.run(1, out)
        assert time.monotonic() - t0 >= 200 * 20e-6
    assert (out > 0).all()


@pytest.mark.parametrize("args,fragment", [
    (["--port", "70000"], "port 70000: give 1 to 65535"),
    (["--port", "0", "--timeout-ms", "0"], "timeout_ms 0"),
    (["--port", "0", "--cpu", "100000"], "cpu 100000"),
    (["--port", "0", "--tls", "rdma"], "tls=rdma: choose shm"),
], ids=["port-high", "timeout-0", "cpu", "tls"])
def test_responder_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    result = serve("--host", HOST, *args)
    assert result.returncode == 2, result
    assert "ready" not in result.stdout
    line = one_line(result.stderr)
    assert line.startswith("backline-transport-ucx floor: error: ") and fragment in line, line


def test_initiator_checks_its_arguments() -> None:
    ffi, lib = floor.native()
    err = ffi.new("char[]", lib.BL_UCX_FLOOR_ERROR_BYTES)
    out = ffi.new("bl_ucx_floor **")
    cases = [((b"127.0.0.1", 1, b"shm", 0, 1000), "payload_bytes 0"),
             ((b"127.0.0.1", 1, b"shm", lib.BL_UCX_FLOOR_MAX_PAYLOAD_BYTES + 1, 1000), "1 to 1048576"),
             ((b"127.0.0.1", 0, b"shm", 8, 1000), "port 0"),
             ((b"", 1, b"shm", 8, 1000), "needs a host"),
             ((b"127.0.0.1", 1, b"ib", 8, 1000), "tls=ib"),
             ((b"127.0.0.1", 1, b"shm", 8, 0), "timeout_ms 0")]
    for args, fragment in cases:
        rc = lib.bl_ucx_floor_open(*args, out, err, len(err))
        assert rc < 0 and out[0] == ffi.NULL
        assert fragment in ffi.string(err).decode(), (args, ffi.string(err))
    res = ffi.new("bl_bench_result *")
    assert lib.bl_ucx_floor_rounds(ffi.NULL, 0, 1, ffi.NULL, res) == -1 and res.first_error == -1


def test_the_tls_table_is_the_backends() -> None:
    assert floor.ucx_tls("shm") == "posix,sysv,self" and floor.ucx_tls("tcp") == "tcp,self"
    assert floor.ucx_tls("auto") == "" and floor.ucx_tls("verbs") is None
    _, lib = floor.native()
    assert lib.BL_UCX_FLOOR_MAGIC == int.from_bytes(b"BLUF", "big")


def test_a_framework_coprocessor_on_the_port_is_refused_clearly() -> None:
    from backline_core.testing import ServeProcess, free_port

    port = free_port(HOST)
    with ServeProcess("ucx", port, "steane", host=HOST, tls="shm"):
        ffi, lib = floor.native()
        err = ffi.new("char[]", lib.BL_UCX_FLOOR_ERROR_BYTES)
        out = ffi.new("bl_ucx_floor **")
        rc = lib.bl_ucx_floor_open(HOST.encode(), port, b"shm", 8, 1000, out, err, len(err))
        text = ffi.string(err).decode()
        assert rc < 0 and out[0] == ffi.NULL
        assert "is a floor responder listening there? a Backline ucx coprocessor" in text, text


def test_the_responder_refuses_a_framework_controller_and_keeps_waiting() -> None:
    # A framework controller's HELLO ("BLUX") on the floor's port is dropped; the right initiator still gets in.
    proc = ChildProcess([sys.executable, "-P", "-m", "backline_transport_ucx.floor", "serve", "--host", HOST, "--port", "0", "--tls", "shm"],
                        name="the floor responder", ready=r"^ready port=(\d+)")
    try:
        port = int(proc.wait_ready(60).group(1))
        with socket.create_connection((HOST, port)) as s:
            s.sendall(b"BLUX\x00\x01\x00\x01\x00\x00\x00\x48" + bytes(72))
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        ffi, lib = floor.native()
        err = ffi.new("char[]", lib.BL_UCX_FLOOR_ERROR_BYTES)
        out = ffi.new("bl_ucx_floor **")
        assert lib.bl_ucx_floor_open(HOST.encode(), port, b"shm", 8, 1000, out, err, len(err)) == 0, ffi.string(err)
        rtt = np.zeros(10, dtype=np.uint64)
        res = ffi.new("bl_bench_result *")
        assert lib.bl_ucx_floor_rounds(out[0], 0, 10, ffi.from_buffer("uint64_t[]", rtt), res) == 0
        assert (res.done, res.lost, res.mismatched) == (10, 0, 0)
        lib.bl_ucx_floor_close(out[0])
        assert proc.wait(30) == 0  # its initiator disconnected: it is done
    finally:
        proc.terminate()


def test_a_responder_nobody_connects_to_gives_up_at_its_wait() -> None:
    result = serve("--host", HOST, "--port", "0", "--wait-ms", "300")
    assert result.returncode == 1, result
    assert "no floor initiator connected" in one_line(result.stderr)


def test_bench_floor_takes_the_coprocessors_settings() -> None:
    cfg = BenchConfig(transport="ucx", rounds=50_000, payload_bytes=32, controller_cpu=0)
    f = floor.bench_floor(cfg, {"tls": "tcp", "cpu": 1, "timeout_ms": 250})
    assert (f.tls, f.cpu, f.controller_cpu, f.timeout_ms, f.payload_bytes, f.reference_rounds) == \
        ("tcp", 1, 0, 250, 32, 50_000)
    assert f.reference() is None and "not started" in (f.reference_note or "")
    with pytest.raises(BacklineError, match="tls='ib'"):
        with floor.bench_floor(cfg, {"tls": "ib"}):
            pass


PERFTEST_CSV = """\
iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
20000,0.165,0.172,0.172,44.34,44.34,5811499,5811499
"""


def test_parse_perftest_csv() -> None:
    row = floor.parse_perftest_csv(PERFTEST_CSV)
    assert row is not None and row["50.0_percentile_lat"] == 0.165 and row["iterations"] == 20000
    assert floor.parse_perftest_csv("[1733] ucx_perftest: connect failed") is None


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_bench_reports_framework_floor_and_ucx_perftest(tls: str, tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = backline("bench", "--transport", "ucx", "--transport-arg", f"tls={tls}", "--coprocessor-fn", "steane",
                      "--payload-bytes", "1", "--rounds", "3000", "--no-progress", "--json", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "framework/floor" in result.stdout and floor.LABEL in result.stdout, result.stdout
    data = json.loads(out.read_text())
    assert data["lost"] == 0 and data["mismatched"] == 0, data
    assert data["floor_name"] == floor.LABEL
    assert data["ratio"]["median"] > 0 and data["ratio"]["p99"] > 0
    if data.get("reference") is not None:
        assert data["reference"]["name"] == floor.REFERENCE_LABEL and data["reference"]["p99_ns"] > 0
    else:  # ucx_perftest is part of install.sh; without it the report says so
        assert "ucx_perftest" in data["reference_note"]


def test_no_responder_is_left_behind() -> None:
    left = children_running(b"backline_transport_ucx.floor", b"ucx_perftest")
    assert not left, f"floor responders or ucx_perftest left running: {left}"
