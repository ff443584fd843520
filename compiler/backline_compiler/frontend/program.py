"""A QNode compiled for a Backline device: IR, pass pipeline, JIT, and shot-by-shot runs."""

from __future__ import annotations

import os
import shutil
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import llvm
from xdsl.passes import ModulePass

from backline_core._resolution import resolve
from backline_core.sdk import QuantumDevice, from_status, last_error, private_tempdir, summary

from .. import codegen, pipeline
from ..detector_model import detector_error_models
from ..dialects import bqec
from ..dialects.transport import BacklineAttr
from ..passes.convert_bqec_to_llvm import ConvertBqecToLLVM
from ..passes.convert_executor_to_llvm import ConvertExecutorToLLVM
from ..passes.convert_quantum_to_llvm import ConvertQuantumToLLVM
from ..passes.convert_transport_to_llvm import ConvertTransportToLLVM
from ..passes.cross_compile_targets import CrossCompileTargets
from ..passes.dispatch_executor_targets import DispatchExecutorTargets
from ..passes.inject_noise import InjectNoise
from ..passes.inject_transport_session import InjectTransportSession
from ..passes.lower_decode_to_transport import LowerDecodeToTransport
from . import capture, results
from .device import ENCODE_PREFIX
from .decode import lower_decode
from .runtime_call import lower_runtime_call
from .values import to_python

#: the last stage: everything left becomes the llvm dialect
LOWER: tuple[ModulePass, ...] = (ConvertBqecToLLVM(), ConvertQuantumToLLVM(), ConvertTransportToLLVM())


def executor_stage(workspace: str) -> tuple[ModulePass, ...]:
    """After LOWER when a coprocessor runs in an executor: its code is compiled (into ``workspace``) and launched there."""
    return CrossCompileTargets(workspace=workspace), DispatchExecutorTargets(), ConvertExecutorToLLVM()


@dataclass
class RunStats:
    """What one run of a compiled QNode measured."""

    shots: int
    seconds: float                                   # the compiled shot loop alone
    rtt_ns: dict[str, np.ndarray] = field(default_factory=dict)  # coprocessor -> RTT of each round
    rounds: dict[str, int] = field(default_factory=dict)         # coprocessor -> rounds (incl. not stored)

    @property
    def us_per_shot(self) -> float:
        return 1e6 * self.seconds / max(self.shots, 1)

    def rtt_text(self) -> str:
        """One line per run: rounds and RTT statistics of each coprocessor."""
        if not self.rtt_ns:
            return "no transport rounds (decoded in the controller)"
        parts = []
        for key, s in self.rtt_summary().items():
            if "median_us" in s:
                parts.append(f"{key}: {s['rounds']} rounds, RTT median {s['median_us']:.3f} µs, mean "
                             f"{s['mean_us']:.3f}, P99 {s['p99_us']:.3f}, max {s['max_us']:.1f}")
            else:
                parts.append(f"{key}: no rounds")
        return "; ".join(parts)

    def rtt_summary(self) -> dict[str, dict[str, float]]:
        """Per coprocessor: ``rounds`` (stored or not), ``recorded`` and the bench's summary of the
        recorded RTTs in microseconds (``median_us``, ``mean_us``, ``p99_us``, ``max_us``, ...)."""
        out = {}
        for key, rtt in self.rtt_ns.items():
            figures = summary(np.asarray(rtt) / 1e3, "us")
            out[key] = {**figures, "rounds": self.rounds.get(key, len(rtt)), "recorded": len(rtt)}
        return out


class CompiledQNode:
    """One QNode's jaxpr compiled for a :class:`~backline_compiler.Backline` device."""

    def __init__(self, device: Any, jaxpr: Any, consts: Sequence[Any], arg_avals: Sequence[Any], *,
                 keep_intermediate: str | None = None) -> None:
        self.device = device
        self.timings: dict[str, float] = {}
        t0 = time.perf_counter()
        placement = device.placement
        extensions = {"backline_decode": lower_decode(placement if placement.coprocessors else None),
                      "backline_runtime_call": lower_runtime_call}
        self.translation = capture.qnode_to_ir(
            jaxpr, [to_python(c) for c in consts], arg_avals, num_wires=len(device.wires),
            unroll_loops=device.qec_code is not None, extensions=extensions)
        module = self.translation.module
        if placement.coprocessors:
            module.attributes["backline.placement"] = BacklineAttr.from_placement(placement)
        #: the frontend's IR, before any pass
        self.mlir = pipeline.print_module(module)
        t1 = time.perf_counter()
        self.timings["capture_to_ir_s"] = t1 - t0
        if keep_intermediate:
            os.makedirs(keep_intermediate, exist_ok=True)
            with open(os.path.join(keep_intermediate, "frontend.mlir"), "w") as fh:
                fh.write(self.mlir)
        module.verify()
        encode: list[ModulePass] = []
        if device.qec_code is not None:  # the installed pass encode-<qec_code> (see device.qec_codes)
            options = {"extraction": device.extraction} if device.extraction != "bare" else {}
            encode.append(pipeline.make(ENCODE_PREFIX + device.qec_code, apply_correction=bool(device.apply_correction),
                                        **options))
        if device.noise:
            encode.append(InjectNoise(p=float(device.noise)))
        stages: list[Sequence[ModulePass] | None] = [encode] if encode else []
        if placement.coprocessors:
            stages.append(None)  # the transport stage: message sizes are known once QEC has run
        stages.append(LOWER)
        #: where the executor-run coprocessors' objects are, until this program goes (setup sends them):
        #: removed then, or, should this process be killed first, by its reaper (private_tempdir)
        self._objects: str | None = None
        if any(node.runs_in == "executor" for node in device.resolution.coprocessors):
            if keep_intermediate:
                workspace = os.path.join(keep_intermediate, "objects")
            else:
                self._objects = workspace = private_tempdir("backline-objects-")
                weakref.finalize(self, shutil.rmtree, workspace, True)
            stages.append(executor_stage(workspace))
        #: the placement this program runs on: the device's, or with its decoders built from the program's model
        self.resolution = device.resolution
        ran: list[ModulePass] = []
        for n, stage in enumerate(stages, 1):
            if stage is None and device.model_decoders:
                placement = device.placement_for(_models(module, device.noise))
                module.attributes["backline.placement"] = BacklineAttr.from_placement(placement)
                self.resolution = resolve(placement)
            if stage is None:
                in_b, out_b = _message_sizes(module)
                stage = (InjectTransportSession(in_bytes=in_b, out_bytes=out_b),
                         LowerDecodeToTransport(policy=device.policy))
            ran += stage
            pipeline.run(module, stage, keep_intermediate=keep_intermediate and os.path.join(keep_intermediate,
                                                                                               f"stage{n}"))
        #: the passes that ran, in order
        self.passes = tuple(ran)
        #: the same as a backline-opt spec
        self.pipeline = ",".join(str(p.pipeline_pass_spec()) for p in ran)
        t2 = time.perf_counter()
        self.timings["passes_s"] = t2 - t1
        self.program = codegen.JitProgram(module, libraries=self.translation.libraries,
                                          keep_intermediate=keep_intermediate)
        self.timings["llvm_jit_s"] = time.perf_counter() - t2
        self.timings["compile_s"] = time.perf_counter() - t0
        self._run = self.program.function("qnode", "int32", "ptr", "int64", "ptr", "ptr")
        self._setup = self._teardown = None
        if placement.coprocessors:
            self._setup = self.program.function("backline_setup", "int32")
            self._teardown = self.program.function("backline_teardown", "int32")
        self.physical_qubits = (7 * max(self.translation.wires_used, 1) + 3 if device.qec_code == "steane"
                                else len(device.wires))
        # static call sites: a round inside a run-time loop runs more often (the log says how many it dropped)
        self.rounds_per_shot = sum(1 for op in module.walk()
                                   if isinstance(op, llvm.CallOp) and op.callee.string_value() == "bl_collect")
        self.last_run: RunStats | None = None

    def run(self, shots: int, args: Sequence[Any]) -> list[Any]:
        """Run ``shots`` shots with the QNode's arguments; returns its measurement results."""
        if not isinstance(shots, (int, np.integer)) or shots <= 0:
            raise ValueError(f"shots must be a positive int, got {shots!r}; set them with qml.set_shots")
        shots = int(shots)
        t = self.translation
        argbuf = np.zeros(max(t.num_args, 1), dtype=np.int64)
        # element by element, so an int64 argument is never rounded through a float array
        values = [v for a in args for v in np.asarray(a).ravel().tolist()]
        if len(values) != t.num_args:  # pragma: no cover - the trace fixes the argument layout
            raise ValueError(f"expected {t.num_args} argument values, got {len(values)}")
        floats = argbuf.view(np.float64)
        for k, (v, kind) in enumerate(zip(values, t.arg_kinds, strict=True)):
            if kind == "f":
                floats[k] = float(v)
            else:
                argbuf[k] = int(v)
        out = np.full((shots, max(t.width, 1)), -1, dtype=np.int32)
        dev = self.device
        stats = RunStats(shots=shots, seconds=0.0)
        with dev.deployment(self.resolution), QuantumDevice.open(dev.quantum_device, self.physical_qubits,
                                                  seed=dev.next_seed()) as qdev:
            logs = {}
            if self._setup is not None:
                status = self._setup()
                if status != 0:
                    # release what setup did bring up (e.g. a coprocessor in an executor), then report
                    message = last_error()
                    assert self._teardown is not None  # made with setup
                    self._teardown()
                    _check(status, "bringing up the placement's sessions (backline_setup)", message)
            try:
                logs = dev.attach_rtt_logs(max(self.rounds_per_shot, 1) * shots)
                t0 = time.perf_counter()
                status = self._run(qdev.handle, shots, out.ctypes.data, argbuf.ctypes.data)
                stats.seconds = time.perf_counter() - t0
            finally:
                for key, log in logs.items():
                    log.close()
                    stats.rtt_ns[key] = log.rtt_ns()
                    stats.rounds[key] = log.rounds
                if self._teardown is not None:
                    teardown = self._teardown()
            _check(status, "running the compiled QNode")
            if self._teardown is not None:
                _check(teardown, "tearing down the placement's sessions (backline_teardown)")
        self.last_run = stats
        return results.reduce_all(t.measurements, out[:, : t.width], len(dev.wires))


#: the noise a flag-extracted program without noise is modelled at: its decoder still needs a model (one
#: whose faults are those of the noisy program; with no noise the decoder only sees empty syndromes)
NOMINAL_NOISE = 0.001


def _models(module: Any, noise: float) -> list[Any]:
    """The detector error models of a flag-extracted module's decodes (at :data:`NOMINAL_NOISE` without noise)."""
    if noise:
        return detector_error_models(module)
    noisy = module.clone()
    pipeline.run(noisy, [InjectNoise(p=NOMINAL_NOISE)])
    return detector_error_models(noisy)


def _check(status: int, what: str, message: str | None = None) -> None:
    if status != 0:
        raise from_status(status, f"{what}: {message or last_error() or 'failed'}")


def _message_sizes(module: Any) -> tuple[int, int]:
    """The largest syndrome and correction of the module's decodes (8 and 8 when it has none)."""
    in_b, out_b = 1, 1
    found = False
    for op in module.walk():
        if isinstance(op, bqec.DecodeOp):
            found = True
            in_b, out_b = max(in_b, op.syndrome_bytes), max(out_b, op.correction_bytes)
    return (in_b, out_b) if found else (8, 8)
