"""Plugin contracts: the pluggy hook specifications and the records plugins return.

A plugin is any importable object (usually a module) named by an entry point in one
of the groups in :data:`ENTRY_POINT_GROUPS`. When it is loaded it is registered with
the core's :class:`pluggy.PluginManager`, and the core calls its hooks at configure
time only -- never per round.

Example (the module an entry point ``memcpy = "my_pkg.plugin"`` points at)::

    from backline_core import hookimpl, Transport

    @hookimpl
    def backline_transports():
        return [Transport(name="memcpy", summary="...", serves=(("cpu", "controller"),),
                          library=lambda hardware, role: "/path/libmine.so")]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # the bench's callback types, for checkers: a plugin's load imports no bench
    from ._bench.protocols import BenchFloorFactory, ControllerBench, PayloadGenerator

PROJECT = "backline"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: Entry-point group -> the kind of plugin it holds.
ENTRY_POINT_GROUPS: Mapping[str, str] = MappingProxyType(
    {
        "backline.transports": "transport",
        "backline.decoders": "decoder",
        "backline.executors": "executor",
        "backline.passes": "pass",
        "backline.devices": "device",
        "backline.drivers": "driver",
        "backline.commands": "command",
        "backline.builders": "builder",
    }
)

HARDWARE = ("cpu", "gpu", "fpga")
ROLES = ("controller", "coprocessor")


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


def _frozen_json(value: Any) -> Any:
    """A JSON value that cannot be changed through the record (dicts become read-only, lists tuples)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen_json(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen_json(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    """:func:`_frozen_json`'s inverse: plain dicts and lists, for json.dumps."""
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


#: the reply layouts of a decoder built from a DEM or matrices (backline_core._dem says each one's bits)
REPLIES = ("observables", "observables+detectors")

#: the schema of a decoder that declares no parameters
EMPTY_SCHEMA: Mapping[str, Any] = MappingProxyType(
    {"type": "object", "properties": {}, "additionalProperties": False})


def _check_schema_shape(owner: str, schema: Mapping[str, Any]) -> None:
    # the shape the core relies on; tests check each installed schema with jsonschema itself
    props = schema.get("properties", {}) if isinstance(schema, Mapping) else None
    if not isinstance(schema, Mapping) or schema.get("type") != "object" or not isinstance(props, Mapping):
        raise ValueError(f"{owner}: its parameter schema must be a JSON Schema object with properties")
    missing = [k for k, v in props.items() if not isinstance(v, Mapping) or "default" not in v]
    if missing:
        raise ValueError(f"{owner}: parameters {', '.join(missing)} declare no default")


#: Where a coprocessor may run relative to its controller (``Coprocessor.runs_in``); the
#: values of ``bl_runs_in`` in ``backline.h`` (see :data:`backline_core._placement.RUNS_IN`).
#: ``"executor"``: a process an executor plugin starts (possibly on another machine) from
#: the node's compiled code; to the transport backend it is another process.
RUNS_IN = ("controller-thread", "thread", "process", "executor")
#: The init_args of a coprocessor that backline/sdk/remote.h reads for a networked transport (its
#: BL_REMOTE_CONFIG_KEYS besides host and port): such a transport adds these to its own.
REMOTE_INIT_ARGS = {
    "cpu": "coprocessor: pin its poller thread to this CPU",
    "rt_priority": "coprocessor: SCHED_FIFO priority 1-99 for its poller thread, best effort (it says what was "
                   "applied); 0: none (default)",
    "secret_file": "both ends: the file (mode 0600) holding the secret both ends prove they hold; deploy and bench "
                   "make one per deployment when none is given",
}


@dataclass(frozen=True, kw_only=True)
class Transport:
    """One distribution's part of a transport: the (hardware, role) pairs it has a backend for.

    Several distributions may serve one transport name (e.g. ``rdma`` for CPU nodes from
    one package and for an FPGA controller from another); resolution maps each
    (name, hardware, role) to exactly one record. ``library`` maps a served pair to the
    path of a shared library exporting the backend entry symbol of ``backline.h``.
    ``runs_in`` lists where this part's coprocessors may run (:data:`RUNS_IN` values; the
    first is the default of a coprocessor that does not say). ``init_args`` documents the
    configuration keys the backend reads (key -> one-line description); the backend's
    own ``config_keys`` and its open hook are what accept or refuse them.
    ``needs_endpoint`` says whether a coprocessor must carry a network ``Endpoint``; resolution
    then passes its host and port to both sides' backends as the keys ``host`` and ``port``.
    ``idle`` says what an idle coprocessor does: ``"sleeps"`` (on the doorbell, after
    ``idle_spin_us``) or ``"spins"`` (nothing can wake it, e.g. a remote write: it keeps its CPU).
    ``bench_floor``, if given, is this transport's own bare floor for ``backline bench`` (a
    :class:`~backline_core._bench.protocols.BenchFloorFactory`: a context manager of a
    ``BenchFloor``, e.g. the SDK's ``NativeFloor``); without one the bench uses the
    shared-memory floor.
    ``controller_bench``, if given, is a controller part's own benchmark, for a controller whose
    rounds its hardware times (the FPGA engine counts cycles; a host clock cannot see its round
    trip): ``backline bench --controller-hardware H`` hands it the run (a
    :class:`~backline_core._bench.protocols.ControllerBench`) and prints its result's ``text()``.
    ``distribution`` is filled in by the registry.
    """

    name: str
    summary: str
    serves: tuple[tuple[str, str], ...]
    library: Callable[[str, str], str]
    runs_in: tuple[str, ...] = ("process",)
    needs_endpoint: bool = False
    init_args: Mapping[str, str] = field(default_factory=dict)
    idle: str = "sleeps"
    bench_floor: BenchFloorFactory | None = None
    controller_bench: ControllerBench | None = None
    distribution: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "serves", tuple(tuple(p) for p in self.serves))
        object.__setattr__(self, "runs_in", tuple(self.runs_in))
        object.__setattr__(self, "init_args", _frozen(self.init_args))
        for hardware, role in self.serves:
            if hardware not in HARDWARE or role not in ROLES:
                raise ValueError(
                    f"transport {self.name!r} declares it serves ({hardware!r}, {role!r}); "
                    f"hardware must be one of {HARDWARE} and role one of {ROLES}"
                )
        if self.idle not in ("sleeps", "spins"):
            raise ValueError(f"transport {self.name!r} declares idle={self.idle!r}; give 'sleeps' or 'spins'")
        unknown = [r for r in self.runs_in if r not in RUNS_IN]
        if unknown or not self.runs_in:
            raise ValueError(
                f"transport {self.name!r} declares runs_in={self.runs_in!r}; give one or more of {RUNS_IN}"
            )

    def describe(self) -> str:
        pairs = ", ".join(f"{h}/{r}" for h, r in self.serves)
        text = f"serves {pairs}; coprocessors run in {', '.join(self.runs_in)}"
        if self.needs_endpoint:
            text += "; needs a network endpoint"
        if self.init_args:  # its own configuration keys (`ucx`'s tls: which UCX transports)
            text += f"; keys {', '.join(self.init_args)}"
        return text


@dataclass(frozen=True, kw_only=True)
class Decoder:
    """A named coprocessor function factory.

    ``build(**params)`` returns a :class:`backline_core.CoprocessorFunction` (a code's own
    sources, such as Hx and Hz, and parameters); ``hardware`` lists where the function it
    builds can run. ``bench_payloads``, if given, makes the requests ``backline bench`` sends
    that function (and perhaps the replies it must give: a
    :class:`~backline_core._bench.protocols.PayloadGenerator`); without one the bench sends
    random bytes and checks each reply against the function called locally.

    A decoder of detection events also builds from a detector error model
    (``from_dem(dem, *, reply, **params)``) or from explicit matrices
    (``from_matrices(m: DemMatrices, *, reply, **params)``); both return a
    :class:`~backline_core.DecoderFunction` replying in one of the layouts ``replies`` lists.
    ``schema`` is the JSON Schema of its parameters (docs/decoders.md); call
    :meth:`build_from_dem` and :meth:`build_from_matrices`, which check them first.
    """

    name: str
    summary: str
    build: Callable[..., Any]
    hardware: tuple[str, ...] = ("cpu",)
    bench_payloads: PayloadGenerator | None = None
    schema: Mapping[str, Any] = field(default_factory=lambda: dict(EMPTY_SCHEMA))
    from_dem: Callable[..., Any] | None = None
    from_matrices: Callable[..., Any] | None = None
    replies: tuple[str, ...] = ("observables",)
    #: whether it decodes the DEM's own decomposition into graphlike components (matching does): a
    #: caller that makes the DEM from a circuit decomposes it for such a decoder only
    decomposed_dem: bool = False
    distribution: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hardware", tuple(self.hardware))
        object.__setattr__(self, "replies", tuple(self.replies))
        _check_schema_shape(f"decoder {self.name!r}", self.schema)
        object.__setattr__(self, "schema", _frozen_json(self.schema))
        bad = [r for r in self.replies if r not in REPLIES]
        if bad or not self.replies:
            raise ValueError(f"decoder {self.name!r} declares replies={self.replies!r}; give one or more of {REPLIES}")

    def describe(self) -> str:
        sources = [s for s, f in (("a DEM", self.from_dem), ("matrices", self.from_matrices)) if f is not None]
        built = f"; builds from {' or '.join(sources)}" if sources else ""
        params = ", ".join(self.schema.get("properties", {}))
        return f"runs on {', '.join(self.hardware)}{built}" + (f"; parameters {params}" if params else "")

    def details(self) -> dict[str, Any]:
        """What ``backline plugins --json`` adds to this decoder's row."""
        return {"schema": _thawed(self.schema), "from_dem": self.from_dem is not None,
                "from_matrices": self.from_matrices is not None, "replies": list(self.replies),
                "decomposed_dem": self.decomposed_dem,
                "hardware": list(self.hardware)}

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` checked against :attr:`schema`, with the defaults filled in."""
        from ._decoder_params import check_params

        return check_params(self.name, self.schema, params)

    def _checked_reply(self, reply: str) -> str:
        from ._errors import InvalidArgumentError

        if reply not in self.replies:
            raise InvalidArgumentError(f"decoder {self.name!r} replies with {' or '.join(map(repr, self.replies))}, "
                                       f"not {reply!r}")
        return reply

    def _which(self, source: str) -> str:
        from . import _plugins as plugins

        able = [n for n in plugins.names("decoder") if getattr(plugins.get("decoder", n), source, None) is not None]
        return ", ".join(able) or "none installed"

    def build_from_dem(self, dem: Any, *, reply: str = "observables", **params: Any) -> Any:
        """A :class:`~backline_core.DecoderFunction` for ``dem`` (a ``stim.DetectorErrorModel``)."""
        from ._dem import check_dem
        from ._errors import InvalidArgumentError

        if self.from_dem is None:
            raise InvalidArgumentError(f"decoder {self.name!r} does not build from a detector error model; "
                                       f"those that do: {self._which('from_dem')}")
        checked = self.check_params(params)
        return self._built(self.from_dem(check_dem(dem), reply=self._checked_reply(reply), **checked))

    def build_from_matrices(self, h: Any, o: Any, priors: Any = None, *, reply: str = "observables",
                            **params: Any) -> Any:
        """A :class:`~backline_core.DecoderFunction` for check matrix ``h``, observables ``o`` and ``priors``."""
        from ._dem import check_matrices
        from ._errors import InvalidArgumentError

        if self.from_matrices is None:
            raise InvalidArgumentError(f"decoder {self.name!r} does not build from matrices; those that do: "
                                       f"{self._which('from_matrices')}")
        checked = self.check_params(params)
        return self._built(self.from_matrices(check_matrices(h, o, priors), reply=self._checked_reply(reply),
                                              **checked))

    def _built(self, function: Any) -> Any:
        from ._decoder_function import DecoderFunction
        from ._errors import PluginError

        if not isinstance(function, DecoderFunction):
            raise PluginError(f"decoder {self.name!r} ({self.distribution}) built {type(function).__name__}, "
                              "not a DecoderFunction")
        return function


@dataclass(frozen=True, kw_only=True)
class _Loadable:
    """A named component whose implementation ``load()`` imports on first use."""

    name: str
    summary: str
    load: Callable[[], Any]
    distribution: str = ""

    def describe(self) -> str:
        return self.summary


class Executor(_Loadable):
    """A way to run a node's compiled code out of process (local, ssh, ...).

    ``load()`` returns a module with ``cli(argv) -> int`` (``backline executor ARGS``) and
    ``start_coprocessor(node, *, in_bytes, out_bytes)``, which ``deploy`` calls for a
    coprocessor resolved to ``runs_in == "executor"``; its result's ``stop()`` ends it.
    """


class Pass(_Loadable):
    """A compiler pass, loaded lazily by its kebab-case name."""


@dataclass(frozen=True, kw_only=True)
class Device(_Loadable):
    """A quantum-device runtime (the ABI is ``backline/device.h``).

    ``pennylane_devices`` names the PennyLane devices (``qml.device(name)``) whose
    operations this runtime executes when such a device is a controller's ``device``.

    ``load()`` returns either a ``str``, the path of a shared library exporting
    ``backline_device_v1`` (``BL_DEVICE_ENTRY``), or an ``int``, the address of a
    ``bl_device_api`` built in this process (for example filled with cffi callbacks),
    which must stay valid while the process runs. :class:`backline_core._device.QuantumDevice`
    opens either.
    """

    pennylane_devices: tuple[str, ...] = ()

    def describe(self) -> str:
        backs = f" (backs {', '.join(self.pennylane_devices)})" if self.pennylane_devices else ""
        return self.summary + backs


class RoundDriver(_Loadable):
    """A way to issue benchmark rounds (``backline bench --driver NAME``).

    ``load()`` returns a factory ``make(key, decoder_id, table) -> run`` where
    ``run(first, rtt_out, replies_out) -> int`` issues ``len(rtt_out)`` rounds on the
    controller session registered under ``key`` and returns the runtime status (0 = ok).
    """


class Command(_Loadable):
    """A ``backline NAME ARGS`` subcommand a plugin adds (e.g. ``backline rdma devices``).

    ``load()`` returns ``main(argv: list[str]) -> int``; like every ``backline`` command, it
    reports an error as one line on stderr and exit status 2.
    """


class ObjectBuilder(_Loadable):
    """Builds the native object an executor runs for a coprocessor (the compiler registers one).

    ``load()`` returns ``build(node, *, in_bytes, out_bytes, workspace) -> (object_path, symbols)``:
    ``node`` is the :class:`~backline_core.ResolvedNode` of a coprocessor with ``runs_in ==
    "executor"``, the object is a relocatable ELF for the executor's target written under
    ``workspace``, and ``symbols`` maps the roles the executor looks up to their symbol names.
    An executor plugin finds the builder through the registry, so it never imports the compiler.
    """


#: kind -> (record type, hook name)
RECORD_TYPES: Mapping[str, tuple[type, str]] = MappingProxyType(
    {
        "transport": (Transport, "backline_transports"),
        "decoder": (Decoder, "backline_decoders"),
        "executor": (Executor, "backline_executors"),
        "pass": (Pass, "backline_passes"),
        "device": (Device, "backline_devices"),
        "driver": (RoundDriver, "backline_drivers"),
        "command": (Command, "backline_commands"),
        "builder": (ObjectBuilder, "backline_builders"),
    }
)


class BacklineSpecs:
    """Hook specifications. Each returns the records one plugin contributes."""

    @hookspec
    def backline_transports(self) -> Sequence[Transport]:
        """Transports this plugin provides."""

    @hookspec
    def backline_decoders(self) -> Sequence[Decoder]:
        """Coprocessor-function factories this plugin provides."""

    @hookspec
    def backline_executors(self) -> Sequence[Executor]:
        """Executors this plugin provides."""

    @hookspec
    def backline_passes(self) -> Sequence[Pass]:
        """Compiler passes this plugin provides."""

    @hookspec
    def backline_devices(self) -> Sequence[Device]:
        """Quantum-device runtimes this plugin provides."""

    @hookspec
    def backline_drivers(self) -> Sequence[RoundDriver]:
        """Benchmark round drivers this plugin provides."""

    @hookspec
    def backline_commands(self) -> Sequence[Command]:
        """``backline`` subcommands this plugin provides."""

    @hookspec
    def backline_builders(self) -> Sequence[ObjectBuilder]:
        """Builders of the objects executors run, this plugin provides."""
