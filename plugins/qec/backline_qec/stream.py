"""``stream()``: a circuit's shots fed round by round to a decoder on a placement's coprocessor.

Python prepares the shots, the plan and the placement; the controller's loop over every round
of every shot is native (stream.c's ``qs_drive``), so nothing in Python runs per round. The
same loop also runs the engine in this thread without a transport (``reference=True``): the
difference is what the placement costs per window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stim

from backline_core import (BacklineError, Controller, Coprocessor, Endpoint, InvalidArgumentError, Placement, deploy,
                           get_library, plugins)
from backline_core.sdk import free_port, host_local_name, local_executor
from .engine import Engine, encode_plan, engine_function, window_function
from .native import ffi, lib
from .parallel import ParallelStreamResult, dispatch
from .pool import PoolStreamResult, dispatch_pool
from .report import LogicalErrorRate, quantiles
from .report import wilson as _wilson  # noqa: F401 -- pool.py and the tests take it from here
from .tiered import NOT_CONVERGED, TieredStreamResult, TieredWindowDecoder, dispatch_tiered, parse_escalate_when
from .windows import ParallelWindowDecoder, SlidingWindowDecoder

#: the name of the coprocessor that decodes, where stream() makes the placement
COPROCESSOR = "decoder"


def worker_name(i: int) -> str:
    """The name of parallel-window or pool worker ``i`` when stream() places the workers."""
    return host_local_name(f"worker-{i}")
#: where a networked transport's coprocessor listens when stream() makes the placement
LOOPBACK = "127.0.0.1"
#: the shortest cycle busy-wait pacing on CLOCK_MONOTONIC holds here (a clock read costs tens of ns)
MIN_PACED_CYCLE_NS = 100


@dataclass
class StreamResult(LogicalErrorRate):
    """What a stream measured (docs/streaming.md, "What it reports"); :meth:`to_json` gives the report."""

    shots: int
    rounds: int
    windows_per_shot: int
    predictions: np.ndarray  # (shots, observables) 0/1
    logical_errors: int | None
    rtt_ns: np.ndarray  # (shots, rounds): each round's round trip
    lag_ns: np.ndarray  # (shots, rounds): how late each round was sent after it was available
    reaction_ns: np.ndarray  # (shots,)
    window_rounds: np.ndarray  # the round that completes each window
    commit_rounds: np.ndarray  # rounds each window commits
    cycle_ns: int
    placement: dict[str, Any]
    decoder: dict[str, Any]
    reference_rtt_ns: np.ndarray | None = None
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def window_latency_ns(self) -> np.ndarray:
        """Each window's round trip as the controller sees it, (shots, windows)."""
        return self.rtt_ns[:, self.window_rounds]

    def deadline_misses(self) -> int:
        """Windows whose decode took longer than their commit rounds take to arrive (cycle > 0)."""
        if not self.cycle_ns:
            return 0
        return int((self.window_latency_ns > self.commit_rounds[None, :] * self.cycle_ns).sum())

    def achieved_cycle_ns(self) -> float | None:
        """The mean interval between rounds sent (paced runs): above the cycle when the backlog grew,
        or when the cycle is shorter than the pacing clock can hold."""
        if not self.cycle_ns or self.rtt_ns.size < 2:
            return None
        lag = self.lag_ns.ravel().astype(np.float64)
        return self.cycle_ns + float(lag[-1] - lag[0]) / (lag.size - 1)

    def sustainable_cycle_ns(self) -> float:
        """The shortest cycle at which rounds are served as fast as they come, on average: a shot's
        mean service time over its rounds (the backlog of a faster stream grows without bound)."""
        return float(self.rtt_ns.sum(axis=1).mean() / self.rounds)

    def ler_at_deadline(self, points: int = 24) -> list[list[float]]:
        """[t_ns, P(reaction > t or a logical error)] on a log grid of t."""
        wrong = np.zeros(self.shots, bool) if self.logical_errors is None else self._wrong
        lo, hi = max(float(self.reaction_ns.min()), 1.0), max(float(self.reaction_ns.max()), 2.0)
        grid = np.geomspace(lo, hi * 1.5, points)
        return [[float(t), float(((self.reaction_ns > t) | wrong).mean())] for t in grid]

    def to_json(self) -> dict[str, Any]:
        lat = quantiles(self.window_latency_ns, "p50", "p90", "p99", "p999", "max")
        react = quantiles(self.reaction_ns, "p50", "p99", "max")
        pending = (np.floor(self.lag_ns / self.cycle_ns).astype(np.int64) + 1) if self.cycle_ns else None
        out = {
            "shots": self.shots, "rounds": self.rounds, "windows_per_shot": self.windows_per_shot,
            **self.ler_json(),
            "latency_ns": lat, "reaction_ns": react,
            "backlog": {"max_pending_rounds": int(pending.max()) if pending is not None else None,
                        "final_drain_ns": int(self.reaction_ns[-1])},
            "deadline_misses": self.deadline_misses(),
            "sustainable_cycle_ns": self.sustainable_cycle_ns(),
            "ler_at_deadline": self.ler_at_deadline(),
            "cycle_ns": self.cycle_ns, "achieved_cycle_ns": self.achieved_cycle_ns(), "placement": self.placement, "decoder": self.decoder, "wall_s": self.wall_s,
        }
        if self.reference_rtt_ns is not None:
            ref = quantiles(self.reference_rtt_ns[:, self.window_rounds], "p50", "p99")
            out["reference_latency_ns"] = ref
            out["framework_overhead_ns"] = {"p50": lat["p50"] - ref["p50"]}
        out.update(self.extra)
        return out

    _wrong: np.ndarray = field(default_factory=lambda: np.zeros(0, bool), repr=False)


@contextlib.contextmanager
def _pinned(cpu: int | None) -> Iterator[None]:
    """This thread on ``cpu`` (none: as it is) for the block."""
    if cpu is None:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def _drive(sw: SlidingWindowDecoder, plan: bytes, dets: np.ndarray, cycle_ns: int, *, key: str | None,
           engine: Engine | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    shots = len(dets)
    ev = np.ascontiguousarray(dets, dtype=np.uint8)
    pred = np.zeros((shots, (sw.num_observables + 7) // 8), dtype=np.uint8)
    rtt = np.zeros((shots, sw.num_rounds), dtype=np.uint64)
    lag = np.zeros((shots, sw.num_rounds), dtype=np.uint64)
    reaction = np.zeros(shots, dtype=np.uint64)
    err = ffi.new("char[]", 512)
    rc = lib.qs_drive(get_library().encode(), key.encode() if key is not None else ffi.NULL,
                      engine.ptr if engine is not None else ffi.NULL, plan, len(plan),
                      ffi.from_buffer("uint8_t[]", ev), shots, cycle_ns, ffi.from_buffer("uint8_t[]", pred),
                      ffi.from_buffer("uint64_t[]", rtt), ffi.from_buffer("uint64_t[]", lag),
                      ffi.from_buffer("uint64_t[]", reaction), err, 512)
    if rc != 0:
        raise BacklineError(f"the stream stopped: {ffi.string(err).decode(errors='replace')}")
    flips = np.unpackbits(pred, axis=1, count=sw.num_observables, bitorder="little")
    return flips, rtt, lag, reaction


class PlacedStream:
    """One circuit's sliding-window engine deployed once on a placement's one coprocessor, for many
    batches of shots (``backline collect --placement`` keeps one per task on each worker): :meth:`run`
    streams a batch as :func:`stream` does, without deploying again. Close it (or use ``with``)."""

    def __init__(self, circuit: stim.Circuit, decoder: str, placement: Placement, *, window: int | None = None,
                 commit: int | None = None, **params: Any) -> None:
        if not isinstance(circuit, stim.Circuit):
            raise InvalidArgumentError(f"expected a stim.Circuit, not {type(circuit).__name__}")
        if len(placement.coprocessors) != 1:
            raise InvalidArgumentError(f"the placement has {len(placement.coprocessors)} coprocessors; a stream "
                                       "decodes on one")
        self.sw = SlidingWindowDecoder(circuit, decoder, window=window, commit=commit, **params)
        self.plan = encode_plan(self.sw)
        node = dataclasses.replace(placement.coprocessors[0], coprocessor_fn=engine_function(self.sw))
        max_round = int(np.bincount(self.sw.rounds).max())
        self._deploying = deploy(dataclasses.replace(placement, coprocessors=[node]),
                                 in_bytes=2 + (max_round + 7) // 8, out_bytes=(self.sw.num_observables + 7) // 8)
        self._deployment = self._deploying.__enter__()
        self._key = self._deployment.session().key

    def run(self, detectors: np.ndarray) -> np.ndarray:
        """(shots, detectors) 0/1 -> (shots, observables) predicted flips, round by round over the placement."""
        dets = np.asarray(detectors)
        if dets.ndim != 2 or dets.shape[1] != self.sw.num_detectors:
            raise InvalidArgumentError(f"the detection events have shape {dets.shape}; the circuit has "
                                       f"{self.sw.num_detectors} detectors a shot")
        return _drive(self.sw, self.plan, dets.astype(np.uint8), 0, key=self._key, engine=None)[0]

    def close(self) -> None:
        """Stop the coprocessor (idempotent)."""
        deploying, self._deploying = self._deploying, None
        if deploying is not None:
            deploying.__exit__(None, None, None)

    def __enter__(self) -> PlacedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stream(circuit: stim.Circuit, decoder: str, *, shots: int = 1000, seed: int | None = None,
           detectors: np.ndarray | None = None, observables: np.ndarray | None = None,
           placement: Placement | None = None, transport: str = "memcpy", runs_in: str | None = None,
           transport_args: dict[str, Any] | None = None, window: int | None = None, commit: int | None = None,
           cycle_us: float = 0.0, reference: bool = True, controller_cpu: int | None = None,
           coprocessor_cpu: int | None = None, parallel_windows: bool = False, workers: int | None = None,
           round_timeout_ms: int | None = None, on_progress: Callable[[int, Any], None] | None = None,
           escalate_to: str | None = None, escalate_when: str | None = None,
           escalate_placement: Placement | None = None, escalate_params: dict[str, Any] | None = None,
           patches: int | None = None, admission: bool | None = None,
           **params: Any) -> StreamResult | ParallelStreamResult | TieredStreamResult | PoolStreamResult:
    """Decode ``circuit``'s shots round by round with ``decoder`` on a coprocessor (see the module).

    ``controller_cpu`` pins the thread that drives the rounds while it does, ``coprocessor_cpu`` the
    coprocessor's poller (a key of the transport's own, as the bench pins them).

    ``parallel_windows``: decode layer-A windows of ``window`` rounds committing their middle
    ``commit`` concurrently on ``workers`` coprocessors (default: the placement's coprocessors, or
    2 processes), then the layer-B windows between them (docs/streaming.md, "Parallel windows");
    ``round_timeout_ms`` is each window's deadline there (the sessions' ``timeout_ms``), and
    ``on_progress(windows_done, deployment)`` is called after each commit (a test's fault hook).

    ``escalate_to``: tiered decoding (backline_qec.tiered): ``decoder`` answers each sliding window
    on the placement's coprocessor, except the windows ``escalate_when`` (``"not-converged"``, the
    default, or ``"syndrome-weight>K"``) flags, which ``escalate_to`` (with ``escalate_params``) answers on the coprocessor of
    ``escalate_placement`` (default: a memcpy process).

    ``patches``: a decoder pool with deadlines (backline_qec.pool): ``patches`` independent copies of
    the circuit's shots (``shots`` each; or ``detectors`` split into ``patches`` equal blocks of rows),
    their rounds arriving together every ``cycle_us``, each patch's sliding windows decoded in order on
    ``workers`` coprocessors, earliest deadline first; ``admission`` (default True) rejects at
    admission the windows that cannot meet their deadline (still decoded, counted as misses)."""
    if not isinstance(circuit, stim.Circuit):
        raise InvalidArgumentError(f"expected a stim.Circuit, not {type(circuit).__name__}")
    if patches is None and admission is not None:
        raise InvalidArgumentError("admission (--admission) goes with patches (--patches K): the decoder pool")
    if patches is not None:
        if parallel_windows or escalate_to is not None:
            raise InvalidArgumentError("--patches is not supported with --parallel-windows or --escalate-to: the pool "
                                       "decodes each patch's sliding windows in order")
        for what, value in (("on_progress", on_progress), ("controller_cpu", controller_cpu),
                            ("coprocessor_cpu", coprocessor_cpu)):
            if value is not None:
                raise InvalidArgumentError(f"{what} is not supported with the decoder pool (--patches)")
        return _stream_pool(circuit, decoder, patches, shots=shots, seed=seed, detectors=detectors,
                            observables=observables, placement=placement, transport=transport, runs_in=runs_in,
                            transport_args=transport_args, window=window, commit=commit, cycle_us=cycle_us,
                            reference=reference, workers=workers, round_timeout_ms=round_timeout_ms,
                            admission=True if admission is None else admission, **params)
    if escalate_to is None:
        for what, value in (("escalate_when", escalate_when), ("escalate_placement", escalate_placement),
                            ("escalate_params", escalate_params)):
            if value is not None:
                raise InvalidArgumentError(f"{what} goes with escalate_to (--escalate-to): the auxiliary decoder")
    else:
        if parallel_windows:
            raise InvalidArgumentError("--escalate-to is not supported with --parallel-windows: tiered decoding "
                                       "decodes sliding windows in order")
        for what, value in (("workers", workers), ("on_progress", on_progress), ("controller_cpu", controller_cpu),
                            ("coprocessor_cpu", coprocessor_cpu)):
            if value is not None:
                raise InvalidArgumentError(f"{what} is not supported with tiered decoding (--escalate-to)")
        if cycle_us:
            raise InvalidArgumentError("--cycle-us is not supported with --escalate-to: tiered windows are "
                                       "dispatched as fast as the decoders answer (give --cycle-us 0)")
        return _stream_tiered(circuit, decoder, escalate_to, shots=shots, seed=seed, detectors=detectors,
                              observables=observables, placement=placement, transport=transport, runs_in=runs_in,
                              transport_args=transport_args, window=window, commit=commit, reference=reference,
                              round_timeout_ms=round_timeout_ms, escalate_when=escalate_when,
                              escalate_placement=escalate_placement, escalate_params=escalate_params, **params)
    if parallel_windows:
        return _stream_parallel(circuit, decoder, shots=shots, seed=seed, detectors=detectors, observables=observables,
                                placement=placement, transport=transport, runs_in=runs_in,
                                transport_args=transport_args, window=window, commit=commit, cycle_us=cycle_us,
                                reference=reference, controller_cpu=controller_cpu, coprocessor_cpu=coprocessor_cpu,
                                workers=workers, round_timeout_ms=round_timeout_ms, on_progress=on_progress,
                                **params)
    for what, value in (("workers", workers), ("round_timeout_ms", round_timeout_ms), ("on_progress", on_progress)):
        if value is not None:
            raise InvalidArgumentError(f"{what} goes with parallel_windows=True (--parallel-windows)")
    runs_in = runs_in or "thread"
    if not isinstance(cycle_us, (int, float)) or isinstance(cycle_us, bool) or not 0 <= cycle_us <= 1e6:
        raise InvalidArgumentError(f"cycle_us={cycle_us!r} must be a number of microseconds from 0 to 1e6 (0: as "
                                   "fast as possible)")
    allowed = os.sched_getaffinity(0)
    for what, cpu in (("controller_cpu", controller_cpu), ("coprocessor_cpu", coprocessor_cpu)):
        if cpu is not None and (not isinstance(cpu, int) or isinstance(cpu, bool) or cpu not in allowed):
            raise InvalidArgumentError(f"{what}={cpu!r}: not a CPU this process may run on (it may use "
                                       f"{sorted(allowed)}); or give none")
    sw = SlidingWindowDecoder(circuit, decoder, window=window, commit=commit, **params)
    if detectors is None:
        if not isinstance(shots, int) or isinstance(shots, bool) or shots < 1:
            raise InvalidArgumentError(f"shots={shots!r} must be a positive int")
        dets, obs = circuit.compile_detector_sampler(seed=seed).sample(shots, separate_observables=True)
    else:
        dets, obs = np.asarray(detectors), None if observables is None else np.asarray(observables)
        if dets.ndim != 2 or dets.shape[1] != sw.num_detectors:
            raise InvalidArgumentError(f"the detection events have shape {dets.shape}; the circuit has "
                                       f"{sw.num_detectors} detectors a shot")
        if obs is not None and obs.shape != (len(dets), sw.num_observables):
            raise InvalidArgumentError(f"the observables have shape {obs.shape}; expected ({len(dets)}, "
                                       f"{sw.num_observables})")
    dets = dets.astype(np.uint8)
    engine_fn = engine_function(sw)
    stack = contextlib.ExitStack()
    if placement is None:
        endpoint = None
        if plugins.transport_backend(transport, "cpu", "coprocessor").needs_endpoint:
            endpoint = Endpoint(host=LOOPBACK, port=free_port(LOOPBACK))  # a networked transport, on this host
        if runs_in == "executor" and engine_fn.is_python:
            raise InvalidArgumentError(f"decoder {decoder!r} runs in Python, and an executor runs native code only: "
                                       "choose a native decoder (lut, bposd) or another place (thread, process)")
        executor = stack.enter_context(local_executor()) if runs_in == "executor" else None
        # the transport's own keys go to both ends (ucx's tls: one for both nodes), as the bench does
        coprocessor_args = dict(transport_args or {})
        if coprocessor_cpu is not None:
            if "cpu" not in plugins.transport_backend(transport, "cpu", "coprocessor").init_args \
                    or runs_in == "controller-thread":
                raise InvalidArgumentError(f"coprocessor_cpu: transport {transport!r} has no poller to pin when its "
                                           f"coprocessor runs in {runs_in!r}; give none")
            coprocessor_args["cpu"] = coprocessor_cpu
        placement = Placement(controller=Controller(init_args=dict(transport_args or {})), transport=transport,
                              coprocessors=[
            Coprocessor(name=host_local_name(COPROCESSOR), coprocessor_fn=engine_fn, runs_in=runs_in, endpoint=endpoint,
                        executor=executor, init_args=coprocessor_args)])
    else:
        if coprocessor_cpu is not None:
            raise InvalidArgumentError("coprocessor_cpu: with a placement, pin its coprocessor in the placement (its "
                                       "transport's cpu key)")
        if len(placement.coprocessors) != 1:
            raise InvalidArgumentError(f"the placement has {len(placement.coprocessors)} coprocessors; a stream "
                                       "decodes on one")
        placement = dataclasses.replace(placement, coprocessors=[
            dataclasses.replace(placement.coprocessors[0], coprocessor_fn=engine_fn)])
    plan = encode_plan(sw)
    cycle_ns = int(round(cycle_us * 1000))
    max_round = int(np.bincount(sw.rounds).max())
    t0 = time.monotonic()
    with stack, deploy(placement, in_bytes=2 + (max_round + 7) // 8, out_bytes=(sw.num_observables + 7) // 8) as d:
        session = d.session()
        with _pinned(controller_cpu):  # after deploy: a coprocessor thread must not inherit the pin
            flips, rtt, lag, reaction = _drive(sw, plan, dets, cycle_ns, key=session.key, engine=None)
    wall = time.monotonic() - t0
    ref_rtt = None
    if reference:  # the same windows decoded in this thread, no transport: what the placement adds
        engine = Engine(plan, sw.decoders)
        try:
            with _pinned(controller_cpu):
                ref_flips, ref_rtt, _, _ = _drive(sw, plan, dets, 0, key=None, engine=engine)
        finally:
            engine.close()
        if not (ref_flips == flips).all():
            raise BacklineError("the predictions over the placement differ from the same engine's in this process")
    wrong = (flips != obs).any(axis=1) if obs is not None else np.zeros(len(dets), bool)
    result = StreamResult(
        shots=len(dets), rounds=sw.num_rounds, windows_per_shot=len(sw.windows), predictions=flips,
        logical_errors=int(wrong.sum()) if obs is not None else None, rtt_ns=rtt, lag_ns=lag, reaction_ns=reaction,
        window_rounds=np.array([m.window.end - 1 for m in sw.models]),
        commit_rounds=np.array([m.window.commit_end - m.window.start for m in sw.models]), cycle_ns=cycle_ns,
        placement=placement_description(placement), decoder={"name": decoder, "params": sw.params,
                                                             "window": window, "commit": commit},
        reference_rtt_ns=ref_rtt, wall_s=wall)
    result._wrong = wrong
    return result


def runs_in_of(node: Coprocessor) -> str | None:
    """Where ``node`` runs as the report says it: a node given an executor has ``runs_in`` None."""
    return "executor" if node.dispatched else node.runs_in


def placement_description(placement: Placement) -> dict[str, Any]:
    node = placement.coprocessors[0]
    return {"transport": placement.transport, "runs_in": runs_in_of(node), "init_args": dict(node.init_args),
            "coprocessor": node.name}


#: the workers stream() starts for parallel windows when neither a placement nor ``workers`` names them
DEFAULT_WORKERS = 2


def _sample(circuit: stim.Circuit, shots: int, seed: int | None, detectors: np.ndarray | None,
            observables: np.ndarray | None, num_detectors: int,
            num_observables: int) -> tuple[np.ndarray, np.ndarray | None]:
    if detectors is None:
        if not isinstance(shots, int) or isinstance(shots, bool) or shots < 1:
            raise InvalidArgumentError(f"shots={shots!r} must be a positive int")
        return circuit.compile_detector_sampler(seed=seed).sample(shots, separate_observables=True)
    dets, obs = np.asarray(detectors), None if observables is None else np.asarray(observables)
    if dets.ndim != 2 or dets.shape[1] != num_detectors:
        raise InvalidArgumentError(f"the detection events have shape {dets.shape}; the circuit has "
                                   f"{num_detectors} detectors a shot")
    if obs is not None and obs.shape != (len(dets), num_observables):
        raise InvalidArgumentError(f"the observables have shape {obs.shape}; expected ({len(dets)}, "
                                   f"{num_observables})")
    return dets, obs


def worker_placement(fn: Any, decoder: str, *, placement: Placement | None, workers: int | None, transport: str,
                     runs_in: str | None, transport_args: dict[str, Any] | None, round_timeout_ms: int | None,
                     stack: contextlib.ExitStack) -> Placement:
    """The placement of a pool of workers each running ``fn``: ``workers`` coprocessors ``worker-0``, ...
    (default :data:`DEFAULT_WORKERS`, in processes), or each of ``placement``'s coprocessors; the
    controller's sessions get ``round_timeout_ms`` as their ``timeout_ms``."""
    controller_args = dict(transport_args or {})
    if round_timeout_ms is not None:
        controller_args["timeout_ms"] = round_timeout_ms
    if placement is None:
        runs_in = runs_in or "process"
        if runs_in == "executor" and fn.is_python:
            raise InvalidArgumentError(f"decoder {decoder!r} runs in Python, and an executor runs native code only: "
                                       "choose a native decoder (lut, bposd) or another place (thread, process)")
        needs_endpoint = plugins.transport_backend(transport, "cpu", "coprocessor").needs_endpoint
        nodes = []
        for i in range(workers or DEFAULT_WORKERS):
            endpoint = Endpoint(host=LOOPBACK, port=free_port(LOOPBACK)) if needs_endpoint else None
            executor = stack.enter_context(local_executor()) if runs_in == "executor" else None
            nodes.append(Coprocessor(name=worker_name(i), coprocessor_fn=fn, runs_in=runs_in, endpoint=endpoint,
                                     executor=executor, init_args=dict(transport_args or {})))
        placement = Placement(controller=Controller(init_args=controller_args), transport=transport, coprocessors=nodes)
    else:
        if workers is not None and workers != len(placement.coprocessors):
            raise InvalidArgumentError(f"workers={workers} but the placement names {len(placement.coprocessors)} "
                                       "coprocessors: each coprocessor is a worker (leave out workers)")
        controller = placement.controller
        if round_timeout_ms is not None:
            controller = dataclasses.replace(controller, init_args={**dict(controller.init_args),
                                                                    "timeout_ms": round_timeout_ms})
        placement = dataclasses.replace(placement, controller=controller, coprocessors=[
            dataclasses.replace(node, coprocessor_fn=fn) for node in placement.coprocessors])
    return placement


def _stream_parallel(circuit: stim.Circuit, decoder: str, *, shots: int, seed: int | None,
                     detectors: np.ndarray | None, observables: np.ndarray | None, placement: Placement | None,
                     transport: str, runs_in: str | None, transport_args: dict[str, Any] | None,
                     window: int | None, commit: int | None, cycle_us: float, reference: bool,
                     controller_cpu: int | None, coprocessor_cpu: int | None, workers: int | None,
                     round_timeout_ms: int | None, on_progress: Callable[[int, Any], None] | None,
                     **params: Any) -> ParallelStreamResult:
    if cycle_us:
        raise InvalidArgumentError("--cycle-us is not supported with --parallel-windows: its windows are dispatched "
                                   "as fast as the workers take them (give --cycle-us 0)")
    if controller_cpu is not None or coprocessor_cpu is not None:
        raise InvalidArgumentError("--controller-cpu/--coprocessor-cpu are not supported with --parallel-windows "
                                   "(one thread per worker drives the windows)")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 64):
        raise InvalidArgumentError(f"workers={workers!r} must be a whole number from 1 to 64")
    if round_timeout_ms is not None and (not isinstance(round_timeout_ms, int) or isinstance(round_timeout_ms, bool)
                                         or round_timeout_ms < 1):
        raise InvalidArgumentError(f"round_timeout_ms={round_timeout_ms!r} must be a positive whole number of ms")
    pw = ParallelWindowDecoder(circuit, decoder, window=window, commit=commit, **params)
    if circuit.num_observables == 0:
        raise InvalidArgumentError("the circuit has no observables (no OBSERVABLE_INCLUDE): there is no logical "
                                   "outcome to predict")
    dets, obs = _sample(circuit, shots, seed, detectors, observables, pw.num_detectors, pw.num_observables)
    dets = dets.astype(np.uint8)
    fn = window_function(pw.decoders)
    stack = contextlib.ExitStack()
    placement = worker_placement(fn, decoder, placement=placement, workers=workers, transport=transport,
                                 runs_in=runs_in, transport_args=transport_args,
                                 round_timeout_ms=round_timeout_ms, stack=stack)
    names = [node.name for node in placement.coprocessors]
    in_bytes = max((len(m.detectors) + 7) // 8 for m in pw.models)
    out_bytes = max((pw.num_observables + len(m.handed_on) + 7) // 8 for m in pw.models)
    timeout_s = (round_timeout_ms if round_timeout_ms is not None else 1000) / 1000
    t0 = time.monotonic()
    with stack, deploy(placement, in_bytes=in_bytes, out_bytes=out_bytes) as d:
        ran = dispatch(pw, dets, d, names, round_timeout_s=timeout_s, on_progress=on_progress)
    wall = time.monotonic() - t0
    flips = ran["predictions"]
    ref_s = None
    if reference:  # the same windows decoded in this process, in layers: the decomposition gives the same answer
        t1 = time.perf_counter()
        ref = pw.decode_batch(dets)
        ref_s = time.perf_counter() - t1
        if not (ref == flips).all():
            raise BacklineError("the predictions over the workers differ from the same windows decoded in this process")
    wrong = (flips != obs).any(axis=1) if obs is not None else np.zeros(len(dets), bool)
    layers = [{"layer": "A" if w.open_start else "B", "start": w.start, "end": w.end, "commit_start": w.commit_from,
               "commit_end": w.commit_end, "after": list(a)} for w, a in zip(pw.windows, pw.after)]
    node = placement.coprocessors[0]
    return ParallelStreamResult(
        shots=len(dets), rounds=pw.num_rounds, windows_per_shot=len(pw.windows), predictions=flips,
        logical_errors=int(wrong.sum()) if obs is not None else None, window_latency_ns=ran["latency"],
        window_worker=ran["by"], workers=names, worker_failures=ran["failures"], deadline_misses=ran["misses"],
        dispatch_s=ran["elapsed"],
        placement={"transport": placement.transport, "runs_in": runs_in_of(node), "init_args": dict(node.init_args),
                   "coprocessors": names},
        decoder={"name": decoder, "params": pw.params, "window": window, "commit": commit},
        layers=layers, wall_s=wall, reference_s=ref_s)


#: where the auxiliary decoder runs when no escalate_placement is given
AUXILIARY_RUNS_IN = "process"


def _one_node(placement: Placement, fn: Any, what: str) -> Placement:
    if len(placement.coprocessors) != 1:
        raise InvalidArgumentError(f"{what} has {len(placement.coprocessors)} coprocessors; a tier decodes on one")
    return dataclasses.replace(placement, coprocessors=[dataclasses.replace(placement.coprocessors[0], coprocessor_fn=fn)])


def _with_timeout(placement: Placement, round_timeout_ms: int | None) -> Placement:
    if round_timeout_ms is None:
        return placement
    controller = dataclasses.replace(placement.controller, init_args={**dict(placement.controller.init_args),
                                                                      "timeout_ms": round_timeout_ms})
    return dataclasses.replace(placement, controller=controller)


def _stream_tiered(circuit: stim.Circuit, decoder: str, auxiliary: str, *, shots: int, seed: int | None,
                   detectors: np.ndarray | None, observables: np.ndarray | None, placement: Placement | None,
                   transport: str, runs_in: str | None, transport_args: dict[str, Any] | None, window: int | None,
                   commit: int | None, reference: bool, round_timeout_ms: int | None, escalate_when: str | None,
                   escalate_placement: Placement | None, escalate_params: dict[str, Any] | None,
                   **params: Any) -> TieredStreamResult:
    if round_timeout_ms is not None and (not isinstance(round_timeout_ms, int) or isinstance(round_timeout_ms, bool)
                                         or round_timeout_ms < 1):
        raise InvalidArgumentError(f"round_timeout_ms={round_timeout_ms!r} must be a positive whole number of ms")
    when = NOT_CONVERGED if escalate_when is None else escalate_when
    threshold = parse_escalate_when(when)
    tw = TieredWindowDecoder(circuit, decoder, auxiliary, threshold=threshold, window=window, commit=commit,
                             auxiliary_params=escalate_params, **params)
    dets, obs = _sample(circuit, shots, seed, detectors, observables, tw.num_detectors, tw.num_observables)
    dets = dets.astype(np.uint8)
    fns = [window_function(tier.decoders) for tier in tw.tiers()]
    stack = contextlib.ExitStack()
    placements = []
    for tier, fn, given, where, name in ((decoder, fns[0], placement, runs_in or "thread", "primary"),
                                         (auxiliary, fns[1], escalate_placement, AUXILIARY_RUNS_IN, "auxiliary")):
        if given is not None:
            placements.append(_with_timeout(_one_node(given, fn, "the placement" if name == "primary"
                                                      else "the escalate placement"), round_timeout_ms))
            continue
        args = dict(transport_args or {}) if name == "primary" else {}
        kind = transport if name == "primary" else "memcpy"
        if where == "executor" and fn.is_python:
            raise InvalidArgumentError(f"decoder {tier!r} runs in Python, and an executor runs native code only: "
                                       "choose a native decoder (lut, bposd) or another place (thread, process)")
        endpoint = None
        if plugins.transport_backend(kind, "cpu", "coprocessor").needs_endpoint:
            endpoint = Endpoint(host=LOOPBACK, port=free_port(LOOPBACK))
        executor = stack.enter_context(local_executor()) if where == "executor" else None
        controller_args = dict(args)
        if round_timeout_ms is not None:
            controller_args["timeout_ms"] = round_timeout_ms
        placements.append(Placement(controller=Controller(init_args=controller_args), transport=kind, coprocessors=[
            Coprocessor(name=host_local_name(name), coprocessor_fn=fn, runs_in=where, endpoint=endpoint, executor=executor,
                        init_args=args)]))
    in_bytes = max((len(m.detectors) + 7) // 8 for m in tw.models)
    out_bytes = max((tw.reply_width(k, tier) + 7) // 8 for k in range(len(tw.models)) for tier in (0, 1))
    t0 = time.monotonic()
    with stack:
        with deploy(placements[0], in_bytes=in_bytes, out_bytes=out_bytes) as d0, \
                deploy(placements[1], in_bytes=in_bytes, out_bytes=out_bytes) as d1:
            ran = dispatch_tiered(tw, dets, (d0.session(), d1.session()))
    wall = time.monotonic() - t0
    flips = ran["predictions"]
    ref_s = None
    if reference:  # the same windows and choices in this process: each tier answers as it does offline
        t1 = time.perf_counter()
        ref, ref_up = tw.decode_batch(dets)
        ref_s = time.perf_counter() - t1
        if not (ref == flips).all() or not (ref_up == ran["escalated"]).all():
            raise BacklineError("the tiered predictions over the placements differ from the same windows decoded "
                                "in this process")
    wrong = (flips != obs).any(axis=1) if obs is not None else np.zeros(len(dets), bool)
    return TieredStreamResult(
        shots=len(dets), rounds=tw.primary.num_rounds, windows_per_shot=len(tw.models), predictions=flips,
        logical_errors=int(wrong.sum()) if obs is not None else None, window_latency_ns=ran["latency"],
        tier_latency_ns=ran["tier_latency"], escalated=ran["escalated"], escalate_when=when, dispatch_s=ran["elapsed"],
        placements={"primary": placement_description(placements[0]),
                    "auxiliary": placement_description(placements[1])},
        decoders={"primary": {"name": decoder, "params": tw.primary.params},
                  "auxiliary": {"name": auxiliary, "params": tw.auxiliary.params}},
        window=window, commit=commit, wall_s=wall, reference_s=ref_s)


def _stream_pool(circuit: stim.Circuit, decoder: str, patches: int, *, shots: int, seed: int | None,
                 detectors: np.ndarray | None, observables: np.ndarray | None, placement: Placement | None,
                 transport: str, runs_in: str | None, transport_args: dict[str, Any] | None, window: int | None,
                 commit: int | None, cycle_us: float, reference: bool, workers: int | None,
                 round_timeout_ms: int | None, admission: bool, **params: Any) -> PoolStreamResult:
    if not isinstance(patches, int) or isinstance(patches, bool) or not 1 <= patches <= 64:
        raise InvalidArgumentError(f"patches={patches!r} must be a whole number from 1 to 64")
    if not isinstance(admission, bool):
        raise InvalidArgumentError(f"admission={admission!r} must be True or False (--admission on|off)")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 64):
        raise InvalidArgumentError(f"workers={workers!r} must be a whole number from 1 to 64")
    if round_timeout_ms is not None and (not isinstance(round_timeout_ms, int) or isinstance(round_timeout_ms, bool)
                                         or round_timeout_ms < 1):
        raise InvalidArgumentError(f"round_timeout_ms={round_timeout_ms!r} must be a positive whole number of ms")
    if not isinstance(cycle_us, (int, float)) or isinstance(cycle_us, bool) or not 0 <= cycle_us <= 1e6:
        raise InvalidArgumentError(f"cycle_us={cycle_us!r} must be a number of microseconds from 0 to 1e6 (0: every "
                                   "round at once)")
    sw = SlidingWindowDecoder(circuit, decoder, window=window, commit=commit, **params)
    if detectors is None:
        if not isinstance(shots, int) or isinstance(shots, bool) or shots < 1:
            raise InvalidArgumentError(f"shots={shots!r} must be a positive int")
        total = shots * patches
    else:
        total = len(np.asarray(detectors))
        if total % patches or total == 0:
            raise InvalidArgumentError(f"the detection events hold {total} shots, not a positive multiple of "
                                       f"patches={patches}: patch k's shots are the k-th of {patches} equal blocks")
    dets, obs = _sample(circuit, total, seed, detectors, observables, sw.num_detectors, sw.num_observables)
    per = len(dets) // patches
    dets = np.asarray(dets, dtype=np.uint8).reshape(patches, per, sw.num_detectors)
    obs = None if obs is None else np.asarray(obs, dtype=np.uint8).reshape(patches, per, sw.num_observables)
    fn = window_function(sw.decoders)
    stack = contextlib.ExitStack()
    placement = worker_placement(fn, decoder, placement=placement, workers=workers, transport=transport,
                                 runs_in=runs_in, transport_args=transport_args, round_timeout_ms=round_timeout_ms,
                                 stack=stack)
    names = [node.name for node in placement.coprocessors]
    in_bytes = max((len(m.detectors) + 7) // 8 for m in sw.models)
    out_bytes = max((sw.num_observables + len(m.handed_on) + 7) // 8 for m in sw.models)
    timeout_s = (round_timeout_ms if round_timeout_ms is not None else 1000) / 1000
    cycle_ns = int(round(cycle_us * 1000))
    t0 = time.monotonic()
    with stack, deploy(placement, in_bytes=in_bytes, out_bytes=out_bytes) as d:
        ran = dispatch_pool(sw, dets, d, names, cycle_ns=cycle_ns, admission=admission, round_timeout_s=timeout_s)
    wall = time.monotonic() - t0
    flips = ran["predictions"]
    ref_s = None
    if reference:  # the same sliding windows in this process: each patch is decoded as offline
        t1 = time.perf_counter()
        ref = sw.decode_batch(dets.reshape(-1, sw.num_detectors)).reshape(flips.shape)
        ref_s = time.perf_counter() - t1
        whole = ~ran["rejected"].any(axis=2)  # a shot with a shed window lacks its correction, by design
        if not (ref[whole] == flips[whole]).all():
            raise BacklineError("the pool's predictions differ from the same sliding windows decoded in this process")
    errors = None if obs is None else [int(v) for v in (flips != obs).any(axis=2).sum(axis=1)]
    node = placement.coprocessors[0]
    return PoolStreamResult(
        patches=patches, shots=per, rounds=sw.num_rounds, windows_per_shot=len(sw.windows), predictions=flips,
        logical_errors=errors, window_latency_ns=ran["latency"], response_ns=ran["response"], window_worker=ran["by"],
        rejected=ran["rejected"], missed=ran["missed"], workers=names, worker_failures=ran["failures"],
        admission=admission, cycle_ns=cycle_ns, max_queue=ran["max_queue"], max_backlog=ran["max_backlog"],
        estimate_ns=ran["estimate_ns"], predicted_late=ran["predicted_late"], late_done=ran["late_done"],
        prediction_error_ns=ran["prediction_error_ns"], dispatch_s=ran["elapsed"],
        placement={"transport": placement.transport, "runs_in": runs_in_of(node), "init_args": dict(node.init_args),
                   "coprocessors": names},
        decoder={"name": decoder, "params": sw.params, "window": window, "commit": commit},
        wall_s=wall, reference_s=ref_s)
