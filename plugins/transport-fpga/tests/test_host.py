"""The FPGA controller where there is no RDMA device: its part of `rdma`, resolution, the WQE bit
layout, the window checks, the command line and the aarch64 build of the driver."""

from __future__ import annotations

import os
import signal
import shutil
import stat
import struct
import subprocess
import sys

import pytest
from backline_transport_fpga import get_library, native_dir
from backline_transport_fpga.model import EngineModel
from backline_transport_fpga.native import backend, hwhs

from backline_core import BacklineError, Controller, Coprocessor, Endpoint, Placement, Session, plugins, resolve
from backline_core.testing import endpoint_config, free_port, one_line

HOST = "127.0.0.1"


def fpga_placement(window: str, port: int = 18515, fn: str = "steane") -> Placement:
    return Placement(controller=Controller(hardware="fpga", init_args={"window": window}), transport="rdma",
                     coprocessors=[Coprocessor(name="dec", coprocessor_fn=fn, runs_in="process",
                                               endpoint=Endpoint(host=HOST, port=port))])


def backline(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_fpga_controller_is_a_part_of_rdma_and_its_coprocessor_stays_the_rdma_plugins() -> None:
    ctl = plugins.transport_backend("rdma", "fpga", "controller")
    assert ctl.distribution == "backline-transport-fpga" and ctl.needs_endpoint and ctl.controller_bench
    assert plugins.transport_backend("rdma", "cpu", "coprocessor").distribution == "backline-transport-rdma"
    r = resolve(fpga_placement("/dev/shm/backline-hwhs-test"))
    assert r.controller.library == get_library()
    assert r.controller.transport.distribution == "backline-transport-fpga"
    assert r.coprocessor("dec").transport.distribution == "backline-transport-rdma"
    assert "window=/dev/shm/backline-hwhs-test" in r.coprocessor("dec").controller_config
    listed = backline("plugins")
    assert listed.returncode == 0 and "backline-transport-fpga" in listed.stdout and "fpga/controller" in listed.stdout


def test_a_key_the_fpga_controller_does_not_read_is_refused_at_resolution() -> None:
    p = Placement(controller=Controller(hardware="fpga", init_args={"tls": "shm"}), transport="rdma",
                  coprocessors=[Coprocessor(name="dec", coprocessor_fn="echo", runs_in="process",
                                            endpoint=Endpoint(host=HOST, port=18515))])
    with pytest.raises(BacklineError, match="tls"):
        resolve(p)
    bad_qp = Placement(controller=Controller(hardware="fpga", init_args={"qp": 9}), transport="rdma",
                       coprocessors=p.coprocessors)
    with pytest.raises(BacklineError, match="qp"):
        resolve(bad_qp)


def _field(wqe: bytes, hi: int, lo: int) -> int:
    """Bits [hi:lo] of the 512-bit entry, bit i being bit i % 8 of byte i // 8 (PG332)."""
    return (int.from_bytes(wqe, "little") >> lo) & ((1 << (hi - lo + 1)) - 1)


def test_the_driver_encodes_every_wqe_field_where_pg332_puts_it() -> None:
    ffi, lib = backend()
    w = ffi.new("bl_fpga_wqe *")
    w.wrid, w.local_addr, w.length, w.opcode = 0xBEEF, 0x8_0001_2345_6780, 0x0A0B0C0D, 1
    w.remote_addr, w.rkey, w.imm = 0x7F12_3456_789A_BCDE, 0xCAFEF00D, 0x01020304
    out = ffi.new("uint8_t[64]")
    lib.bl_fpga_wqe_encode(w, out)
    wqe = bytes(out)
    assert _field(wqe, 15, 0) == 0xBEEF
    assert _field(wqe, 95, 32) == 0x8_0001_2345_6780
    assert _field(wqe, 127, 96) == 0x0A0B0C0D
    assert _field(wqe, 135, 128) == 1
    assert _field(wqe, 223, 160) == 0x7F12_3456_789A_BCDE
    assert _field(wqe, 255, 224) == 0xCAFEF00D
    assert wqe[32:36] == bytes([1, 2, 3, 4])  # the immediate, in network order, first in the send-data field
    # every other bit is zero: [31:16], [159:136], [511:288]
    assert _field(wqe, 31, 16) == 0 and _field(wqe, 159, 136) == 0 and _field(wqe, 511, 288) == 0


def test_the_register_map_is_the_notes(tmp_path) -> None:
    h = hwhs()
    # a spot check of the reference offsets the driver and the model both take from hwhs.h
    assert (h.HWHS_CTRL, h.HWHS_STATUS, h.HWHS_REPLY_TO, h.HWHS_WQE_COMMIT, h.HWHS_QPCTX_COMMIT) == \
        (0x00, 0x04, 0x30, 0x60, 0x7C)
    assert (h.HWHS_REPLY_RING, h.HWHS_DEMO_CTRL, h.HWHS_LFSR_SEED, h.HWHS_TRACE_STS) == (0x94, 0xA8, 0xC8, 0xD4)
    assert h.HWHS_WIN_ERNIC == 0x100000 and h.HWHS_WIN_ERNIC + h.ERNIC_QP_BLOCK == 0x180000
    assert (h.ERNIC_SQ_PROD_IDX, h.ERNIC_QUEUE_DEPTH, h.ERNIC_STAT_CUR_SQ_PTR) == (0x38, 0x3C, 0x8C)


def _open_controller(window: str, port: int) -> Session:
    return Session.open("rdma", "controller", "dec", hardware="fpga",
                        config=endpoint_config(HOST, port, window=window, connect_timeout_ms=2000),
                        in_bytes=1, out_bytes=1)


def test_a_missing_window_says_to_start_the_engine_model(tmp_path) -> None:
    window = str(tmp_path / "absent")
    with pytest.raises(BacklineError, match="backline fpga model --window") as info:
        _open_controller(window, free_port(HOST))
    assert window in str(info.value)


@pytest.mark.parametrize("how", ["readable by others", "another user's", "a symlink"])
def test_a_window_another_user_could_control_is_refused(tmp_path, how: str) -> None:
    h = hwhs()
    path = tmp_path / "window"
    with open(path, "wb") as fh:
        fh.truncate(h.HWHS_WIN_MEM + 4096)
    os.chmod(path, 0o600)
    if how == "readable by others":
        os.chmod(path, 0o644)
    elif how == "another user's":  # the suite runs as root (install.sh apt-installs), so it can give it away
        os.chown(path, 65534, 65534)
    else:
        os.rename(path, tmp_path / "real")
        os.symlink(tmp_path / "real", path)
    with pytest.raises(BacklineError) as info:
        _open_controller(str(path), free_port(HOST))
    assert "window" in str(info.value) and str(path) in str(info.value)


def test_the_model_runs_without_a_device_shows_its_registers_and_leaves_nothing(tmp_path) -> None:
    """Here the ERNIC part has no verbs device; the engine and its window are there all the same, and a
    controller that finds no coprocessor at its endpoint says so within its deadline."""
    with EngineModel(str(tmp_path / "w")) as model:
        assert model.pid > 0 and stat.S_IMODE(os.stat(model.window).st_mode) == 0o600
        status = backline("fpga", "status", "--window", model.window)
        assert status.returncode == 0, status.stderr
        assert "STATUS" in status.stdout and "IDLE" in status.stdout
        port = free_port(HOST)  # nobody listens there
        with pytest.raises(BacklineError, match=f"{port}"):
            _open_controller(model.window, port)
        assert model.proc.poll() is None  # the failed controller left the engine running
    assert model.proc.returncode == 0 and not os.path.exists(model.window)


def test_the_model_cli_refuses_a_window_that_exists_in_one_line(tmp_path) -> None:
    path = tmp_path / "taken"
    path.write_bytes(b"")
    r = backline("fpga", "model", "--window", str(path))
    assert r.returncode == 2
    assert str(path) in one_line(r.stderr)


def test_status_of_no_window_is_one_line_and_status_2(tmp_path) -> None:
    r = backline("fpga", "status", "--window", str(tmp_path / "none"))
    assert r.returncode == 2 and "backline fpga model" in one_line(r.stderr)


@pytest.mark.defect("fpga status --window FIFO waited for a writer forever")
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_status_of_a_window_that_is_no_file_is_one_line_and_status_2(tmp_path, kind: str) -> None:
    path = {"fifo": tmp_path / "fifo", "device": "/dev/zero", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    r = backline("fpga", "status", "--window", str(path))  # bounded by the helper's timeout
    assert r.returncode == 2 and "not a regular file" in one_line(r.stderr)


@pytest.mark.parametrize("args, says", [
    (["--loop", "hw"], "--controller-hardware fpga"),
    (["--controller-hardware", "fpga", "--transport", "memcpy"], "fpga/controller"),
    (["--controller-hardware", "fpga", "--transport", "rdma", "--peer", "10.0.0.2:18515"], "--peer"),
    (["--controller-hardware", "fpga", "--transport", "rdma", "--driver", "python"], "--driver"),
])
def test_bench_options_an_fpga_controller_cannot_take_are_one_line_errors(args: list[str], says: str) -> None:
    r = backline("bench", "--rounds", "10", "--no-progress", *args)
    assert r.returncode == 2, r.stdout
    assert says in one_line(r.stderr)


def test_the_hw_loop_refuses_payloads_its_syndrome_table_cannot_hold() -> None:
    from backline_transport_fpga.bench import syndrome_table

    from backline_core.sdk import BenchConfig, PayloadTable

    cfg = BenchConfig(transport="rdma", controller_hardware="fpga", loop="hw", payload_bytes=16)
    with pytest.raises(BacklineError, match="at most 8 bytes"):
        syndrome_table(cfg, None, 16)
    replies = bytes(255 - k for k in range(8))  # any one-byte replies
    table = syndrome_table(BenchConfig(payload_bytes=1), PayloadTable(bytes(range(8)), replies, 1), 1)
    h = hwhs()
    assert len(table) == 8 * h.HWHS_TABLE_ENTRY
    third = table[2 * h.HWHS_TABLE_ENTRY:3 * h.HWHS_TABLE_ENTRY]
    assert struct.unpack_from("<II", third) == (1, 1) and third[8] == 2 and third[16] == 253


def test_the_driver_builds_for_the_boards_aarch64_cores(tmp_path) -> None:
    """The same driver source, cross-compiled for the VPK120's Cortex-A72 cores."""
    cc = shutil.which("aarch64-linux-gnu-gcc")
    assert cc, "aarch64-linux-gnu-gcc is missing: ./install.sh --dev installs it (Debian's gcc-aarch64-linux-gnu)"
    from backline_core import get_include

    obj = tmp_path / "driver-aarch64.o"
    r = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-c",
                        os.path.join(native_dir(), "driver.c"), "-I", native_dir(), "-I", get_include(), "-o",
                        str(obj)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    header = obj.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2  # ELF64
    assert struct.unpack_from("<H", header, 18)[0] == 183  # EM_AARCH64
    out = os.environ.get("BACKLINE_AARCH64_OUT")
    if out:  # CI keeps the object
        shutil.copy(obj, out)


@pytest.mark.defect("fpga model said ready with no RDMA device, and nothing else")
def test_the_model_without_a_device_says_so_when_it_is_ready(tmp_path) -> None:
    from backline_core.sdk import ChildProcess

    window = str(tmp_path / "w")
    child = ChildProcess([sys.executable, "-m", "backline_core", "fpga", "model", "--window", window],
                         name="the engine model", ready=r"^ready ")
    try:
        child.wait_ready(60)
        child.signal(signal.SIGTERM)
        assert child.wait(30) == 0
    finally:
        child.kill()
    said = "\n".join(child.output_tail())
    assert "warning: no verbs device" in said and "QP enable" in said, said
