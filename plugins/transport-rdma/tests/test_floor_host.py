"""The rdma bench floor where there is no verbs device (this host): bad input and a missing
device are one clear line, and nothing is left running. The floor's rounds themselves are
in guest/test_bench_guest.py (they need a device)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from backline_transport_rdma import floor

from backline_core import BacklineError, NotFoundError
from backline_core.sdk import BenchConfig, BenchResult, Series, format_report
from backline_core.testing import children_running, one_line, test_secret

TIMEOUT_S = 60


def _no_device() -> bool:
    try:
        floor.check_device()
    except floor.NativeError as exc:
        return "no RDMA device:" in exc.text
    return False


pytestmark = pytest.mark.skipif(not _no_device(), reason="this machine has a verbs device: these check its absence")


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "backline_transport_rdma.floor", "serve", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def backline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_bench_floor_without_a_device_is_one_line_and_starts_nothing() -> None:
    cfg = BenchConfig(transport="rdma", rounds=100, payload_bytes=8)
    f = floor.bench_floor(cfg, {"cpu": 1})
    with pytest.raises(NotFoundError) as info:
        with f:
            pass
    text = str(info.value)
    assert "\n" not in text and "no RDMA device" in text and "backline rdma devices" in text, text
    assert f.responder is None and f.pid is None  # the device is checked before the responder starts


def test_a_named_device_that_is_not_there_is_named() -> None:
    cfg = BenchConfig(transport="rdma", rounds=100, payload_bytes=8)
    with pytest.raises(NotFoundError, match="'mlx5_7'.*no RDMA device"):
        with floor.bench_floor(cfg, {"device": "mlx5_7"}):
            pass


def test_bench_floor_refuses_init_args_that_are_not_numbers() -> None:
    cfg = BenchConfig(transport="rdma", rounds=100)
    with pytest.raises(BacklineError, match="ib_port='one'"):
        floor.bench_floor(cfg, {"ib_port": "one"})


def test_bench_floor_takes_the_coprocessors_settings() -> None:
    cfg = BenchConfig(transport="rdma", rounds=250_000, payload_bytes=32, host="::1", controller_cpu=0,
                      cadence="random-delayed", gap_ns=500, gap_span=0xFF, seed=7)
    f = floor.bench_floor(cfg, {"device": "rxe0", "ib_port": "1", "gid_index": 3, "cpu": 1, "timeout_ms": 250,
                                "idle_spin_us": 200})
    assert (f.host, f.payload_bytes, f.device, f.ib_port, f.gid_index, f.cpu, f.controller_cpu, f.timeout_ms) == \
        ("::1", 32, "rxe0", 1, 3, 1, 0, 250)
    assert (f.cadence, f.gap_ns, f.gap_span, f.seed, f.reference_rounds) == ("random-delayed", 500, 0xFF, 7, 250_000)
    assert f.label == "floor (bare RDMA WRITE ping-pong)"
    assert f.reference() is None and "not started" in (f.reference_note or "")


def test_responder_without_a_device_exits_2_with_one_line_and_no_ready() -> None:
    result = serve("--host", "127.0.0.1", "--port", "0")
    assert result.returncode == 2, result
    assert "ready" not in result.stdout
    line = one_line(result.stderr)
    assert line.startswith("backline-transport-rdma floor: error: no RDMA device") and "[status -14]" in line


@pytest.mark.parametrize("args,fragment", [
    (["--port", "70000"], "port 70000: give 1 to 65535"),
    (["--port", "-1"], "port -1"),
    (["--port", "0", "--timeout-ms", "0"], "timeout_ms 0"),
    (["--port", "0", "--cpu", "100000"], "cpu 100000"),
    (["--port", "0", "--ib-port", "300"], "ib_port 300"),
    (["--port", "0", "--gid-index", "-5"], "gid_index -5"),
    (["--port", "0", "--device", "x" * 80], "at most 63 characters"),
], ids=["port-high", "port-negative", "timeout-0", "cpu", "ib-port", "gid-index", "device-name"])
def test_responder_bad_input_is_one_line_before_the_device(args, fragment) -> None:
    result = serve("--host", "127.0.0.1", *args)
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert fragment in line and "no RDMA device" not in line, line


def test_responder_host_missing_is_a_usage_error() -> None:
    result = serve("--port", "0")
    assert result.returncode == 2 and "--host" in result.stderr


def test_initiator_checks_its_arguments_before_the_device() -> None:
    ffi, lib = floor.native()
    err = ffi.new("char[]", lib.BL_RDMA_FLOOR_ERROR_BYTES)
    out = ffi.new("bl_rdma_floor **")
    cases = [((b"127.0.0.1", 1, b"", 0, -1, 0, 1000), "payload_bytes 0"),
             ((b"127.0.0.1", 1, b"", 0, -1, lib.BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES + 1, 1000), "1 to 1048576"),
             ((b"127.0.0.1", 0, b"", 0, -1, 8, 1000), "port 0"),
             ((b"", 1, b"", 0, -1, 8, 1000), "needs a host"),
             ((b"127.0.0.1", 1, b"", 0, -1, 8, 0), "timeout_ms 0")]
    for args, fragment in cases:
        rc = lib.bl_rdma_floor_open(*args, out, err, len(err))
        assert rc < 0 and out[0] == ffi.NULL
        assert fragment in ffi.string(err).decode(), (args, ffi.string(err))
    rc = lib.bl_rdma_floor_open(b"127.0.0.1", 1, b"", 0, -1, 8, 1000, out, err, len(err))
    assert rc == -14 and b"no RDMA device" in ffi.string(err)
    res = ffi.new("bl_bench_result *")
    assert lib.bl_rdma_floor_rounds(ffi.NULL, 0, 1, ffi.NULL, res) == -1 and res.first_error == -1


def test_the_cdef_comes_from_the_headers() -> None:
    _, lib = floor.native()
    assert lib.BL_RDMA_FLOOR_MAGIC == int.from_bytes(b"BLFL", "big")
    assert lib.BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES == 1 << 20


def test_bench_on_rdma_without_a_device_exits_2_with_one_line() -> None:
    result = backline("bench", "--transport", "rdma", "--rounds", "100", "--no-progress")
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert line.startswith("backline: error: ") and "no RDMA device" in line
    assert "`backline rdma devices` lists them" in line


def test_bench_host_that_is_not_here_is_one_line() -> None:
    result = backline("bench", "--transport", "rdma", "--rounds", "100", "--no-progress", "--host", "192.0.2.1")
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert "--host 192.0.2.1: cannot listen there" in line, line
    result = backline("bench", "--rounds", "100", "--no-progress", "--host", " ")
    assert result.returncode == 2 and "--host ' '" in one_line(result.stderr)


# perftest's own output (ib_write_lat, perftest 4.5, Soft-RoCE in the guest), for the parser
WRITE_LAT_OUTPUT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : rxe0
 GID index       : 1
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n\
 8       2000          20.28          42485.97      48.27    \t       502.20      \t1989.88\t\t8035.25 \t\t38416.98
---------------------------------------------------------------------------------------
"""


def test_perftest_table_is_parsed_by_its_column_names() -> None:
    row = floor.parse_write_lat(WRITE_LAT_OUTPUT)
    assert row == ({"#bytes": 8.0, "#iterations": 2000.0, "t_min": 20.28, "t_max": 42485.97, "t_typical": 48.27,
                    "t_avg": 502.20, "t_stdev": 1989.88, "p99": 8035.25, "p99.9": 38416.98}, "usec")
    cycles = WRITE_LAT_OUTPUT.replace("[usec]", "[cycles]")
    assert floor.parse_write_lat(cycles)[1] == "cycles"
    assert floor.parse_write_lat("Couldn't connect to 127.0.0.1:18515") is None


def test_report_prints_the_floor_label_and_the_reference_row() -> None:
    rtt = np.arange(1000, 2000, dtype=np.uint64)
    cfg = BenchConfig(transport="rdma", rounds=1001)
    cfg.runs_in = "process"
    reference = {"name": floor.REFERENCE_LABEL, "command": "ib_write_lat ...", "rounds": 1000,
                 "median_ns": 1000.0, "p99_ns": 2000.0, "p999_ns": 3000.0}
    result = BenchResult(config=cfg, round0_ns=5, framework=Series("rdma/process (native driver)", rtt * 2),
                         floor=Series(floor.LABEL, rtt), reference=reference, reference_note="perftest ran after")
    text = format_report(result)
    ref_line = next(line for line in text.splitlines() if floor.REFERENCE_LABEL in line)
    assert ref_line.split()[-7:] == ["-", "1.000", "2.000", "3.000", "-", "-", "-"], ref_line
    assert floor.LABEL in text and "framework/floor: median 2.000x" in text
    assert "floor/perftest: median 1.500x" in text and "perftest ran after" in text
    data = result.to_json()
    assert data["floor_name"] == floor.LABEL and data["reference"]["p999_ns"] == 3000.0
    # The shared-memory floor's report and JSON are as they were.
    plain = BenchResult(config=cfg, round0_ns=5, framework=Series("x", rtt), floor=Series(
        "floor (bare shared-memory ping-pong)", rtt))
    assert not {"floor_name", "reference", "floor_to_reference", "reference_note"} & set(plain.to_json())
    assert "perftest" not in format_report(plain)


def test_pause_and_resume_a_real_process() -> None:
    from backline_core.sdk import pause, proc_state, resume

    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        pause(proc.pid)
        assert proc_state(proc.pid) in ("T", "t")
        resume(proc.pid)
        assert proc_state(proc.pid) not in ("T", "t")
    finally:
        proc.kill()
        proc.wait(TIMEOUT_S)
    pause(proc.pid)  # gone: nothing to do
    resume(proc.pid)


def test_no_responder_is_left_behind() -> None:
    left = children_running(b"backline_transport_rdma.floor")
    assert not left, f"floor responders left running: {left}"


# -- the bench against a peer on another host (--peer, `backline rdma bench-peer`) -----------------

def test_bench_floor_with_a_peer_connects_to_the_port_after_the_peers_and_starts_nothing() -> None:
    cfg = BenchConfig(transport="rdma", rounds=100, payload_bytes=8, peer="10.99.0.2:18515")
    f = floor.bench_floor(cfg, {"cpu": 1})
    assert (f.host, f.peer) == ("10.99.0.2", ("10.99.0.2", 18515 + floor.FLOOR_PORT_OFFSET))
    f.pause()  # the peer's responder runs on a CPU of its own: nothing to stop here
    f.resume()
    assert f.pid is None


@pytest.mark.parametrize("peer", ["10.99.0.2", "10.99.0.2:", ":18515", "host:0", "host:65536", "host:port"])
def test_a_peer_that_is_not_host_and_port_is_one_line(peer: str) -> None:
    result = backline("bench", "--transport", "rdma", "--rounds", "100", "--no-progress", "--peer", peer)
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert f"--peer {peer!r}: give HOST:PORT" in line and "bench-peer" in line, line


def test_a_peer_takes_ipv6_in_brackets() -> None:
    assert BenchConfig(peer="[fd00::2]:18515").peer_address() == ("fd00::2", 18515)


def test_a_peer_needs_a_transport_with_endpoints() -> None:
    result = backline("bench", "--transport", "memcpy", "--rounds", "100", "--no-progress", "--peer", "127.0.0.1:9")
    assert result.returncode == 2, result
    assert "does not join processes on two hosts" in one_line(result.stderr)


def test_a_peer_runs_the_coprocessor_in_its_process() -> None:
    result = backline("bench", "--transport", "rdma", "--rounds", "100", "--no-progress", "--peer", "127.0.0.1:9",
                      "--runs-in", "thread")
    assert result.returncode == 2, result
    assert "--runs-in thread: with --peer" in one_line(result.stderr)


def test_a_peer_without_a_device_here_is_one_line() -> None:
    result = backline("bench", "--transport", "rdma", "--rounds", "100", "--no-progress", "--peer", "127.0.0.1:9")
    assert result.returncode == 2, result
    assert "no RDMA device" in one_line(result.stderr)


@pytest.mark.parametrize("args, says", [
    (["--cpu", "0", "--floor-cpu", "0"], "--cpu and --floor-cpu are both 0"),
    (["--port", "0"], "--port 0: give a TCP port from 1 to 65534"),
    (["--port", "65535"], "--port 65535"),
    (["--cpu", "4096"], "--cpu 4096: not a CPU this process may run on"),
    (["--floor-cpu", "x"], "'x' is not a CPU number"),
    (["--duration", "-1"], "--duration -1.0: give a number of seconds > 0"),
], ids=["same-cpu", "port-0", "port-last", "cpu-absent", "cpu-text", "duration"])
def test_bench_peer_bad_input_is_one_line(args: list[str], says: str) -> None:
    result = backline("rdma", "bench-peer", *args)
    assert result.returncode == 2, result
    assert says in one_line(result.stderr)


def test_bench_peer_without_a_secret_file_says_how_to_make_one() -> None:
    result = backline("rdma", "bench-peer", "--cpu", "none", "--floor-cpu", "none", "--duration", "5")
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert "bench-peer needs --secret-file PATH" in line and "backline secret new PATH" in line, line
    assert "--transport-arg secret_file=PATH" in line, line  # and how the controller's bench gets it
    assert "ready" not in result.stdout


def test_bench_peer_refuses_a_secret_file_others_can_read_before_starting_anything(tmp_path) -> None:
    loose = tmp_path / "secret"
    loose.write_text(open(test_secret()).read())
    loose.chmod(0o644)
    result = backline("rdma", "bench-peer", "--cpu", "none", "--floor-cpu", "none", "--duration", "5",
                      "--secret-file", str(loose))
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert f"the secret file {loose} is open to group or others" in line and "chmod 600" in line, line
    assert "ready" not in result.stdout and "floor responder" not in line
    left = children_running(b"backline_transport_rdma.floor")
    assert not left, f"floor responders left running: {left}"


def test_bench_peer_without_a_device_is_one_line_and_leaves_nothing_running() -> None:
    result = backline("rdma", "bench-peer", "--cpu", "none", "--floor-cpu", "none", "--duration", "5",
                      "--secret-file", test_secret())
    assert result.returncode == 2, result
    line = one_line(result.stderr)
    assert "the floor responder exited" in line and "no RDMA device" in line, line
    assert "ready" not in result.stdout
