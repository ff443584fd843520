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
from typing import Any

import pluggy

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
    }
)

HARDWARE = ("cpu", "gpu", "fpga")
ROLES = ("controller", "coprocessor")


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, kw_only=True)
class Transport:
    """What a transport plugin serves and where its native backend library is.

    ``serves`` lists the (hardware, role) pairs it has a backend for; ``library``
    maps one of those pairs to the path of a shared library exporting the backend
    entry symbol declared in ``backline.h``. ``init_args`` names the configuration
    keys the backend accepts (key -> one-line description); the core adds its own
    common keys (``config.CORE_KEYS``).
    ``needs_endpoint`` says whether a coprocessor must carry a network ``Endpoint``.
    """

    name: str
    summary: str
    serves: tuple[tuple[str, str], ...]
    library: Callable[[str, str], str]
    localities: tuple[str, ...] = ()
    needs_endpoint: bool = False
    init_args: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "serves", tuple(tuple(p) for p in self.serves))
        object.__setattr__(self, "localities", tuple(self.localities))
        object.__setattr__(self, "init_args", _frozen(self.init_args))
        for hardware, role in self.serves:
            if hardware not in HARDWARE or role not in ROLES:
                raise ValueError(
                    f"transport {self.name!r} declares it serves ({hardware!r}, {role!r}); "
                    f"hardware must be one of {HARDWARE} and role one of {ROLES}"
                )

    def describe(self) -> str:
        pairs = ", ".join(f"{h}/{r}" for h, r in self.serves)
        text = f"serves {pairs}"
        if self.localities:
            text += f"; localities {', '.join(self.localities)}"
        if self.needs_endpoint:
            text += "; needs a network endpoint"
        return text


@dataclass(frozen=True, kw_only=True)
class Decoder:
    """A named coprocessor function factory.

    ``build(**params)`` returns a :class:`backline_core.CoprocessorFunction`;
    ``hardware`` lists where the function it builds can run.
    """

    name: str
    summary: str
    build: Callable[..., Any]
    hardware: tuple[str, ...] = ("cpu",)

    def describe(self) -> str:
        return f"runs on {', '.join(self.hardware)}"


@dataclass(frozen=True, kw_only=True)
class _Loadable:
    """A named component whose implementation ``load()`` imports on first use."""

    name: str
    summary: str
    load: Callable[[], Any]

    def describe(self) -> str:
        return self.summary


class Executor(_Loadable):
    """A way to run a node's compiled code out of process (local, ssh, ...)."""


class Pass(_Loadable):
    """A compiler pass, loaded lazily by its kebab-case name."""


class Device(_Loadable):
    """A quantum-device runtime (the ABI is ``backline/device.h``).

    ``load()`` returns either a ``str``, the path of a shared library exporting
    ``backline_device_v1`` (``BL_DEVICE_ENTRY``), or an ``int``, the address of a
    ``bl_device_api`` built in this process (for example filled with cffi callbacks),
    which must stay valid while the process runs. :class:`backline_core.device.QuantumDevice`
    opens either.
    """


class RoundDriver(_Loadable):
    """A way to issue benchmark rounds (``backline bench --driver NAME``).

    ``load()`` returns a factory ``make(key, decoder_id, table) -> run`` where
    ``run(first, rtt_out, replies_out) -> int`` issues ``len(rtt_out)`` rounds on the
    controller session registered under ``key`` and returns the runtime status (0 = ok).
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
