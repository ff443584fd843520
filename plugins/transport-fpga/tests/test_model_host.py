"""The engine model (libbackline_hwhs_model) on a machine without a verbs device.

The model runs in a subprocess (``hwhs_model_run`` through ctypes) and this test pokes its
register window like a driver that gets things wrong: every mistake must come back as
STATUS.axi_err with an ERR_CODE and a text, never as a crash or a hang. The RDMA path itself
is checked in the Soft-RoCE guest (tests/guest).

The model runs as ``python -m backline_transport_fpga.model`` (``backline fpga model``).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import subprocess
import sys
import time
from typing import Iterator

import pytest

from backline_core.sdk import ChildProcess
from backline_core.testing import one_line
from backline_transport_fpga.native import hwhs

NO_DEVICE = "backline-no-such-dev"  # a verbs device no machine has
MEM_BYTES = 1 << 20


class _Constants:
    """hwhs.h's numbers (through cffi, as the package reads them), by name: H["HWHS_CTRL"]."""

    def __getitem__(self, name: str) -> int:
        return int(getattr(hwhs(), name))


H = _Constants()
COMMIT_REQ = H["HWHS_REQ_COMMIT"]
QPCTX_REQ = H["HWHS_REQ_QPCTX"]


def spawn(window: str) -> ChildProcess:
    """The model as `backline fpga model` runs it, on a device no machine has."""
    return ChildProcess([sys.executable, "-m", "backline_transport_fpga.model", "--window", window, "--device",
                         NO_DEVICE, "--mem-mib", str(MEM_BYTES >> 20)], name="the engine model",
                        ready=r"^ready (\S+) pid (\d+)$")


class Window:
    """The model's window, mapped here: 32-bit loads and stores like the driver's."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR)
        self.mm = mmap.mmap(self.fd, H["HWHS_WIN_MEM"] + MEM_BYTES)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)

    def rd(self, off: int) -> int:
        return ctypes.c_uint32.from_buffer(self.mm, off).value

    def wr(self, off: int, v: int) -> None:
        ctypes.c_uint32.from_buffer(self.mm, off).value = v

    def reg(self, name: str) -> int:
        return self.rd(H["HWHS_WIN_REGS"] + H[name])

    def set(self, name: str, v: int) -> None:
        self.wr(H["HWHS_WIN_REGS"] + H[name], v)

    def set64(self, name_lo: str, v: int) -> None:
        self.wr(H["HWHS_WIN_REGS"] + H[name_lo], v & 0xFFFFFFFF)
        self.wr(H["HWHS_WIN_REGS"] + H[name_lo] + 4, v >> 32)

    def qp(self, q: int, name: str) -> int:
        return H["HWHS_WIN_ERNIC"] + H["ERNIC_QP_BLOCK"] + q * H["ERNIC_QP_STRIDE"] + H[name]

    def ernic(self, name: str) -> int:
        return H["HWHS_WIN_ERNIC"] + H[name]

    def info_text(self, name: str, size: int) -> str:
        off = H["HWHS_WIN_INFO"] + H[name]
        return bytes(self.mm[off:off + size]).split(b"\0", 1)[0].decode()

    def error_text(self) -> str:
        return self.info_text("HWHS_INFO_ERROR", 256)

    def wait(self, what, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return True
            time.sleep(0.001)
        return bool(what())

    def commit(self, name: str, value: int) -> None:
        """A commit request; the model clears the register when it has acted."""
        self.set(name, value)
        assert self.wait(lambda: self.reg(name) == 0), f"{name} was not taken"

    def start_and_fail(self) -> int:
        """CTRL start, expecting the start to be refused: its ERR_CODE."""
        self.set("HWHS_CTRL", H["HWHS_CTRL_START"])
        # W1P: the model clears the pulse once it has acted, so STATUS already has the result
        assert self.wait(lambda: self.reg("HWHS_CTRL") == 0)
        status = self.reg("HWHS_STATUS")
        assert status & H["HWHS_STATUS_AXI_ERR"], hex(status)
        assert status & H["HWHS_STATUS_STATE_MASK"] == H["HWHS_S_IDLE"]
        assert not status & H["HWHS_STATUS_BUSY"]
        return self.reg("HWHS_ERR_CODE")


@pytest.fixture
def model(tmp_path) -> Iterator[tuple[subprocess.Popen, Window, str]]:
    path = str(tmp_path / "window")
    child = spawn(path)
    w = None
    try:
        assert child.wait_ready(10).groups() == (path, str(child.pid))
        w = Window(path)
        yield child.proc, w, path
    finally:
        if w:
            w.close()
        child.terminate(5)
        if os.path.exists(path):
            os.unlink(path)


def test_information_block(model):
    proc, w, _ = model
    info = H["HWHS_WIN_INFO"]
    assert w.rd(info + H["HWHS_INFO_MAGIC"]) == H["HWHS_MAGIC"]
    assert w.rd(info + H["HWHS_INFO_VERSION"]) == H["HWHS_MODEL_VERSION"]
    assert w.rd(info + H["HWHS_INFO_PID"]) == proc.pid
    assert w.rd(info + H["HWHS_INFO_CLOCK_HZ"]) == H["HWHS_CLOCK_HZ"]
    assert ctypes.c_uint64.from_buffer(w.mm, info + H["HWHS_INFO_MEM_BYTES"]).value == MEM_BYTES
    assert w.info_text("HWHS_INFO_DEVICE", 64) == ""
    alive = w.rd(info + H["HWHS_INFO_ALIVE"])
    assert w.wait(lambda: w.rd(info + H["HWHS_INFO_ALIVE"]) - alive >= 5, 1.0)


def test_start_with_nothing_committed(model):
    _, w, _ = model
    assert w.start_and_fail() == H["HWHS_E_NO_WQE"]
    assert "no WQE committed at RUN_WQE_IDX 0" in w.error_text()


def stage_wqe(w: Window) -> None:
    bus = H["HWHS_MEM_BUS_BASE"]
    w.set("HWHS_WQE_QP_REF", 0)
    w.set("HWHS_WQE_OPCODE", 3)
    w.set("HWHS_WQE_XFER_LEN", 56)
    w.set("HWHS_WQE_RKEY", 0x1234)
    w.set64("HWHS_WQE_VA_LO", 0x7F0000001000)
    w.set64("HWHS_WQE_OFFS_LO", bus + 0x10008)
    w.set("HWHS_WQE_WRID", 7)
    w.commit("HWHS_WQE_COMMIT", 0 | COMMIT_REQ)
    w.set("HWHS_RUN_WQE_IDX", 0)


def test_start_without_queue_pair(model):
    _, w, _ = model
    stage_wqe(w)
    assert w.start_and_fail() == H["HWHS_E_NO_QPCTX"]
    w.set("HWHS_QP_NUM", 1)
    w.set64("HWHS_SQBASE_LO", H["HWHS_MEM_BUS_BASE"])
    w.set("HWHS_SQ_DEPTH", 16)
    w.commit("HWHS_QPCTX_COMMIT", 0 | QPCTX_REQ)
    assert w.start_and_fail() == H["HWHS_E_QP_NOT_HWHS"]
    assert "ERNIC QP 1 is not enabled" in w.error_text()
    # an out-of-range WQE index is refused, and the request still cleared
    w.commit("HWHS_WQE_COMMIT", 99 | COMMIT_REQ)
    assert w.reg("HWHS_ERR_CODE") == H["HWHS_E_CONFIG"]


def test_soft_reset(model):
    _, w, _ = model
    stage_wqe(w)
    w.set("HWHS_ROUND_CNT", 41)
    w.set("HWHS_RING_IDX", 3)
    assert w.start_and_fail() == H["HWHS_E_NO_QPCTX"]
    w.set("HWHS_CTRL", H["HWHS_CTRL_RESET"])
    assert w.wait(lambda: w.reg("HWHS_STATUS") == 0 and w.reg("HWHS_ROUND_CNT") == 0)
    assert w.reg("HWHS_RING_IDX") == 0
    assert w.reg("HWHS_ERR_CODE") == 0
    assert w.reg("HWHS_TRACE_CNT") == 0
    assert w.start_and_fail() == H["HWHS_E_NO_WQE"]  # the WQE store is cleared too


def test_paced_start_checks(model):
    _, w, _ = model
    w.set("HWHS_DEMO_CTRL", H["HWHS_DEMO_START"])
    assert w.wait(lambda: w.reg("HWHS_DEMO_CTRL") == 0)
    assert w.reg("HWHS_STATUS") & H["HWHS_STATUS_AXI_ERR"]
    assert w.reg("HWHS_ERR_CODE") == H["HWHS_E_NO_WQE"]
    assert w.reg("HWHS_DEMO_STS") & H["HWHS_DEMO_DONE"]
    w.set("HWHS_DEMO_CTRL", H["HWHS_DEMO_RESET"])
    assert w.wait(lambda: w.reg("HWHS_DEMO_STS") == 0)


def test_queue_pair_and_memory_without_device(model):
    _, w, _ = model
    w.wr(w.qp(0, "ERNIC_QUEUE_DEPTH"), 16 | 64 << 16)
    w.wr(w.qp(0, "ERNIC_SNDQ_BUF_BASE_LO"), H["HWHS_MEM_BUS_BASE"] & 0xFFFFFFFF)
    w.wr(w.qp(0, "ERNIC_SNDQ_BUF_BASE_HI"), H["HWHS_MEM_BUS_BASE"] >> 32)
    w.wr(w.qp(0, "ERNIC_QP_CONF"), H["ERNIC_QP_ENABLE"] | 2 << H["ERNIC_QP_PMTU_SHIFT"])
    assert w.wait(lambda: w.rd(w.qp(0, "ERNIC_QP_STATE")) == H["ERNIC_QPS_ERROR"])
    text = w.error_text()
    assert NO_DEVICE in text and "no verbs device" in text, text
    w.wr(w.qp(0, "ERNIC_QP_CONF"), 0)
    assert w.wait(lambda: w.rd(w.qp(0, "ERNIC_QP_STATE")) == H["ERNIC_QPS_RESET"])
    # memory registration fails the same way
    w.wr(w.ernic("ERNIC_MR_ADDR_LO"), H["HWHS_MEM_BUS_BASE"] & 0xFFFFFFFF)
    w.wr(w.ernic("ERNIC_MR_ADDR_HI"), H["HWHS_MEM_BUS_BASE"] >> 32)
    w.wr(w.ernic("ERNIC_MR_LEN_LO"), 4096)
    w.wr(w.ernic("ERNIC_MR_COMMIT"), 1)
    assert w.wait(lambda: w.rd(w.ernic("ERNIC_MR_COMMIT")) == 0)
    assert w.rd(w.ernic("ERNIC_MR_STATUS")) == H["ERNIC_MR_FAILED"]
    assert NO_DEVICE in w.error_text()


def test_sigterm_removes_the_window(model):
    proc, w, path = model
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0
    assert not os.path.exists(path)
    assert os.listdir(os.path.dirname(path)) == []  # nor its temporary name


def test_existing_window_is_refused(tmp_path):
    path = str(tmp_path / "window")
    with open(path, "w") as f:
        f.write("someone else's")
    child = spawn(path)
    try:
        assert child.wait(10) == 2
    finally:
        child.terminate(5)  # reaped, and its output read to the end
    out = "\n".join(child.output_tail())
    assert "exists already" in one_line(out) and path in out, out
    with open(path) as f:
        assert f.read() == "someone else's"
    assert os.listdir(tmp_path) == ["window"]


def test_random_register_writes_neither_crash_nor_hang_the_model(model):
    """A driver gone mad: random values into every register and the DMA memory, starts among them."""
    import random

    proc, w, _ = model
    rng = random.Random(1234)
    regs = [H["HWHS_WIN_REGS"] + 4 * k for k in range(H["HWHS_GAP_LOG"] // 4)]
    ernic = [H["HWHS_WIN_ERNIC"] + H["ERNIC_MR_ADDR_LO"] + 4 * k for k in range(24)]
    qps = [w.qp(q, "ERNIC_QP_CONF") + 4 * k for q in range(8) for k in range(64)]
    bus = H["HWHS_MEM_BUS_BASE"]
    interesting = [0, 1, 2, 3, 4, 7, 8, 63, 64, 0xFFFF, 0x80000000, 0x40000000, 0xFFFFFFFF, bus & 0xFFFFFFFF, bus >> 32]
    for _ in range(4000):
        off = rng.choice(regs + ernic + qps)
        w.wr(off, rng.choice(interesting) if rng.random() < 0.7 else rng.getrandbits(32))
        if rng.random() < 0.05:
            w.wr(H["HWHS_WIN_MEM"] + 8 * rng.randrange(MEM_BYTES // 8), rng.getrandbits(32))
    w.set("HWHS_CTRL", H["HWHS_CTRL_RESET"])
    assert w.wait(lambda: w.reg("HWHS_CTRL") == 0 and not w.reg("HWHS_STATUS") & H["HWHS_STATUS_BUSY"])
    alive = w.rd(H["HWHS_WIN_INFO"] + H["HWHS_INFO_ALIVE"])
    assert w.wait(lambda: w.rd(H["HWHS_WIN_INFO"] + H["HWHS_INFO_ALIVE"]) != alive, 1.0)
    assert proc.poll() is None
