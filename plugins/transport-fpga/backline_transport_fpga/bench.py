"""``backline bench --transport rdma --controller-hardware fpga --loop sw|hw``: the paper's report of the
FPGA controller, from the engine's own cycle counts.

The bench starts an engine model (its own window), deploys a placement whose controller is the
FPGA and whose coprocessor is backline-transport-rdma's, and then either

- **sw-loop**: issues the rounds from this thread through the session (the core's native round
  driver: write the request slot, the backend kicks the engine; the engine posts, rings, polls and
  times; every reply is checked here) and reads the engine's RTT of every round (RTT_HI:RTT_LO); or
- **hw-loop**: programs the engine's pacer with a syndrome table and lets it issue every round
  itself, then reads the RTT trace (16-bit, saturating) and the engine's compare errors.

Round 0 is reported alone; the statistics are of the steady state, in engine cycles (200 MHz)
and microseconds. Through the model these are not FPGA latencies (docs/transport-fpga.md).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from backline_core import BacklineError, Controller, Coprocessor, CoprocessorFunction, Endpoint, Placement, deploy
from backline_core.sdk import BenchConfig, PayloadTable, Progress, RoundRunner, free_port, from_status, summary

from .model import EngineModel
from .native import backend, hwhs
from .window import WindowView

#: the model's verbs keys among the bench's --transport-arg (the rdma coprocessor's keys, same device)
MODEL_KEYS = {"device": "device", "ib_port": "ib_port", "gid_index": "gid_index"}
#: rounds per block of the sw-loop (progress is reported between blocks)
SW_BLOCK = 5_000


@dataclass
class EngineBench:
    """One run's figures: RTTs in engine cycles (and the driver's view in ns for the sw-loop)."""

    cfg: BenchConfig
    window: str
    device: str
    round0_cycles: int
    cycles: np.ndarray            # steady-state rounds, engine cycles
    host_ns: np.ndarray | None    # sw-loop: post to collect on this thread's clock
    round0_ns: int | None
    lost: int
    mismatched: int
    demo_err: int = 0
    trace_cnt: int = 0
    trace_full: bool = False
    trace_saturated: bool = False
    saturated_entries: int = 0

    @property
    def clock_hz(self) -> int:
        return int(hwhs().HWHS_CLOCK_HZ)

    def to_json(self) -> dict[str, Any]:
        us = 1e6 / self.clock_hz
        cycles = summary(self.cycles, "")
        out: dict[str, Any] = {
            "config": {k: v for k, v in self.cfg.__dict__.items()},
            "controller": "fpga (engine model)",
            "window": self.window,
            "device": self.device,
            "clock_hz": self.clock_hz,
            "round0_cycles": self.round0_cycles,
            "round0_us": self.round0_cycles * us,
            "steady_cycles": cycles,
            "steady_us": {k: (v * us if k != "rounds" else v) for k, v in cycles.items()},
            "lost": self.lost,
            "mismatched": self.mismatched,
        }
        if self.host_ns is not None:
            out["driver_ns"] = summary(self.host_ns, "")
            out["round0_driver_ns"] = self.round0_ns
        if self.cfg.loop == "hw":
            out.update(demo_err=self.demo_err, trace_cnt=self.trace_cnt, trace_full=self.trace_full,
                       trace_saturated=self.trace_saturated, saturated_entries=self.saturated_entries)
        return out

    def text(self) -> str:
        cfg, us = self.cfg, 1e6 / self.clock_hz
        if cfg.cadence == "b2b":
            gaps = "cadence=b2b"
        elif cfg.loop == "hw":  # the engine's pacer, in its cycles
            gaps = (f"cadence=random-delayed (pacer: FREQ {cfg.gap_ns * self.clock_hz // 10**9} cycles + LFSR & "
                    f"{cfg.gap_span:#x} cycles, seed {cfg.seed})")
        else:  # the issuing thread's gaps, on the host clock
            gaps = f"cadence=random-delayed ({cfg.gap_ns} ns + LFSR & {cfg.gap_span:#x} ns before each kick, seed {cfg.seed})"
        lines = [
            f"backline bench: transport=rdma controller=fpga (engine model on {self.device or 'no device'}) "
            f"loop={cfg.loop} {gaps} fn={cfg.coprocessor_fn} payload={cfg.payload_bytes} B rounds={cfg.rounds:,}",
            f"engine clock {self.clock_hz / 1e6:.0f} MHz (the model counts host CLOCK_MONOTONIC / 5): these are the "
            "model's latencies over Soft-RoCE, not an FPGA's",
            f"round 0: {self.round0_cycles:,} cycles = {self.round0_cycles * us:.3f} us (excluded below)",
            f"steady state ({self.cycles.size:,} rounds), engine RTT from the doorbell to the reply:",
            f"  {'':<10}{'mean':>12}{'sigma':>12}{'median':>12}{'P99':>12}{'P99.9':>12}{'P99.99':>12}"
            f"{'P99.999':>12}{'max':>12}",
        ]
        s = summary(self.cycles, "")
        keys = ("mean", "std", "median", "p99", "p999", "p9999", "p99999", "max")
        lines.append(f"  {'cycles':<10}" + "".join(f"{s[k]:12,.0f}" for k in keys))
        lines.append(f"  {'us':<10}" + "".join(f"{s[k] * us:12.3f}" for k in keys))
        if self.host_ns is not None:
            h = summary(self.host_ns, "")
            lines.append(f"  {'driver us':<10}" + "".join(f"{h[k] / 1e3:12.3f}" for k in keys)
                         + "   (post to collect on the issuing thread, kick included)")
        if cfg.loop == "hw":
            lines.append(f"trace: {self.trace_cnt:,} entries, full {'yes' if self.trace_full else 'no'}, saturated "
                         f"{'yes' if self.trace_saturated else 'no'} ({self.saturated_entries:,} entries clamped at "
                         f"0xFFFF = {0xFFFF * us:.3f} us; statistics above count them at the clamp)")
            lines.append(f"compare errors (DEMO_ERR): {self.demo_err}")
        lines.append(f"lost: {self.lost}  mismatched replies: {self.mismatched}  (every reply checked"
                     + (" by the engine against the syndrome table)" if cfg.loop == "hw" else ")"))
        return "\n".join(lines)


def _echo_payload(k: int, n: int) -> bytes:
    return bytes(((k >> (8 * (b % 8))) & 0xFF) ^ (b // 8) for b in range(n))


def syndrome_table(cfg: BenchConfig, table: PayloadTable | None, out_bytes: int) -> bytes:
    """The pacer's syndrome table (hwhs.h's entry format) for this run's requests and expected replies."""
    h = hwhs()
    limit = h.HWHS_TABLE_PAYLOAD_MAX
    if cfg.payload_bytes > limit or out_bytes > limit:
        raise BacklineError(f"--loop hw: the engine's syndrome table holds requests and replies of at most {limit} "
                            f"bytes; this run has {cfg.payload_bytes} and {out_bytes} (use --payload-bytes {limit} or "
                            "less, or --loop sw)")
    most = h.HWHS_TABLE_BYTES // h.HWHS_TABLE_ENTRY
    if table is None:
        pairs = [(_echo_payload(k, cfg.payload_bytes),) * 2 for k in range(min(256, most))]
    else:
        payloads, expected, reply = table
        n = min(len(payloads) // cfg.payload_bytes, most)
        pairs = [(payloads[k * cfg.payload_bytes:(k + 1) * cfg.payload_bytes], expected[k * reply:(k + 1) * reply])
                 for k in range(n)]
    out = bytearray()
    for request, reply in pairs:
        out += len(request).to_bytes(4, "little") + len(reply).to_bytes(4, "little")
        out += request.ljust(limit, b"\0") + reply.ljust(limit, b"\0")
    return bytes(out)


def _check(rc: int, what: str) -> None:
    if rc:
        ffi, lib = backend()
        raise from_status(rc, f"{what}: {ffi.string(lib.bl_fpga_error()).decode(errors='replace')}")


def _sw_loop(cfg: BenchConfig, session: Any, table: PayloadTable | None, progress: Progress) -> dict[str, Any]:
    ffi, lib = backend()
    runner = RoundRunner(cfg)
    if table is not None:
        runner.set_table(*table)
    cycles = np.zeros(cfg.rounds, dtype=np.uint64)
    host = np.zeros(cfg.rounds, dtype=np.uint64)
    key = session.key.encode()
    _check(lib.bl_fpga_record_cycles(key, ffi.cast("uint64_t *", cycles.ctypes.data), cycles.size), "record cycles")
    try:
        done = 0
        while done < cfg.rounds:
            n = min(SW_BLOCK, cfg.rounds - done)
            runner.framework(session, done, host[done:done + n])
            done += n
            progress.update(done)
        recorded = int(lib.bl_fpga_recorded_cycles(key))
    finally:
        lib.bl_fpga_record_cycles(key, ffi.NULL, 0)
    if recorded < cfg.rounds and runner.lost == 0:
        raise BacklineError(f"the engine recorded {recorded:,} RTTs for {cfg.rounds:,} rounds: "
                            f"{ffi.string(lib.bl_fpga_error()).decode(errors='replace')}")
    n = min(recorded, cfg.rounds)
    return {"round0_cycles": int(cycles[0]), "cycles": cycles[1:n], "host_ns": host[1:], "round0_ns": int(host[0]),
            "lost": runner.lost, "mismatched": runner.mismatched}


def _hw_loop(cfg: BenchConfig, session: Any, table: PayloadTable | None, out_bytes: int,
             progress: Progress) -> dict[str, Any]:
    ffi, lib = backend()
    h = hwhs()
    entries = syndrome_table(cfg, table, out_bytes)
    p = ffi.new("bl_fpga_paced *")
    buf = ffi.new("uint8_t[]", entries)
    p.table, p.table_bytes = buf, len(entries)
    if cfg.cadence == "b2b":
        p.freq, p.span = 0, 0
    else:
        p.freq, p.span = cfg.gap_ns * h.HWHS_CLOCK_HZ // 10**9, cfg.gap_span
    p.seed, p.count, p.decoder_id = cfg.seed, cfg.rounds, cfg.decoder_id
    worst_gap_s = (p.freq + p.span) / h.HWHS_CLOCK_HZ
    p.timeout_ms = int(1000 * (60 + cfg.rounds * (worst_gap_s + 0.05)))
    trace = np.zeros(min(cfg.rounds, h.HWHS_TRACE_ENTRIES), dtype=np.uint16)
    r = ffi.new("bl_fpga_paced_result *")
    progress.note(f"  the engine's pacer issues {cfg.rounds:,} rounds ...")
    rc = lib.bl_fpga_paced_run(session.key.encode(), p, r, ffi.cast("uint16_t *", trace.ctypes.data), trace.size)
    if rc and r.rounds == 0:
        _check(rc, "paced run")
    got = min(int(r.trace_cnt), trace.size)
    if got < 2:
        _check(rc or -3, f"paced run: the engine completed {int(r.rounds)} rounds")
    kept = trace[:got]
    return {"round0_cycles": int(kept[0]), "cycles": kept[1:].astype(np.uint64), "host_ns": None, "round0_ns": None,
            "lost": cfg.rounds - int(r.rounds), "mismatched": int(r.demo_err), "demo_err": int(r.demo_err),
            "trace_cnt": int(r.trace_cnt), "trace_full": bool(r.trace_full),
            "trace_saturated": bool(r.trace_saturated), "saturated_entries": int((kept == 0xFFFF).sum())}


def run(cfg: BenchConfig, *, function: CoprocessorFunction, table: PayloadTable | None, out_bytes: int,
        init_args: dict[str, Any], progress: Progress) -> EngineBench:
    """The FPGA controller's bench (Transport.controller_bench of backline-transport-fpga: a ControllerBench)."""
    if cfg.driver != "native":
        raise BacklineError(f"--driver {cfg.driver}: the FPGA controller's rounds are kicked by its driver; leave "
                            "--driver out")
    model_args = {MODEL_KEYS[k]: v for k, v in cfg.transport_args.items() if k in MODEL_KEYS}
    runs_in = cfg.runs_in or "process"
    cop_args = dict(init_args)
    if cfg.coprocessor_cpu is not None:
        cop_args["cpu"] = cfg.coprocessor_cpu
    endpoint = Endpoint(host=cfg.host, port=free_port(cfg.host))
    with contextlib.ExitStack() as stack:
        model = stack.enter_context(EngineModel(device=str(model_args.get("device", "")),
                                                ib_port=int(model_args.get("ib_port", 0)),
                                                gid_index=int(model_args.get("gid_index", -1))))
        name = f"bench-{os.getpid()}"
        placement = Placement(
            controller=Controller(name="bench-controller", hardware="fpga", init_args={"window": model.window}),
            coprocessors=[Coprocessor(name=name, coprocessor_fn=function, runs_in=runs_in, init_args=cop_args,
                                      endpoint=endpoint)],
            transport=cfg.transport,
        )
        cfg.runs_in = runs_in
        old_affinity = os.sched_getaffinity(0)
        if cfg.controller_cpu is not None:
            os.sched_setaffinity(0, {cfg.controller_cpu})
        try:
            with deploy(placement, in_bytes=cfg.payload_bytes, out_bytes=out_bytes) as d:
                session = d.session(name)
                got = (_sw_loop(cfg, session, table, progress) if cfg.loop == "sw"
                       else _hw_loop(cfg, session, table, out_bytes, progress))
        finally:
            os.sched_setaffinity(0, old_affinity)
        with WindowView(model.window) as view:
            device = view.device()
    return EngineBench(cfg=cfg, window=model.window, device=device, **got)

