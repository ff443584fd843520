"""`backline bench`: round-trip latency of the framework against a bare floor, in one run.

Rounds are issued from native code (``bl_bench_rounds``) or, with ``driver="python"``,
from a Python loop through :meth:`Session.round_into`. The floor is a minimal native
shared-memory ping-pong between the same two CPUs (``bl_bench_floor``). Framework and
floor run in interleaved blocks so both see the same machine state, and the report
gives their ratio: absolute numbers on a shared VM move between runs; ratios do not.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import plugins
from .bound_function import BoundFunction
from .coprocessor_function import CoprocessorFunction
from .deployment import deploy
from .errors import BacklineError, from_status
from .native import ffi, last_error, lib
from .placement import Controller, Coprocessor, Placement
from .resolution import resolve

PERCENTILES = (("p99", 99.0), ("p999", 99.9), ("p9999", 99.99), ("p99999", 99.999))
STEANE_TABLE = (-1, 6, 4, 5, 0, 3, 1, 2)


@dataclass
class BenchConfig:
    """What `backline bench` runs (its command-line options, one to one)."""

    transport: str = "memcpy"
    runs_in: str | None = None  # where the coprocessor runs; None: the transport's default
    coprocessor_fn: str = "echo"
    rounds: int = 1_000_000
    payload_bytes: int = 8
    cadence: str = "b2b"
    gap_ns: int = 2_000
    gap_span: int = 0x3FFF
    seed: int = 1
    controller_cpu: int | None = 0
    coprocessor_cpu: int | None = 1
    driver: str = "native"
    code: str | None = None
    error_rate: float = 0.05
    decoder_id: int = 0
    decoder_params: dict[str, str] = field(default_factory=dict)
    block: int = 50_000
    warmup: int = 16
    progress: bool = False

    def validate(self) -> None:
        if self.rounds < 2:
            raise BacklineError(f"--rounds {self.rounds}: need at least 2 (round 0 plus one steady-state round)")
        if self.cadence not in ("b2b", "random-delayed"):
            raise BacklineError(f"--cadence {self.cadence!r}: choose b2b or random-delayed")
        if self.driver not in ("native", "python"):
            plugins.get("driver", self.driver)  # an unknown name lists the installed drivers
        if self.payload_bytes < 1:
            raise BacklineError(f"--payload-bytes {self.payload_bytes}: must be at least 1")
        if self.code is not None and not 0 < self.error_rate < 1:
            raise BacklineError(f"--error-rate {self.error_rate}: must be between 0 and 1")
        if self.code is None and self.coprocessor_fn == "steane" and self.payload_bytes != 1:
            raise BacklineError("--coprocessor-fn steane takes a 1-byte syndrome: use --payload-bytes 1")
        if self.block < 1 or self.warmup < 0:
            raise BacklineError("--block must be >= 1 and --warmup >= 0")
        if self.seed == 0:
            raise BacklineError("--seed 0 would lock the LFSR at zero; use any other value")
        ncpu = os.cpu_count() or 1
        for name, cpu in (("--controller-cpu", self.controller_cpu), ("--coprocessor-cpu", self.coprocessor_cpu)):
            if cpu is not None and not 0 <= cpu < ncpu:
                raise BacklineError(f"{name} {cpu}: this machine has CPUs 0..{ncpu - 1}")


@dataclass
class Series:
    """Round-trip times of one path, in nanoseconds."""

    name: str
    rtt_ns: np.ndarray

    def stats(self) -> dict[str, float]:
        x = self.rtt_ns
        out = {"rounds": int(x.size), "mean_ns": float(x.mean()), "median_ns": float(np.median(x)),
               "max_ns": float(x.max())}
        for key, q in PERCENTILES:
            out[f"{key}_ns"] = float(np.percentile(x, q))
        return out


@dataclass
class BenchResult:
    config: BenchConfig
    round0_ns: int
    framework: Series
    floor: Series
    native: Series | None = None  # with driver="python": the native driver in the same run
    lost: int = 0
    mismatched: int = 0
    timer_resolution_ns: float = 0.0

    def to_json(self) -> dict[str, Any]:
        steady, floor = self.framework.stats(), self.floor.stats()
        out: dict[str, Any] = {
            "config": self.config.__dict__,
            "rounds": self.config.rounds,
            "round0_ns": self.round0_ns,
            "steady": steady,
            "floor": floor,
            "ratio": {"median": steady["median_ns"] / floor["median_ns"], "p99": steady["p99_ns"] / floor["p99_ns"],
                      "mean": steady["mean_ns"] / floor["mean_ns"]},
            "timer_resolution_ns": self.timer_resolution_ns,
            "lost": self.lost,
            "mismatched": self.mismatched,
        }
        if self.native is not None:
            native = self.native.stats()
            out["native"] = native
            out["driver_adds_median_ns"] = steady["median_ns"] - native["median_ns"]
            out["driver_to_native_median"] = steady["median_ns"] / native["median_ns"]
        return out


def _expected_steane() -> tuple[bytes, bytes]:
    """All 8 syndromes and their corrections, computed from the Steane Hx (not the table)."""
    hx = np.array([[1, 1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 1, 0], [0, 0, 1, 1, 0, 1, 1]], dtype=np.uint8)
    syndromes, corrections = bytearray(), bytearray()
    for s in range(8):
        bits = np.array([(s >> i) & 1 for i in range(3)], dtype=np.uint8)
        mask = 0
        if bits.any():
            q = next(q for q in range(7) if np.array_equal(hx[:, q], bits))
            mask = 1 << q
        syndromes.append(int(np.packbits(bits, bitorder="little")[0]))
        corrections.append(mask)
    return bytes(syndromes), bytes(corrections)


class _Runner:
    """Holds native buffers and the bench configuration struct."""

    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.c = ffi.new("bl_bench_config *")
        self.c.payload_bytes = cfg.payload_bytes
        self.c.cadence = 0 if cfg.cadence == "b2b" else 1
        self.c.lfsr = cfg.seed
        self.c.gap_base_ns = cfg.gap_ns
        self.c.gap_span_mask = cfg.gap_span
        self.res = ffi.new("bl_bench_result *")
        self.lost = self.mismatched = 0
        self.tables: list[Any] = []
        self.payloads: list[bytes] = []
        self.expected: list[bytes] = []
        self.c.decoder_id = cfg.decoder_id

    def set_table(self, payloads: bytes, expected: bytes, expected_bytes: int) -> None:
        p, e = ffi.new("uint8_t[]", payloads), ffi.new("uint8_t[]", expected)
        self.tables = [p, e]
        self.c.payloads, self.c.expected = p, e
        self.c.n_payloads = len(payloads) // self.cfg.payload_bytes
        self.c.expected_bytes = expected_bytes
        n = self.c.n_payloads
        self.payloads = [payloads[i * self.cfg.payload_bytes:(i + 1) * self.cfg.payload_bytes] for i in range(n)]
        self.expected = [expected[i * expected_bytes:(i + 1) * expected_bytes] for i in range(n)]

    def framework(self, session: Any, first: int, out: np.ndarray) -> None:
        self.c.first_round, self.c.rounds = first, out.size
        lib.bl_bench_rounds(session._s, self.c, ffi.from_buffer("uint64_t[]", out), self.res)
        self._account(out.size)

    def floor(self, first: int, out: np.ndarray) -> None:
        self.c.first_round, self.c.rounds = first, out.size
        cpu = -1 if self.cfg.coprocessor_cpu is None else self.cfg.coprocessor_cpu
        lib.bl_bench_floor(self.c, cpu, ffi.from_buffer("uint64_t[]", out), self.res)
        if self.res.lost:
            raise BacklineError("the floor ping-pong timed out: is the responder CPU available?")

    def _account(self, n: int) -> None:
        self.lost += self.res.lost
        self.mismatched += self.res.mismatched
        if self.res.first_error:
            err = from_status(self.res.first_error, last_error())
            if self.res.lost == n:
                raise err

    def python(self, session: Any, first: int, out: np.ndarray) -> None:
        """The same rounds from a Python loop through the session API."""
        cfg = self.cfg
        gaps = self._gaps(out.size) if cfg.cadence == "random-delayed" else None
        reply = bytearray(max(cfg.payload_bytes, 1))
        payloads = self.payloads or [_index_payload(first + k, cfg.payload_bytes) for k in range(out.size)]
        n_pay = len(payloads)
        buf = bytearray(cfg.payload_bytes)  # refilled each round, as a syndrome buffer would be
        round_into, clock = session.round_into, time.perf_counter_ns
        times = [0] * out.size
        for k in range(out.size):
            i = first + k
            payload = payloads[i % n_pay] if self.payloads else payloads[k]
            buf[:] = payload
            if gaps is not None:
                until = clock() + gaps[k]
                while clock() < until:
                    pass
            t0 = clock()
            n = round_into(buf, reply, cfg.decoder_id)
            times[k] = clock() - t0
            want = self.expected[i % n_pay] if self.expected else payload
            if reply[:n] != want:
                self.mismatched += 1
        out[:] = times

    def use_plugin_driver(self, key: str, table: tuple[bytes, bytes, int] | None) -> None:
        """Rounds from a driver plugin (e.g. compiled code); replies are checked here."""
        cfg = self.cfg
        if cfg.cadence != "b2b":
            raise BacklineError(f"--driver {cfg.driver} issues back-to-back rounds only; use --cadence b2b")
        if table is None:  # echo: a table of index payloads, each echoed
            payloads = b"".join(_index_payload(i, cfg.payload_bytes) for i in range(PAYLOAD_TABLE))
            table = (payloads, payloads, cfg.payload_bytes)
        self._plugin_table = table
        make = plugins.get("driver", cfg.driver).load()
        self._plugin_run = make(key, cfg.decoder_id, table)

    def plugin(self, first: int, out: np.ndarray) -> None:
        payloads, expected, reply_bytes = self._plugin_table
        replies = np.zeros((out.size, reply_bytes), dtype=np.uint8)
        status = self._plugin_run(first, out, replies)
        if status:
            raise from_status(status, last_error())
        n = len(expected) // reply_bytes
        want = np.frombuffer(expected, dtype=np.uint8).reshape(n, reply_bytes)
        rows = (first + np.arange(out.size)) % n
        self.mismatched += int((replies != want[rows]).any(axis=1).sum())

    def _gaps(self, n: int) -> list[int]:
        gaps = []
        for _ in range(n):
            self.c.lfsr = lib.bl_lfsr_next(self.c.lfsr)
            gaps.append(self.cfg.gap_ns + (self.c.lfsr & self.cfg.gap_span))
        return gaps


def _index_payload(i: int, n: int) -> bytes:
    """The payload bl_bench_rounds sends for round i (see bench.c payload_for)."""
    return bytes(((i >> (8 * (b % 8))) & 0xFF) ^ (b // 8) & 0xFF for b in range(n))


PAYLOAD_TABLE = 1024  # distinct requests cycled through when replies must be precomputed


def _payloads(cfg: BenchConfig, function: CoprocessorFunction) -> tuple[bytes, bytes, int] | None:
    """Requests and the replies the function must give them; None for echo (index payloads).

    Steane's replies come from its Hx, not from the table under test; any other function's
    come from calling it locally (BoundFunction), so the run checks what the transport
    delivered, not the decoder itself."""
    rng = np.random.default_rng(cfg.seed)
    if cfg.code is not None:
        with np.load(cfg.code) as data:
            h = np.asarray(data["Hx" if cfg.decoder_id == 0 else "Hz"], dtype=np.uint8)
        errors = (rng.random((PAYLOAD_TABLE, h.shape[1])) < cfg.error_rate).astype(np.uint8)
        syndromes = (errors @ h.T) % 2
        requests = [np.packbits(row, bitorder="little").tobytes() for row in syndromes.astype(np.uint8)]
    elif cfg.coprocessor_fn == "echo":
        return None
    elif cfg.coprocessor_fn == "steane":
        return (*_expected_steane(), 1)
    else:
        requests = [rng.integers(0, 256, cfg.payload_bytes, dtype=np.uint8).tobytes() for _ in range(PAYLOAD_TABLE)]
    with BoundFunction(function) as local:
        replies = [local(cfg.decoder_id, r) for r in requests]
    sizes = {len(r) for r in replies}
    if len(sizes) != 1:
        raise BacklineError(f"{function.name} gives replies of several sizes {sorted(sizes)}; the bench needs one size")
    return b"".join(requests), b"".join(replies), sizes.pop()


def run(cfg: BenchConfig, report: Callable[[str], None] = lambda s: None) -> BenchResult:
    """Run the benchmark described by ``cfg``."""
    cfg.validate()
    decoder = plugins.get("decoder", cfg.coprocessor_fn)
    params: dict[str, Any] = dict(cfg.decoder_params)
    if cfg.code is not None:
        with np.load(cfg.code) as data:
            params.update(hx=np.asarray(data["Hx"], dtype=np.uint8), hz=np.asarray(data["Hz"], dtype=np.uint8))
    try:
        inspect.signature(decoder.build).bind(**params)
    except TypeError as exc:
        given = ", ".join(sorted(params)) or "none"
        raise BacklineError(f"decoder {cfg.coprocessor_fn!r} does not take these parameters ({given}): {exc}"
                            + ("; --code needs a decoder built from Hx and Hz, such as bposd" if cfg.code else "")) from None
    function = decoder.build(**params)
    table = _payloads(cfg, function)
    if table is not None and cfg.code is not None:
        cfg.payload_bytes = len(table[0]) // PAYLOAD_TABLE
    out_bytes = table[2] if table is not None else cfg.payload_bytes
    idle_spin_us = 200 if cfg.cadence == "b2b" else max(200, 4 * (cfg.gap_ns + cfg.gap_span) // 1000)
    init_args: dict[str, Any] = {"idle_spin_us": idle_spin_us}
    part = plugins.transport_backend(cfg.transport, "cpu", "coprocessor")
    runs_in = cfg.runs_in or part.runs_in[0]
    # Only keys the transport declares: pinning is a transport's own setting, not the core's.
    if cfg.coprocessor_cpu is not None and "cpu" in part.init_args and runs_in != "controller-thread":
        init_args["cpu"] = cfg.coprocessor_cpu
    placement = Placement(
        controller=Controller(name="bench-controller"),
        coprocessors=[Coprocessor(name=f"bench-{os.getpid()}", coprocessor_fn=function, runs_in=runs_in,
                                  init_args=init_args)],
        transport=cfg.transport,
    )
    cfg.runs_in = resolve(placement).coprocessor(placement.coprocessors[0].name).runs_in
    old_affinity = os.sched_getaffinity(0)
    if cfg.controller_cpu is not None:
        os.sched_setaffinity(0, {cfg.controller_cpu})  # this thread only: it issues every round
    try:
        with deploy(placement, in_bytes=cfg.payload_bytes, out_bytes=out_bytes) as d:
            return _measure(cfg, d.session(), report, table)
    finally:
        os.sched_setaffinity(0, old_affinity)


def _measure(cfg: BenchConfig, session: Any, report: Callable[[str], None],
             table: tuple[bytes, bytes, int] | None) -> BenchResult:
    runner = _Runner(cfg)
    if table is not None:
        runner.set_table(*table)
    if cfg.driver not in ("native", "python"):
        runner.use_plugin_driver(session.key, table)
    steady = cfg.rounds - 1
    r0 = np.zeros(1, dtype=np.uint64)
    runner.framework(session, 0, r0)
    framework = np.zeros(steady, dtype=np.uint64)
    floor = np.zeros(steady, dtype=np.uint64)
    native = np.zeros(steady, dtype=np.uint64) if cfg.driver != "native" else None
    warm = np.zeros(max(cfg.warmup, 1), dtype=np.uint64)
    done, first = 0, 1
    t_start = time.monotonic()
    while done < steady:
        n = min(cfg.block, steady - done)
        sl = slice(done, done + n)
        # Each block starts with unrecorded warm-up rounds, the same for every path:
        # the idle coprocessor sleeps between blocks so the floor has its CPU to itself.
        if cfg.warmup:
            runner.framework(session, first, warm[:cfg.warmup])
        if cfg.driver == "python":
            runner.python(session, first, framework[sl])
            runner.framework(session, first, native[sl])
        elif cfg.driver != "native":
            runner.plugin(first, framework[sl])
            runner.framework(session, first, native[sl])
        else:
            runner.framework(session, first, framework[sl])
        time.sleep(0.002)  # let the poller go idle before the floor borrows its CPU
        if cfg.warmup:
            runner.floor(first, warm[:cfg.warmup])
        runner.floor(first, floor[sl])
        done += n
        first += n
        if cfg.progress:
            frac = done / steady
            bar = "#" * int(30 * frac)
            eta = (time.monotonic() - t_start) * (1 - frac) / frac
            report(f"\r[{bar:<30}] {100 * frac:5.1f}%  {done + 1:,}/{cfg.rounds:,} rounds  eta {eta:4.0f} s")
    if cfg.progress:
        report("\n")
    return BenchResult(
        config=cfg,
        round0_ns=int(r0[0]),
        framework=Series(f"{cfg.transport}/{cfg.runs_in} ({cfg.driver} driver)", framework),
        floor=Series("floor (bare shared-memory ping-pong)", floor),
        native=Series(f"{cfg.transport}/{cfg.runs_in} (native driver)", native) if native is not None else None,
        lost=runner.lost,
        mismatched=runner.mismatched,
        timer_resolution_ns=float(lib.bl_bench_timer_resolution_ns()),
    )


def format_report(result: BenchResult) -> str:
    """The human-readable report `backline bench` prints."""
    cfg = result.config
    rows = [result.framework] + ([result.native] if result.native is not None else []) + [result.floor]
    lines = [
        f"backline bench: transport={cfg.transport} runs_in={cfg.runs_in} fn={cfg.coprocessor_fn} "
        + (f"code={os.path.basename(cfg.code)} p={cfg.error_rate} decoder_id={cfg.decoder_id} " if cfg.code else "")
        + f"driver={cfg.driver} cadence={cfg.cadence} payload={cfg.payload_bytes} B rounds={cfg.rounds:,} "
        f"cpus={cfg.controller_cpu}->{cfg.coprocessor_cpu}",
        f"round 0: {result.round0_ns / 1000:.3f} us (set-up effects; excluded below)",
        f"steady state ({cfg.rounds - 1:,} rounds, us):",
        f"  {'path':<44}{'mean':>10}{'median':>10}{'P99':>10}{'P99.9':>10}{'P99.99':>10}{'P99.999':>10}{'max':>11}",
    ]
    for series in rows:
        s = series.stats()
        lines.append(
            f"  {series.name:<44}{s['mean_ns'] / 1e3:10.3f}{s['median_ns'] / 1e3:10.3f}{s['p99_ns'] / 1e3:10.3f}"
            f"{s['p999_ns'] / 1e3:10.3f}{s['p9999_ns'] / 1e3:10.3f}{s['p99999_ns'] / 1e3:10.3f}{s['max_ns'] / 1e3:11.3f}"
        )
    data = result.to_json()
    lines.append(f"framework/floor: median {data['ratio']['median']:.3f}x, P99 {data['ratio']['p99']:.3f}x, "
                 f"mean {data['ratio']['mean']:.3f}x (timer resolution {result.timer_resolution_ns:.1f} ns)")
    if "driver_adds_median_ns" in data:
        lines.append(f"{cfg.driver} driver adds {data['driver_adds_median_ns'] / 1e3:+.3f} us to the median over the "
                     f"native driver ({data['driver_to_native_median']:.3f}x)")
    lines.append(f"lost: {result.lost}  mismatched replies: {result.mismatched}  (every reply checked)")
    return "\n".join(lines)


def write_json(result: BenchResult, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(result.to_json(), fh, indent=2)


def plot(result: BenchResult, path: str) -> None:
    """Time series and CCDF of framework and floor (as the paper's Fig. 6 and Fig. 10)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BacklineError("--plot needs matplotlib: pip install 'backline-core[plot]'") from exc
    rows = [result.framework] + ([result.native] if result.native is not None else []) + [result.floor]
    fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(12, 4.5))
    for series in rows:
        us = series.rtt_ns / 1e3
        ax_t.plot(np.arange(1, us.size + 1), us, ",", alpha=0.5, label=series.name)
        xs = np.sort(us)
        ccdf = 1.0 - np.arange(xs.size) / xs.size
        ax_c.step(xs, ccdf, where="post", label=series.name)
    ax_t.set(xlabel="round", ylabel="round trip (us)", title="steady-state round trips", yscale="log")
    ax_c.set(xlabel="round trip (us)", ylabel="P(RTT > x)", title="CCDF", xscale="log", yscale="log")
    for ax in (ax_t, ax_c):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_report(result: BenchResult, json_path: str | None, plot_path: str | None) -> str:
    text = format_report(result)
    if json_path:
        write_json(result, json_path)
    if plot_path:
        plot(result, plot_path)
    return text


def stderr_report(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
