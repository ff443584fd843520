"""``Backline``: a PennyLane device that carries a placement and runs compiled QNodes.

A QNode is written exactly as for the controller's quantum device; ``Backline`` adds where
the decodes run (the coprocessors), how rounds travel (the transport) and, with
``qec_code="steane"``, the encoding of every logical gate with a correction round.

What it can run is what is installed: a PennyLane device is supported when a
``backline.devices`` plugin lists it in ``pennylane_devices`` (:func:`quantum_devices`),
and a QEC code ``X`` exists when a pass named ``encode-X`` is installed (:func:`qec_codes`).

>>> import pennylane as qml
>>> from backline_compiler import Backline
>>> from backline_core import Controller
>>> dev = Backline(controller=Controller(device=qml.device("null.qubit", wires=3)))
>>> dev.wires.tolist(), dev.quantum_device
([0, 1, 2], 'null')
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from pennylane.devices import Device, ExecutionConfig
from pennylane.exceptions import DeviceError

from backline_core import Controller, Coprocessor, Placement, plugins
from backline_core._errors import PlacementError
from backline_core._resolution import needs_secret, resolve, with_secret
from backline_core.sdk import DeploymentSecret

POLICIES = ("round-robin", "by-check-type")
#: what flag extraction's decoders are first built from, to check them before any program is compiled:
#: a distance-5 repetition code's model (5 mechanisms, 4 detectors)
STAND_IN_MODEL = "error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1 D2\nerror(0.1) D2 D3\nerror(0.1) D3"
#: A pass named ``encode-X`` encodes programs in the QEC code ``X``.
ENCODE_PREFIX = "encode-"


def quantum_devices() -> dict[str, str]:
    """PennyLane device name -> the installed ``backline.devices`` plugin that runs its operations."""
    out: dict[str, str] = {}
    for plugin in plugins.names("device"):
        for name in plugins.get("device", plugin).pennylane_devices:
            out.setdefault(name, plugin)
    return out


def qec_codes() -> tuple[str, ...]:
    """The QEC codes installed: ``X`` for every pass named ``encode-X``."""
    return tuple(name[len(ENCODE_PREFIX):] for name in plugins.names("pass") if name.startswith(ENCODE_PREFIX))


def _quantum_device(device: Any) -> str:
    if device is None:
        raise PlacementError("Backline: the controller has no quantum device; give "
                             "Controller(device=qml.device('null.qubit', wires=N)) (or 'default.clifford' for stim)")
    name = getattr(device, "name", None)
    supported = quantum_devices()
    plugin = supported.get(name)
    if plugin is None:
        listed = ", ".join(f"{k} (runs on the {v!r} device plugin)" for k, v in sorted(supported.items()))
        raise PlacementError(f"Backline: the controller's device {name!r} has no Backline runtime; supported: "
                             f"{listed or 'none (no backline.devices plugin lists a PennyLane device)'}; a "
                             "backline.devices plugin that lists it in pennylane_devices adds one")
    if device.wires is None:
        raise PlacementError(f"Backline: the controller's device {name!r} needs wires=N")
    return plugin


def _model_decoders(coprocessors: Sequence[Coprocessor]) -> tuple[str, ...]:
    """Flag extraction: every coprocessor names a decoder plugin that builds from a detector error model."""
    if not coprocessors:
        raise PlacementError("Backline: extraction='flag' decodes each shot over its detector error model on a "
                             "coprocessor; give one, e.g. Coprocessor(coprocessor_fn='lut')")
    out = []
    for node in coprocessors:
        fn = node.coprocessor_fn
        record = plugins.get("decoder", fn) if isinstance(fn, str) else None
        if record is None or record.from_dem is None:
            able = [n for n in plugins.names("decoder") if plugins.get("decoder", n).from_dem is not None]
            raise PlacementError(f"Backline: extraction='flag' builds each coprocessor's decoder from the program's "
                                 f"detector error model; coprocessor {node.name!r} has {fn!r}: name a decoder "
                                 f"plugin that builds from one ({', '.join(able) or 'none installed'})")
        out.append(fn)
    return tuple(out)


class Backline(Device):
    """A PennyLane device for programs compiled by :func:`~backline_compiler.qjit`.

    Args:
        controller: the controller node; its ``device`` (a PennyLane device) gives the wires
            and the quantum runtime (``null.qubit`` -> ``null``, ``default.clifford`` -> ``stim``).
        coprocessors: the nodes decodes run on (none: implicit decodes stay local).
        transport: the transport plugin joining them (``"memcpy"`` here, ``"rdma"`` on a cluster).
        qec_code: ``"steane"`` encodes every logical gate with a correction round (the pass
            ``encode-steane``; any installed ``encode-X`` pass makes ``X`` a code); ``None`` runs
            the circuit as written.
        noise: physical error rate of a depolarizing noise model (``inject-noise``), 0 for none.
        apply_correction: with ``qec_code``, apply the decoders' corrections (False: decode but
            do not correct, a baseline).
        extraction: with ``qec_code``, the syndrome extraction (the pass's option): ``"bare"``
            (a correction round after every gate, decoded in real time; not fault-tolerant) or
            ``"flag"`` (flagged checks, each shot decoded once over its detectors). With
            ``"flag"``, each coprocessor names a decoder plugin that builds from a detector
            error model (``"lut"``, ``"bposd"``, ...): it is built, with ``decoder_params``,
            from each compiled program's own model (:mod:`backline_compiler.detector_model`).
        decoder_params: with ``extraction="flag"``, the decoders' parameters (e.g. ``{"depth": 2}``
            for ``lut``).
        policy: how implicit decodes choose a coprocessor (``round-robin`` or ``by-check-type``).
        seed: seed of the quantum device's randomness (each run draws the next seed).
    """

    name = "backline"

    def __init__(self, *, controller: Controller, coprocessors: Sequence[Coprocessor] = (),
                 transport: str = "memcpy", qec_code: str | None = None, noise: float = 0.0,
                 apply_correction: bool = True, policy: str = "round-robin", seed: int | None = None,
                 extraction: str = "bare", decoder_params: Mapping[str, Any] | None = None) -> None:
        if not isinstance(controller, Controller):
            raise PlacementError(f"Backline: controller must be a backline_core.Controller, not {controller!r}")
        if qec_code is not None and qec_code not in (codes := qec_codes()):
            raise PlacementError(f"Backline: unknown qec_code {qec_code!r}; choose one of {', '.join(codes)} "
                                 f"or None (a QEC code X is a pass named {ENCODE_PREFIX}X)")
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0.0 <= noise <= 1.0:
            raise PlacementError(f"Backline: noise={noise!r} must be a probability in [0, 1]")
        if policy not in POLICIES:
            raise PlacementError(f"Backline: unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.quantum_device = _quantum_device(controller.device)
        if noise and self.quantum_device == "null":
            raise PlacementError("Backline: noise needs a simulating device; null.qubit ignores noise "
                                 "(use default.clifford, which runs on stim)")
        super().__init__(wires=controller.device.wires)
        if qec_code is not None and extraction != "bare":  # the pass checks its options
            from backline_compiler import pipeline

            try:
                pipeline.make(ENCODE_PREFIX + qec_code, extraction=extraction)
            except Exception as exc:
                raise PlacementError(f"Backline: {exc}") from None
        elif extraction != "bare":
            raise PlacementError(f"Backline: extraction={extraction!r} needs a qec_code (e.g. qec_code='steane')")
        self.extraction = extraction
        self.decoder_params = dict(decoder_params or {})
        #: per coprocessor, the decoder plugin built from each program's detector error model (flag extraction)
        self.model_decoders = _model_decoders(coprocessors) if extraction == "flag" else ()
        if self.decoder_params and not self.model_decoders:
            raise PlacementError("Backline: decoder_params are for decoders built from a detector error model "
                                 "(extraction='flag'); give them to the decoder you build otherwise")
        self.placement = Placement(controller=controller, coprocessors=list(coprocessors), transport=transport,
                                   qec_code=qec_code)
        if self.model_decoders:
            # checked now with a stand-in model: the decoders build with these parameters, the placement resolves
            import stim

            self.placement = self.placement_for([stim.DetectorErrorModel(STAND_IN_MODEL)])
        #: the placement resolved against the installed plugins (a bad one fails here)
        self.resolution = resolve(self.placement)
        if needs_secret(self.resolution):
            # A networked transport's ends authenticate: with no secret_file given, one for this device's
            # runs (its compiled programs carry the path), removed with the device or at exit.
            secret = DeploymentSecret()
            weakref.finalize(self, secret.remove)
            self.placement = with_secret(self.placement, secret.path)
            self.resolution = resolve(self.placement)
        self.qec_code = qec_code
        self.noise = float(noise)
        self.apply_correction = bool(apply_correction)
        self.policy = policy
        self._seeds = np.random.default_rng(seed)
        self._programs: dict[Any, Any] = {}

    def __repr__(self) -> str:
        cops = ", ".join(n.name for n in self.placement.coprocessors) or "none"
        return (f"<Backline device (wires={len(self.wires)}, runtime={self.quantum_device!r}, "
                f"transport={self.placement.transport!r}, coprocessors: {cops}, qec_code={self.qec_code!r})>")

    def placement_for(self, models: Sequence[Any]) -> Placement:
        """The placement with each coprocessor's decoder built from ``models`` (flag extraction: one,
        for decoder id 0, as a shot is decoded once)."""
        if len(models) != 1:
            raise PlacementError(f"Backline: a flag-extracted program has one decode per shot; this one has "
                                 f"{len(models)}")
        nodes = []
        for node, name in zip(self.placement.coprocessors, self.model_decoders, strict=True):
            try:
                fn = plugins.get("decoder", name).build_from_dem(models[0], **self.decoder_params)
            except Exception as exc:
                raise PlacementError(f"Backline: coprocessor {node.name!r}: decoder {name!r} did not build from a "
                                     f"detector error model: {exc}") from None
            nodes.append(dataclasses.replace(node, coprocessor_fn=fn))
        return dataclasses.replace(self.placement, coprocessors=nodes)

    def next_seed(self) -> int:
        return int(self._seeds.integers(0, 2**31 - 1))

    # runs -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def deployment(self, resolution: Any = None) -> Iterator[None]:
        """Start the coprocessors that run in another process (resolved ``runs_in="process"``) for one
        run (of ``resolution``, a program's own; default the device's)."""
        from backline_core._deployment import start_process

        procs = []
        try:
            for node in (resolution or self.resolution).coprocessors:
                if node.runs_in == "process":
                    procs.append(start_process(node))
            yield
        finally:
            for p in procs:
                p.terminate()

    def attach_rtt_logs(self, capacity: int) -> dict[str, Any]:
        """Record the RTT of every round on each coprocessor's controller session."""
        from backline_core._session import RoundTripLog

        return {n.name: RoundTripLog.attach(n.name, min(capacity, 10_000_000)) for n in self.placement.coprocessors}

    def compiled(self, jaxpr: Any, consts: Sequence[Any], arg_avals: Sequence[Any], *,
                 keep_intermediate: str | None = None) -> Any:
        """The compiled program of a QNode's jaxpr (compiled once per jaxpr)."""
        from .program import CompiledQNode

        key = (id(jaxpr), tuple((tuple(a.shape), str(a.dtype)) for a in arg_avals),
               tuple(np.asarray(c).tobytes() for c in consts))
        program = self._programs.get(key)
        if program is None:
            program = CompiledQNode(self, jaxpr, consts, arg_avals, keep_intermediate=keep_intermediate)
            self._programs[key] = (program, jaxpr)  # keep the jaxpr alive: its id is the key
            return program
        return program[0]

    # PennyLane's device interface ---------------------------------------------------------
    def execute(self, circuits: Any, execution_config: ExecutionConfig | None = None) -> Any:
        raise DeviceError(
            "Backline runs compiled programs only: decorate the QNode with backline_compiler.qjit (or enable "
            "program capture with qml.capture.enable()); tapes are not executed"
        )

    def eval_jaxpr(self, jaxpr: Any, consts: list[Any], *args: Any, execution_config: ExecutionConfig | None = None,
                   shots: Any = None) -> list[Any]:
        """Compile and run a QNode's jaxpr (program capture without ``qjit``)."""
        total = getattr(shots, "total_shots", shots)
        if not total:
            raise DeviceError("Backline executes shot by shot: set shots with qml.set_shots(N)")
        import jax

        avals = [jax.core.get_aval(a) for a in args]
        return self.compiled(jaxpr, consts, avals).run(total, args)


