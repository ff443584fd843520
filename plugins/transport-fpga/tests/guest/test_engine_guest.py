"""The FPGA controller over real RoCE (Soft-RoCE in the guest): the driver programs the engine model
through its window, the model performs every WQE through libibverbs, and the unchanged rdma
coprocessor answers. Kept small: Python runs ~14x slower under TCG."""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from backline_transport_fpga.native import backend, hwhs

from backline_core import (
    BacklineError,
    Controller,
    Coprocessor,
    CoprocessorFunction,
    DeadlineError,
    Endpoint,
    PeerError,
    Placement,
    Session,
    deploy,
)
from backline_core.sdk import steane_correction
from backline_core.testing import ServeProcess, endpoint_config, free_port

HOST = "127.0.0.1"
#: a round under TCG, with three spinning processes on two emulated CPUs, can stall for long
SLOW = 10000
STEANE = [steane_correction(s) for s in range(8)]  # each syndrome's flip, from backline/steane.h


def placement(window: str, port: int, fn: str | CoprocessorFunction = "steane", timeout_ms: int = SLOW,
              **cop_args: object) -> Placement:
    return Placement(
        controller=Controller(hardware="fpga", init_args={"window": window, "timeout_ms": timeout_ms}),
        transport="rdma",
        coprocessors=[Coprocessor(name="dec", coprocessor_fn=fn, runs_in="process",
                                  endpoint=Endpoint(host=HOST, port=port),
                                  init_args={"timeout_ms": timeout_ms, **cop_args})])


class Window:
    """The engine's window as a test reads it (independently of the driver)."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as fh:
            self.m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        self.h = hwhs()

    def reg(self, off: int) -> int:
        return struct.unpack_from("<I", self.m, self.h.HWHS_WIN_REGS + off)[0]

    def qp(self, off: int, qpn: int = 1) -> int:
        h = self.h
        return struct.unpack_from("<I", self.m, h.HWHS_WIN_ERNIC + h.ERNIC_QP_BLOCK + (qpn - 1) * h.ERNIC_QP_STRIDE
                                  + off)[0]

    def mem(self, bus: int, n: int) -> bytes:
        off = self.h.HWHS_WIN_MEM + bus - self.h.HWHS_MEM_BUS_BASE
        return bytes(self.m[off:off + n])

    def close(self) -> None:
        self.m.close()


def _field(wqe: bytes, hi: int, lo: int) -> int:
    return (int.from_bytes(wqe, "little") >> lo) & ((1 << (hi - lo + 1)) - 1)


def paced(ffi, table: bytes, count: int, freq: int = 0, span: int = 0, seed: int = 1, timeout_ms: int = 120000):
    p = ffi.new("bl_fpga_paced *")
    keep = ffi.new("uint8_t[]", table)
    p.table, p.table_bytes, p.count, p.freq, p.span, p.seed, p.timeout_ms = keep, len(table), count, freq, span, \
        seed, timeout_ms
    return p, keep


def entry(request: bytes, reply: bytes) -> bytes:
    return (len(request).to_bytes(4, "little") + len(reply).to_bytes(4, "little") + request.ljust(8, b"\0")
            + reply.ljust(8, b"\0"))


STEANE_TABLE = b"".join(entry(bytes([s]), bytes([c])) for s, c in enumerate(STEANE))


def error_text() -> str:
    ffi, lib = backend()
    return ffi.string(lib.bl_fpga_error()).decode()


def test_sw_loop_rounds_answer_every_steane_syndrome_and_the_engine_times_each(engine) -> None:
    ffi, lib = backend()
    t0 = time.perf_counter()
    with deploy(placement(engine.window, free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert s.round(bytes([0b010])) == bytes([0x10])
        print(f"placement to first round: {time.perf_counter() - t0:.2f} s")
        cycles = ffi.new("uint64_t[64]")
        assert lib.bl_fpga_record_cycles(s.key.encode(), cycles, 64) == 0
        assert [s.round(bytes([i % 8]))[0] for i in range(32)] == STEANE * 4
        assert lib.bl_fpga_recorded_cycles(s.key.encode()) == 32
        rtts = [cycles[i] for i in range(32)]
        assert all(c > 0 for c in rtts), rtts
        print(f"engine RTT over 32 rounds: median {sorted(rtts)[16]} cycles = {sorted(rtts)[16] / 200:.1f} us")
        w = Window(engine.window)
        try:
            h = w.h
            assert w.reg(h.HWHS_ROUND_CNT) == 33
            st = w.reg(h.HWHS_STATUS)
            assert st & h.HWHS_STATUS_DONE and not st & (h.HWHS_STATUS_TIMEOUT | h.HWHS_STATUS_AXI_ERR)
            assert w.qp(h.ERNIC_QP_STATE) == h.ERNIC_QPS_READY and w.qp(h.ERNIC_QP_RECV_CNT) == 33
        finally:
            w.close()


def test_the_wqe_the_engine_posted_has_the_pg332_layout(engine) -> None:
    """Read the last WQE out of the SQ ring in DMA memory and decode it here, bit by bit."""
    with deploy(placement(engine.window, free_port(HOST), fn="echo", slot_bytes=128), in_bytes=40,
                out_bytes=40) as d:
        s = d.session()
        for k in range(5):
            assert s.round(bytes(range(k, k + 40))) == bytes(range(k, k + 40))
        w = Window(engine.window)
        try:
            h = w.h
            sq = w.qp(h.ERNIC_SNDQ_BUF_BASE_LO) | w.qp(h.ERNIC_SNDQ_BUF_BASE_HI) << 32
            depth = w.qp(h.ERNIC_QUEUE_DEPTH) & 0xFFFF
            posted = w.qp(h.ERNIC_SQ_PROD_IDX)
            assert posted == 5 and w.qp(h.ERNIC_STAT_CUR_SQ_PTR) == 5 and w.qp(h.ERNIC_CQ_HEAD_PTR) == 5
            wqe = w.mem(sq + ((posted - 1) % depth) * 64, 64)
            dbuf = w.reg(h.HWHS_DBUF_LO) | w.reg(h.HWHS_DBUF_HI) << 32
            slot = 4  # round 5
            assert _field(wqe, 135, 128) == 1  # WRITE with immediate
            assert _field(wqe, 127, 96) == 128 - 8  # the slot less the sequence number
            assert _field(wqe, 95, 32) == dbuf + slot * 128 + 8
            assert wqe[32:36] == (5).to_bytes(4, "big")  # the round's sequence number, network order
            remote = _field(wqe, 223, 160)
            assert remote % 128 == 8 and _field(wqe, 255, 224) != 0
            # the engine's stored WQE is the driver's staging: the same remote ring, slot 0
            assert remote - slot * 128 == (w.reg(h.HWHS_WQE_VA_LO) | w.reg(h.HWHS_WQE_VA_HI) << 32)
            assert _field(wqe, 31, 16) == 0 and _field(wqe, 159, 136) == 0 and _field(wqe, 511, 288) == 0
        finally:
            w.close()


def test_hw_loop_paced_rounds_compare_every_reply_and_fill_the_trace(engine) -> None:
    ffi, lib = backend()
    with deploy(placement(engine.window, free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert s.round(bytes([1])) == bytes([1])  # the core's rounds, then the engine's
        p, keep = paced(ffi, STEANE_TABLE, count=200)
        r = ffi.new("bl_fpga_paced_result *")
        trace = ffi.new("uint16_t[200]")
        assert lib.bl_fpga_paced_run(s.key.encode(), p, r, trace, 200) == 0, error_text()
        assert (r.rounds, r.demo_err, r.trace_cnt, r.trace_full, r.aborted) == (200, 0, 200, 0, 0)
        assert all(trace[i] > 0 for i in range(200))
        print(f"hw-loop b2b steane: median {sorted(trace)[100]} cycles, saturated {r.trace_saturated}")
        # the core's round sequence is over: the engine numbered its own
        with pytest.raises(BacklineError, match="new session"):
            s.round(bytes([1]))


def test_the_pacer_waits_freq_plus_lfsr_and_span_before_each_round(engine) -> None:
    def lfsr(state: int) -> int:  # x^32 + x^22 + x^2 + x + 1, Fibonacci, shifting left
        return ((state << 1) | (((state >> 31) ^ (state >> 21) ^ (state >> 1) ^ state) & 1)) & 0xFFFFFFFF

    ffi, lib = backend()
    freq, span, seed = 2000, 0x3FF, 0xACE1
    with deploy(placement(engine.window, free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        p, keep = paced(ffi, STEANE_TABLE, count=64, freq=freq, span=span, seed=seed)
        r = ffi.new("bl_fpga_paced_result *")
        assert lib.bl_fpga_paced_run(s.key.encode(), p, r, ffi.NULL, 0) == 0, error_text()
        assert r.rounds == 64 and r.demo_err == 0
        w = Window(engine.window)
        try:
            h = w.h
            logged = [w.reg(h.HWHS_GAP_LOG + 4 * k) for k in range(64)]
        finally:
            w.close()
    state, want = seed, []
    for _ in range(64):
        state = lfsr(state)
        want.append(freq + (state & span))
    assert logged == want


def _status(window: str) -> str:
    r = subprocess.run([sys.executable, "-m", "backline_core", "fpga", "status", "--window", window],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@contextlib.contextmanager
def served_controller(engine, fn: str, timeout_ms: int, message_bytes: int = 1) -> Iterator[tuple[ServeProcess, Session]]:
    """An rdma coprocessor process serving `fn`, and an FPGA controller session with it on `engine`'s window;
    the coprocessor is continued (a test may stop it) and the session destroyed afterwards."""
    port = free_port(HOST)
    with ServeProcess("rdma", port, fn, host=HOST, timeout_ms=SLOW) as serve:
        s = Session.open("rdma", "controller", "dec", hardware="fpga", in_bytes=message_bytes,
                         out_bytes=message_bytes,
                         config=endpoint_config(HOST, port, window=engine.window, timeout_ms=timeout_ms))
        try:
            yield serve, s
        finally:
            if serve.proc.poll() is None:
                serve.proc.send_signal(signal.SIGCONT)
            s.destroy()


def test_a_coprocessor_that_stops_answering_is_a_timeout_of_the_engine_not_a_hang(engine) -> None:
    """SIGSTOP: its connection stays open, only the engine can tell: REPLY_TO (half of timeout_ms)
    passes, STATUS.timeout, and the round fails with a timeout error that says so."""
    with served_controller(engine, "steane", timeout_ms=6000) as (serve, s):
        assert s.round(b"\x01") == b"\x01"
        serve.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(DeadlineError) as info:
            s.round(b"\x01")
        print(f"stopped coprocessor reported after {time.monotonic() - t0:.2f} s: {info.value}")
        assert "the engine reported a timeout" in str(info.value) and "REPLY_TO" in str(info.value)
        assert "timeout" in _status(engine.window)


def test_a_coprocessor_that_dies_is_reported_at_once(engine) -> None:
    """SIGKILL: its connection closes, which the driver sees before the engine's deadline."""
    with served_controller(engine, "steane", timeout_ms=6000) as (serve, s):
        assert s.round(b"\x01") == b"\x01"
        serve.proc.send_signal(signal.SIGKILL)
        serve.proc.wait(30)
        with pytest.raises(PeerError, match="closed"):
            s.round(b"\x01")


def test_a_paced_run_whose_coprocessor_dies_returns_a_timeout(engine) -> None:
    ffi, lib = backend()
    with served_controller(engine, "steane", timeout_ms=4000) as (serve, s):
        p, keep = paced(ffi, STEANE_TABLE, count=100000, freq=200000)  # 1 ms apart
        assert lib.bl_fpga_paced_start(s.key.encode(), p) == 0, error_text()
        time.sleep(1.0)
        serve.proc.send_signal(signal.SIGKILL)
        r = ffi.new("bl_fpga_paced_result *")
        rc = lib.bl_fpga_paced_finish(s.key.encode(), 60000, r, ffi.NULL, 0)
        assert rc == -3, (rc, error_text())  # BL_ETIMEOUT
        assert 0 < r.rounds < 100000 and r.status & hwhs().HWHS_STATUS_TIMEOUT


@pytest.mark.parametrize("how", ["abort", "soft_reset"])
def test_abort_and_soft_reset_end_a_paced_run_mid_way(engine, how: str) -> None:
    ffi, lib = backend()
    h = hwhs()
    with deploy(placement(engine.window, free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        key = s.key.encode()
        p, keep = paced(ffi, STEANE_TABLE, count=1000, freq=10_000_000)  # 50 ms apart: 50 s in all
        assert lib.bl_fpga_paced_start(key, p) == 0, error_text()
        time.sleep(1.0)
        assert getattr(lib, f"bl_fpga_{how}")(key) == 0, error_text()
        r = ffi.new("bl_fpga_paced_result *")
        rc = lib.bl_fpga_paced_finish(key, 10000, r, ffi.NULL, 0)
        w = Window(engine.window)
        try:
            st = w.reg(h.HWHS_STATUS)
            assert st & h.HWHS_STATUS_STATE_MASK == h.HWHS_S_IDLE and not st & h.HWHS_STATUS_BUSY
            if how == "abort":  # the run ends, says so, and keeps its counts
                assert rc == 0 and r.aborted and 0 < r.rounds < 1000
                assert w.reg(h.HWHS_DEMO_STS) == h.HWHS_DEMO_DONE | h.HWHS_DEMO_ABORTED
            else:  # the reset took the run with it: nothing is left to finish, the counters are zero, and
                # DEMO_STS still says why the run ended
                assert rc == -2 and "no paced run" in error_text()  # BL_ESTATE
                assert w.reg(h.HWHS_ROUND_CNT) == 0 and w.reg(h.HWHS_TRACE_CNT) == 0
                assert w.reg(h.HWHS_DEMO_STS) == h.HWHS_DEMO_DONE | h.HWHS_DEMO_ABORTED
        finally:
            w.close()
        with pytest.raises(BacklineError, match="new session"):
            s.round(bytes([1]))


SLOW_ECHO = r"""
#include <stdint.h>
#include <string.h>
#include <time.h>
/* echo, after spinning 500 us: longer than the trace's 16-bit clamp (327 us) */
int32_t slow_echo(void *ctx, uint32_t id, const uint8_t *in, uint32_t n, uint8_t *out, uint32_t cap, uint32_t *len) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t); while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < 500000L);
    if (n > cap) return 1;
    memcpy(out, in, n);
    *len = n;
    return 0;
}
"""


def test_a_slow_coprocessor_function_saturates_the_trace(engine, tmp_path) -> None:
    src, lib_path = tmp_path / "slow.c", tmp_path / "libslow.so"
    src.write_text(SLOW_ECHO)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib_path)], check=True)
    fn = CoprocessorFunction(name="slow-echo", library=str(lib_path), symbol="slow_echo")
    ffi, lib = backend()
    with deploy(placement(engine.window, free_port(HOST), fn=fn), in_bytes=8, out_bytes=8) as d:
        s = d.session()
        table = b"".join(entry(bytes([k] * 8), bytes([k] * 8)) for k in range(16))
        p, keep = paced(ffi, table, count=20)
        r = ffi.new("bl_fpga_paced_result *")
        trace = ffi.new("uint16_t[20]")
        assert lib.bl_fpga_paced_run(s.key.encode(), p, r, trace, 20) == 0, error_text()
        assert r.rounds == 20 and r.demo_err == 0 and r.trace_saturated == 1 and r.trace_full == 0
        assert all(trace[i] == 0xFFFF for i in range(20))


@pytest.mark.parametrize("loop, fn", [("sw", "echo"), ("hw", "steane")])
def test_backline_bench_with_the_fpga_controller(rdma_device: str, loop: str, fn: str) -> None:
    payload = "1" if fn == "steane" else "8"
    r = subprocess.run([sys.executable, "-m", "backline_core", "bench", "--transport", "rdma",
                        "--controller-hardware", "fpga", "--loop", loop, "--coprocessor-fn", fn, "--payload-bytes",
                        payload, "--rounds", "300", "--no-progress"], capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, r.stderr
    assert "lost: 0  mismatched replies: 0" in r.stdout and "round 0:" in r.stdout
    assert ("compare errors (DEMO_ERR): 0" in r.stdout) == (loop == "hw")
    assert not [name for name in os.listdir("/dev/shm") if name.startswith("backline-hwhs-")]


def sw_rounds(ffi, rounds: int, collect: int, requests: list[bytes], replies: list[bytes], timeout_ms: int = 0):
    c = ffi.new("bl_fpga_sw *")
    keep = (ffi.new("uint8_t[]", b"".join(requests)), ffi.new("uint8_t[]", b"".join(replies)))
    c.rounds, c.collect, c.timeout_ms = rounds, collect, timeout_ms
    c.payloads, c.payload_bytes, c.n_payloads = keep[0], len(requests[0]), len(requests)
    c.expected, c.expected_bytes = keep[1], len(replies[0])
    return c, keep


@pytest.mark.parametrize("collect", ["slot", "status"])
def test_the_drivers_own_sw_loop_collects_by_reply_slot_or_by_status(engine, collect: str) -> None:
    ffi, lib = backend()
    mode = lib.BL_FPGA_COLLECT_SLOT if collect == "slot" else lib.BL_FPGA_COLLECT_STATUS
    with deploy(placement(engine.window, free_port(HOST)), in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert s.round(bytes([3])) == bytes([0x02])  # the core's rounds first; the driver's continue them
        c, keep = sw_rounds(ffi, 40, mode, [bytes([k]) for k in range(8)], [bytes([x]) for x in STEANE])
        cycles, host = ffi.new("uint64_t[40]"), ffi.new("uint64_t[40]")
        r = ffi.new("bl_fpga_sw_result *")
        assert lib.bl_fpga_sw_rounds(s.key.encode(), c, cycles, host, r) == 0, error_text()
        assert (r.done, r.mismatched) == (40, 0)
        assert all(0 < cycles[k] and cycles[k] * 5 <= host[k] for k in range(40))  # the engine's round is within ours
        with pytest.raises(BacklineError, match="new session"):
            s.round(bytes([1]))


@pytest.mark.parametrize("collect", ["slot", "status"])
def test_a_stopped_coprocessor_is_stuck_at_the_reply_slot_and_a_timeout_by_status(engine, collect: str) -> None:
    """A coprocessor that stops answering: polling the reply slot gives up at the driver's own deadline
    ("stuck"); waiting on STATUS ends with the engine's timeout (REPLY_TO = 2 s here): two errors."""
    ffi, lib = backend()
    with served_controller(engine, "echo", timeout_ms=4000, message_bytes=8) as (serve, s):
        ping = [b"12345678"]
        mode = lib.BL_FPGA_COLLECT_SLOT if collect == "slot" else lib.BL_FPGA_COLLECT_STATUS
        c, keep = sw_rounds(ffi, 3, mode, ping, ping)
        r = ffi.new("bl_fpga_sw_result *")
        assert lib.bl_fpga_sw_rounds(s.key.encode(), c, ffi.NULL, ffi.NULL, r) == 0, error_text()
        serve.proc.send_signal(signal.SIGSTOP)
        # the slot's deadline (0.5 s) comes before the engine's REPLY_TO (2 s); STATUS waits for the engine
        c, keep = sw_rounds(ffi, 1, mode, ping, ping, timeout_ms=500 if collect == "slot" else 20000)
        t0 = time.monotonic()
        assert lib.bl_fpga_sw_rounds(s.key.encode(), c, ffi.NULL, ffi.NULL, r) == -3  # BL_ETIMEOUT
        print(f"collect by {collect}: {error_text()} after {time.monotonic() - t0:.2f} s")
        if collect == "slot":
            assert "stuck" in error_text() and "REPLY_TO" not in error_text()
        else:
            assert "the engine timed out" in error_text() and "REPLY_TO" in error_text()
        assert r.done == 0
