"""`backline bench`: round-trip latency of the framework against a bare floor, in one run.

Rounds are issued from native code (``bl_bench_rounds``) or, with ``driver="python"``,
from a Python loop through :meth:`Session.round_into`. The floor is a minimal native
shared-memory ping-pong between the same two CPUs (``bl_bench_floor``), or the transport's
own bare floor where its Transport record has ``bench_floor`` (rdma: RDMA WRITEs between two
processes). Framework and floor run in interleaved blocks so both see the same machine
state, and the report gives their ratio: absolute numbers on a shared VM move between
runs; ratios do not.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from typing import Any, TextIO

import numpy as np

from .. import _plugins as plugins
from .._abi import ffi, last_error, lib
from .._coprocessor_function import CoprocessorFunction
from .._deployment import connect_controller, deploy
from .._errors import BacklineError, from_status
from .._placement import Controller, Coprocessor, Endpoint, Placement
from .._process import exit_on_stop_signals, free_port, pause, resume
from .._resolution import resolve
from .code import load_code
from .config import PAYLOAD_TABLE, PEER_KEY, BenchConfig, ring_geometry
from .payloads import PayloadTable, index_payload, payload_table
from .progress import Progress
from .protocols import BenchFloor, ControllerBench, ControllerBenchResult
from .report import SHM_FLOOR_LABEL, BenchResult, Series


class RoundRunner:
    """Issues a run's rounds (the native driver, the Python loop, a driver plugin, the shm floor) and
    counts lost and mismatched replies; holds the native buffers and the bench configuration struct."""

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
        rc = lib.bl_bench_floor(self.c, cpu, ffi.from_buffer("uint64_t[]", out), self.res)
        if rc < 0 and not self.res.lost:  # refused outright (a payload it cannot carry, no memory, no thread)
            raise from_status(rc, f"the floor ping-pong (bl_bench_floor) could not run {self.cfg.payload_bytes}-byte "
                                  "payloads")
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
        payloads = self.payloads or [index_payload(first + k, cfg.payload_bytes) for k in range(out.size)]
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

    def use_plugin_driver(self, key: str, table: PayloadTable | None) -> None:
        """Rounds from a driver plugin (e.g. compiled code); replies are checked here."""
        cfg = self.cfg
        if cfg.cadence != "b2b":
            raise BacklineError(f"--driver {cfg.driver} issues back-to-back rounds only; use --cadence b2b")
        if table is None:  # echo: a table of index payloads, each echoed
            payloads = b"".join(index_payload(i, cfg.payload_bytes) for i in range(PAYLOAD_TABLE))
            table = PayloadTable(payloads, payloads, cfg.payload_bytes)
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


def run(cfg: BenchConfig, stream: TextIO | None = None) -> BenchResult | ControllerBenchResult:
    """Run the benchmark described by ``cfg``; its progress goes to ``stream`` (with ``cfg.progress``).

    A CPU controller's run gives a :class:`BenchResult`; another controller's own bench
    (``Transport.controller_bench``) gives what it returns."""
    cfg.validate()
    # SIGTERM/SIGHUP unwind the run like Ctrl-C: the coprocessor, its executor and its segment go with it
    exit_on_stop_signals()
    decoder = plugins.get("decoder", cfg.coprocessor_fn)
    # the decoder's declared parameters, read by type and checked against its schema (one-line errors)
    checked = decoder.check_params(cfg.decoder_params)
    params: dict[str, Any] = {key: checked[key] for key in cfg.decoder_params}
    code = load_code(cfg.code) if cfg.code is not None else None
    if code is not None:
        params.update(hx=code[0], hz=code[1])
    try:
        inspect.signature(decoder.build).bind(**params)
    except TypeError as exc:
        given = ", ".join(sorted(params)) or "none"
        raise BacklineError(f"decoder {cfg.coprocessor_fn!r} does not take these parameters ({given}): {exc}"
                            + ("; --code needs a decoder built from Hx and Hz, such as bposd" if cfg.code else "")) from None
    function = decoder.build(**params)
    if cfg.decoder_id not in function.decoder_ids:
        raise BacklineError(f"--decoder-id {cfg.decoder_id}: {cfg.coprocessor_fn} serves decoder ids "
                            f"{', '.join(map(str, function.decoder_ids))}")
    table = payload_table(cfg, decoder, function, params)
    out_bytes = table.reply_bytes if table is not None else cfg.payload_bytes
    idle_spin_us = 200 if cfg.cadence == "b2b" else max(200, 4 * (cfg.gap_ns + cfg.gap_span) // 1000)
    init_args: dict[str, Any] = {"idle_spin_us": idle_spin_us}
    ring = ring_geometry(cfg.payload_bytes, out_bytes)
    if ring["slot_bytes"] != lib.BL_DEFAULT_SLOT_BYTES:  # messages past the default slot: slots that fit them
        init_args.update(ring)
    part = plugins.transport_backend(cfg.transport, "cpu", "coprocessor")
    unknown = sorted(set(cfg.transport_args) - set(part.init_args))
    if unknown:
        keys = ", ".join(sorted(part.init_args)) or "none"
        raise BacklineError(f"--transport-arg {unknown[0]}: not a key of transport {cfg.transport!r} (its keys: "
                            f"{keys})")
    init_args.update(cfg.transport_args)
    controller_bench: ControllerBench | None = None
    if cfg.controller_hardware != "cpu":
        ctl = plugins.transport_backend(cfg.transport, cfg.controller_hardware, "controller")
        if ctl.controller_bench is None:
            raise BacklineError(f"--controller-hardware {cfg.controller_hardware}: {ctl.distribution or 'its plugin'} "
                                f"has no bench of its own for a {cfg.controller_hardware} controller of transport "
                                f"{cfg.transport!r}")
        if cfg.peer is not None:
            raise BacklineError(f"--peer: a {cfg.controller_hardware} controller's bench starts its coprocessor here; "
                                "leave --peer out")
        controller_bench = ctl.controller_bench
    progress = Progress(stream if cfg.progress else None, cfg.rounds)
    try:
        if controller_bench is not None:
            return controller_bench(cfg, function=function, table=table, out_bytes=out_bytes,
                                        init_args=init_args, progress=progress)
        if cfg.peer is not None:
            return _run_with_peer(cfg, part, function, init_args, table, out_bytes, progress)
        return _run_here(cfg, part, function, init_args, table, out_bytes, progress)
    finally:
        progress.close()


def _run_here(cfg: BenchConfig, part: Any, function: CoprocessorFunction, init_args: dict[str, Any],
              table: PayloadTable | None, out_bytes: int, progress: Progress) -> BenchResult:
    """The bench with its coprocessor and floor on this host, each paused while the other runs."""
    runs_in = cfg.runs_in or part.runs_in[0]
    # Only keys the transport declares: pinning is a transport's own setting, not the core's.
    if cfg.coprocessor_cpu is not None and "cpu" in part.init_args and runs_in != "controller-thread":
        init_args["cpu"] = cfg.coprocessor_cpu
    endpoint = Endpoint(host=cfg.host, port=_free_port(cfg.host)) if part.needs_endpoint else None
    with contextlib.ExitStack() as stack:
        executor = stack.enter_context(local_executor()) if runs_in == "executor" else None
        name = f"bench-{os.getpid()}"
        placement = Placement(
            controller=Controller(name="bench-controller", init_args=dict(cfg.transport_args)),
            coprocessors=[Coprocessor(name=name, coprocessor_fn=function, runs_in=runs_in, executor=executor,
                                      init_args=init_args, endpoint=endpoint)],
            transport=cfg.transport,
        )
        cfg.runs_in = resolve(placement).coprocessor(name).runs_in
        floor = None
        if part.bench_floor is not None:
            # Started before this thread is pinned (its responder must not inherit the controller's
            # CPU) and paused until its first block; the ExitStack stops it on every path.
            floor = _checked_floor(cfg, stack.enter_context(part.bench_floor(cfg, dict(init_args))))
            floor.pause()
        old_affinity = os.sched_getaffinity(0)
        if cfg.controller_cpu is not None:
            os.sched_setaffinity(0, {cfg.controller_cpu})  # this thread only: it issues every round
        try:
            with deploy(placement, in_bytes=cfg.payload_bytes, out_bytes=out_bytes) as d:
                # A coprocessor that spins when idle would hold the floor's CPU: stopped during floor blocks.
                spinner = _StoppedProcess(d.processes[name].pid) if part.idle == "spins" and name in d.processes \
                    else None
                try:
                    return _measure(cfg, d.session(), progress, table, floor=floor, spinner=spinner)
                finally:
                    if spinner is not None:
                        spinner.resume()  # a stopped process takes no SIGTERM: it must run to stop cleanly
        finally:
            os.sched_setaffinity(0, old_affinity)
    raise AssertionError("unreachable")  # the with block returns or raises


def _run_with_peer(cfg: BenchConfig, part: Any, function: CoprocessorFunction, init_args: dict[str, Any],
                   table: PayloadTable | None, out_bytes: int, progress: Progress) -> BenchResult:
    """The bench against a peer on another host: its coprocessor (key PEER_KEY) and its floor
    responder run there, each on a CPU of its own, so nothing is paused between blocks."""
    if not part.needs_endpoint or "process" not in part.runs_in:
        raise BacklineError(f"--peer: transport {cfg.transport!r} does not join processes on two hosts; --peer needs "
                            "one whose nodes have an Endpoint, such as rdma")
    host, port = cfg.peer_address()
    placement = Placement(
        controller=Controller(name="bench-controller", init_args=dict(cfg.transport_args)),
        coprocessors=[Coprocessor(name=PEER_KEY, coprocessor_fn=function, runs_in="process", init_args=init_args,
                                  endpoint=Endpoint(host=host, port=port))],
        transport=cfg.transport,
    )
    cfg.runs_in = "process"
    with contextlib.ExitStack() as stack:
        floor = _checked_floor(cfg, stack.enter_context(part.bench_floor(cfg, dict(init_args)))) \
            if part.bench_floor is not None else None
        old_affinity = os.sched_getaffinity(0)
        if cfg.controller_cpu is not None:
            os.sched_setaffinity(0, {cfg.controller_cpu})
        try:
            session = connect_controller(placement, PEER_KEY, in_bytes=cfg.payload_bytes, out_bytes=out_bytes)
            stack.callback(session.destroy)
            return _measure(cfg, session, progress, table, floor=floor)
        finally:
            os.sched_setaffinity(0, old_affinity)
    raise AssertionError("unreachable")  # the with block returns or raises


class _StoppedProcess:
    """A coprocessor process that spins when idle: paused (SIGSTOP) while the floor runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.paused = pid, False

    def pause(self) -> None:
        pause(self.pid)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            resume(self.pid)
            self.paused = False


def local_executor() -> Any:
    """An executor on this machine from the installed executor plugin (``--runs-in executor``); a
    context manager."""
    names = plugins.names("executor")
    if not names:
        raise BacklineError("--runs-in executor needs an executor plugin: pip install backline-executor-orc")
    return plugins.get("executor", names[0]).load().local_executor()


def _free_port(host: str) -> int:
    try:
        return free_port(host)
    except BacklineError as exc:  # the address is the option's
        raise BacklineError(f"--host {exc}") from None


def _checked_floor(cfg: BenchConfig, floor: Any) -> BenchFloor:
    if not isinstance(floor, BenchFloor):
        members = set(BenchFloor.__annotations__) | {n for n, v in vars(BenchFloor).items()
                                                     if callable(v) and not n.startswith("_")}
        missing = sorted(m for m in members if not hasattr(floor, m))
        raise BacklineError(f"transport {cfg.transport!r}: its bench_floor gave a {type(floor).__name__} without "
                            f"{', '.join(missing)} (Transport.bench_floor, docs/plugins.md)")
    return floor


def _measure(cfg: BenchConfig, session: Any, progress: Progress,
             table: PayloadTable | None, floor: BenchFloor | None = None,
             spinner: _StoppedProcess | None = None) -> BenchResult:
    """Round 0, then interleaved blocks of framework and floor rounds.

    ``floor`` is a transport's own floor (Transport.bench_floor's value; paused on entry), else
    the shared-memory one runs. ``spinner``, a coprocessor that spins when idle, is stopped
    during the floor's blocks and continued before the framework's (their warm-up rounds
    absorb its wake-up); the floor's responder is paused during the framework's. The caller
    continues the spinner afterwards, whatever happened."""
    runner = RoundRunner(cfg)
    run_floor = floor.run if floor is not None else runner.floor
    if table is not None:
        runner.set_table(*table)
    if cfg.driver not in ("native", "python"):
        runner.use_plugin_driver(session.key, table)
    steady = cfg.rounds - 1
    r0 = np.zeros(1, dtype=np.uint64)
    runner.framework(session, 0, r0)
    framework = np.zeros(steady, dtype=np.uint64)
    floor_ns = np.zeros(steady, dtype=np.uint64)
    native = np.zeros(steady, dtype=np.uint64) if cfg.driver != "native" else None
    warm = np.zeros(max(cfg.warmup, 1), dtype=np.uint64)
    done, first = 0, 1
    while done < steady:
        n = min(cfg.block, steady - done)
        sl = slice(done, done + n)
        # Each block starts with unrecorded warm-up rounds, the same for every path:
        # the idle coprocessor sleeps (or is stopped) between blocks so the floor has its CPU to itself.
        if spinner is not None:
            spinner.resume()
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
        if spinner is not None:
            spinner.pause()
        else:
            time.sleep(0.002)  # let the poller go idle before the floor borrows its CPU
        if floor is not None:
            floor.resume()
        if cfg.warmup:
            run_floor(first, warm[:cfg.warmup])
        run_floor(first, floor_ns[sl])
        if floor is not None:
            floor.pause()
        done += n
        first += n
        progress.update(done + 1)  # round 0 included
    # Another tool's figures for the same path, with the coprocessor and the responder still stopped.
    reference = floor.reference() if floor is not None else None
    return BenchResult(
        config=cfg,
        round0_ns=int(r0[0]),
        framework=Series(f"{cfg.transport}/{cfg.runs_in} ({cfg.driver} driver)", framework),
        floor=Series(floor.label if floor is not None else SHM_FLOOR_LABEL, floor_ns),
        native=Series(f"{cfg.transport}/{cfg.runs_in} (native driver)", native) if native is not None else None,
        lost=runner.lost,
        mismatched=runner.mismatched,
        timer_resolution_ns=float(lib.bl_bench_timer_resolution_ns()),
        reference=reference,
        reference_note=floor.reference_note if floor is not None else None,
    )
