"""The placement model: which nodes a QEC workload runs on and how they are joined.

A :class:`Placement` has one :class:`Controller`, any number of :class:`Coprocessor`
nodes and the name of the transport plugin between them. Every object is a frozen,
hashable value that checks its own shape when it is built (types, names, ranges) and
consults no plugin: whether the installed plugins can run it is decided in one step,
:func:`backline_core._resolution.resolve`.

:mod:`backline_core._serialization` gives a placement its dict and JSON forms; the
compiler carries it as a typed IR attribute of its own.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from . import _config as config
from ._native import lib
from ._coprocessor_function import CoprocessorFunction
from ._errors import PlacementError, short_repr as _short
from ._hookspecs import HARDWARE, RUNS_IN as _RUNS_IN_NAMES

#: The session-key rule of backline.h (BL_KEY_MAX_LEN); node names are session keys.
_NODE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{lib.BL_KEY_MAX_LEN - 1}}}")
#: ``Coprocessor.runs_in`` value -> the ``bl_runs_in`` constant of backline.h.
RUNS_IN: Mapping[str, int] = MappingProxyType({
    "controller-thread": lib.BL_RUNS_CONTROLLER_THREAD,
    "thread": lib.BL_RUNS_THREAD,
    "process": lib.BL_RUNS_PROCESS,
    "executor": lib.BL_RUNS_PROCESS,  # the backend sees another process; resolution checks the rest
})
assert tuple(RUNS_IN) == _RUNS_IN_NAMES
#: Also the syntax of a bare key in the attribute form, so a valid qec_code never needs quoting.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_LABEL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")

#: executor_options key -> what it means (also shown in the error for an unknown key).
EXECUTOR_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "address": "host:port of the machine's executor agent ([v6addr]:port for IPv6)",
        "host": "host name or IP address of the machine the executor runs on (with address: when address "
                "is a forward, e.g. over ssh)",
        "port": "port of the machine's executor agent",
        "user": "login user",
        "ssh_port": "ssh port",
        "identity_file": "path of the ssh private key",
        "python": "python interpreter to run on the machine",
        "executor": "name of the executor plugin that runs the node (default 'orc')",
        "secret_file": "path of the file holding the executor's secret (mode 0600)",
        "triple": "target triple of the executor's machine (default: this machine's)",
        "site_packages": "where the node's packages are installed on the executor's machine, when they are "
                         "not this machine's (Executor.ssh sets it); library paths are re-rooted there",
    }
)
_PORT_OPTIONS = ("port", "ssh_port")


def _check_port(port: Any, what: str) -> None:
    # bool is an int subclass; True as a port is always a mistake.
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise PlacementError(f"{what} {_short(port)} is not a port: pass an int from 1 to 65535")


def _check_host(host: Any, what: str) -> None:
    if not isinstance(host, str) or not host:
        raise PlacementError(f"{what} {host!r} is not a host: pass a host name or an IP address as a non-empty str")
    if host.startswith("[") and host.endswith("]"):
        raise PlacementError(f"{what} {host!r}: write an IPv6 address without brackets, e.g. '::1'")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    problem = None
    labels = host.split(".")
    if len(host) > 253:
        problem = f"it is {len(host)} characters long (at most 253)"
    for label in labels:
        if problem:
            break
        if not 1 <= len(label) <= 63:
            problem = f"label {label!r} must be 1 to 63 characters"
        elif not set(label) <= _LABEL_CHARS:
            problem = f"label {label!r} may only hold letters, digits and '-'"
        elif label[0] == "-" or label[-1] == "-":
            problem = f"label {label!r} must not start or end with '-'"
    # An all-digit last label is a mistyped IPv4 address (e.g. 10.0.0.256), not a name.
    if problem is None and labels[-1].isdigit():
        problem = "it looks like an IPv4 address but is not a valid one"
    if problem:
        raise PlacementError(
            f"{what} {host!r} is neither an IP address nor an RFC 1123 host name: {problem}"
        )


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """A network address a coprocessor listens on.

    >>> str(Endpoint(host="::1", port=9000))
    '[::1]:9000'
    """

    host: str
    port: int

    def __post_init__(self) -> None:
        _check_host(self.host, "Endpoint host")
        _check_port(self.port, "Endpoint port")

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """Parse ``host:port`` or ``[v6addr]:port`` (the inverse of ``str()``)."""
        if not isinstance(text, str):
            raise PlacementError(f"address {text!r} is not a str: write it as 'host:port'")
        if text.startswith("["):
            close = text.find("]")
            host, rest = text[1:close], text[close + 1 :]
            if close < 0 or not rest.startswith(":") or ":" not in host:
                raise PlacementError(f"address {text!r} is not '[v6addr]:port'")
            port_text = rest[1:]
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                raise PlacementError(f"address {text!r} has no port: write it as 'host:port'")
            if ":" in host:
                raise PlacementError(f"address {text!r}: put an IPv6 address in brackets, '[{host}]:{port_text}'")
        if not (port_text.isascii() and port_text.isdigit()):
            raise PlacementError(f"address {text!r}: port {port_text!r} is not a number from 1 to 65535")
        if len(port_text) > 5:
            raise PlacementError(f"address {_short(text)}: port is not a number from 1 to 65535")
        return cls(host=host, port=int(port_text))


def _check_executor_options(options: Mapping[str, Any], who: str) -> None:
    unknown = sorted(str(k) for k in options if k not in EXECUTOR_OPTIONS)
    if unknown:
        known = "; ".join(f"{k} ({d})" for k, d in EXECUTOR_OPTIONS.items())
        raise PlacementError(f"{who}: unknown executor_options {unknown}; allowed: {known}")
    if "address" in options and "port" in options:
        raise PlacementError(
            f"{who}: executor_options gives both 'address' and 'port'; give either address='host:port' "
            "or host= and port=, not both (with address, host names the machine the executor runs on)"
        )
    for key, value in options.items():
        what = f"{who}: executor_options[{key!r}]"
        if key == "address":
            try:
                Endpoint.parse(value)
            except PlacementError as exc:
                raise PlacementError(f"{what}: {exc}") from None
        elif key == "host":
            _check_host(value, what)
        elif key in _PORT_OPTIONS:
            _check_port(value, what)
        elif not isinstance(value, str) or not value:
            raise PlacementError(f"{what} must be a non-empty str, not {value!r}")


def _check_init_args(args: Mapping[str, Any], who: str) -> None:
    for key, value in args.items():
        if not isinstance(key, str) or not key:
            raise PlacementError(f"{who}: init_args key {key!r} must be a non-empty str")
        if not isinstance(value, (str, int, float, bool)):
            raise PlacementError(
                f"{who}: init_args[{key!r}] = {value!r} has type {type(value).__name__}; "
                "values must be str, int, float or bool"
            )
        # nan never equals itself and inf has no portable text form: both would break round trips.
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            raise PlacementError(f"{who}: init_args[{key!r}] = {_short(value)}; integers must fit in 64 bits")
        if isinstance(value, float) and not math.isfinite(value):
            raise PlacementError(f"{who}: init_args[{key!r}] = {value!r}; floats must be finite")
    try:
        config.format_config(args)
    except ValueError as exc:
        raise PlacementError(f"{who}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Node:
    """Fields every node has. Build a :class:`Controller` or a :class:`Coprocessor`.

    ``name`` is the session key (empty: the placement assigns a default): 1 to 64 letters,
    digits, ``_``, ``.``, ``-``, starting with a letter or a digit;
    ``remote``/``executor_options`` say whether and how the node runs out of process;
    ``init_args`` configure its transport session (see :mod:`backline_core._config`).
    Mappings are stored read-only, and left out of the hash (equality still compares them).
    """

    name: str = ""
    hardware: str = "cpu"
    remote: bool = False
    executor_options: Mapping[str, str | int] = field(default_factory=dict, hash=False)
    init_args: Mapping[str, config.ConfigValue] = field(default_factory=dict, hash=False)
    endpoint: Endpoint | None = None
    #: init_args with their types and exact text (1, 1.0, True and -0.0 differ); compared, not hashed
    _typed_args: tuple = field(default=(), init=False, repr=False, hash=False)

    _ROLE = ""  # no annotation: a class constant, not a field

    def __post_init__(self) -> None:
        if not self._ROLE:
            raise PlacementError("Node is an abstract base: build a Controller(...) or a Coprocessor(...)")
        if not isinstance(self.name, str) or (self.name and not _NODE_NAME.fullmatch(self.name)):
            raise PlacementError(
                f"{self._ROLE} name {self.name!r} is invalid: use 1-{lib.BL_KEY_MAX_LEN} characters of letters, "
                "digits, '_', '.', '-' "
                "starting with a letter or digit (or leave it empty for a default name)"
            )
        who = f"{self._ROLE} {self.name!r}" if self.name else f"the {self._ROLE}"
        if self.hardware not in HARDWARE:
            raise PlacementError(f"{who}: hardware {self.hardware!r} is unknown; use one of {', '.join(HARDWARE)}")
        if not isinstance(self.remote, bool):
            raise PlacementError(f"{who}: remote={self.remote!r} must be True or False")
        for attr in ("executor_options", "init_args"):
            value = getattr(self, attr)
            if not isinstance(value, Mapping):
                raise PlacementError(f"{who}: {attr} must be a mapping (dict), not {type(value).__name__}")
            object.__setattr__(self, attr, MappingProxyType(dict(value)))
        _check_executor_options(self.executor_options, who)
        _check_init_args(self.init_args, who)
        object.__setattr__(self, "_typed_args", tuple(sorted((k, type(v).__name__, repr(v))
                                                             for k, v in self.init_args.items())))
        if self.endpoint is not None and not isinstance(self.endpoint, Endpoint):
            raise PlacementError(f"{who}: endpoint must be an Endpoint(host=..., port=...), not {self.endpoint!r}")
        if self.remote and not ("address" in self.executor_options or "host" in self.executor_options):
            raise PlacementError(
                f"{who}: remote=True but nothing says how to reach the machine: set "
                "executor_options={'address': 'host:port'} or {'host': ...}"
            )

    @property
    def role(self) -> str:
        """``"controller"`` or ``"coprocessor"``."""
        return self._ROLE

    @property
    def dispatched(self) -> bool:
        """Whether an executor runs this node out of process."""
        return bool(self.remote or self.executor_options)

    def config_string(self) -> str:
        """The node's init_args as the configuration string the native runtime reads."""
        return config.format_config(self.init_args)

    def __reduce__(self) -> tuple[Any, ...]:
        # mappingproxy cannot be pickled or deep-copied; rebuild from plain dicts instead.
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        kwargs["executor_options"], kwargs["init_args"] = dict(self.executor_options), dict(self.init_args)
        return (_rebuild, (type(self), kwargs))


@dataclass(frozen=True, kw_only=True)
class Controller(Node):
    """The node that runs the quantum program and posts syndromes to coprocessors.

    ``device`` is the quantum device it drives (a PennyLane device such as
    ``qml.device("null.qubit", wires=3)``; ``backline_compiler.Backline`` takes its wires and
    runtime from it). It is not part of the serialized placement.
    """

    device: Any = field(default=None, compare=False, hash=False)

    _ROLE = "controller"


@dataclass(frozen=True, kw_only=True)
class Coprocessor(Node):
    """A node that answers the controller's messages with ``coprocessor_fn``.

    ``coprocessor_fn`` is a decoder plugin name, a :class:`CoprocessorFunction`, or a
    Python callable ``fn(decoder_id, payload) -> bytes`` (wrapped into a CoprocessorFunction).
    ``runs_in`` says where it runs relative to the controller: ``"controller-thread"`` (the
    controller's own thread runs it at post time), ``"thread"`` (a thread of the
    controller's process), ``"process"`` (another local process, which ``deploy`` starts),
    ``"executor"`` (a process an executor starts from the node's compiled code, on this machine
    or another: pass ``executor=`` or ``executor_options=``); ``None`` takes the transport's
    default (``"executor"`` when an executor is given). The transport must support it
    (resolution checks).
    """

    coprocessor_fn: str | CoprocessorFunction | Callable[..., Any]
    runs_in: str | None = None
    #: An executor handle (e.g. ``backline_executor_orc.Executor.local()``): shorthand for
    #: ``executor_options=handle.placement_options()``. Only its options are kept.
    executor: Any = field(default=None, compare=False, hash=False, repr=False)

    _ROLE = "coprocessor"

    def __post_init__(self) -> None:
        who = f"coprocessor {self.name!r}" if self.name else "the coprocessor"
        if self.executor is not None:
            options = getattr(self.executor, "placement_options", None)
            if not callable(options):
                raise PlacementError(
                    f"{who}: executor={_short(self.executor)} is not an executor handle (it needs "
                    "placement_options()); pass e.g. Executor.local() from backline_executor_orc, "
                    "or executor_options={...}"
                )
            if self.executor_options:
                raise PlacementError(f"{who}: give executor= or executor_options=, not both")
            object.__setattr__(self, "executor_options", dict(options()))
            object.__setattr__(self, "executor", None)  # a placement is a value: keep the options only
        super().__post_init__()
        if self.runs_in is not None and not (isinstance(self.runs_in, str) and self.runs_in in RUNS_IN):
            raise PlacementError(
                f"{who}: runs_in={_short(self.runs_in)} is not a place; use one of {', '.join(map(repr, RUNS_IN))} "
                "(or None for the transport's default)"
            )
        if self.dispatched and self.runs_in not in (None, "executor"):
            raise PlacementError(
                f"{who}: runs_in={self.runs_in!r} but executor_options put it in an executor; "
                "leave runs_in unset (or 'executor')"
            )
        if self.runs_in == "executor" and not self.dispatched:
            raise PlacementError(
                f"{who}: runs_in='executor' needs an executor: pass executor=Executor.local() (backline-executor-orc) "
                "or executor_options={'address': 'host:port', 'secret_file': ...}"
            )
        fn = self.coprocessor_fn
        if isinstance(fn, str):
            if not fn:
                raise PlacementError(
                    "coprocessor_fn is an empty str: name a decoder plugin, or pass a CoprocessorFunction or a callable"
                )
        elif not isinstance(fn, CoprocessorFunction):
            if not callable(fn):
                raise PlacementError(
                    f"coprocessor_fn={fn!r} is neither a decoder plugin name (str), a CoprocessorFunction, "
                    "nor a callable fn(decoder_id, payload) -> bytes"
                )
            name = getattr(fn, "__name__", None) or type(fn).__name__
            object.__setattr__(self, "coprocessor_fn", CoprocessorFunction(name=name, python=fn))


def _rebuild(cls: type, kwargs: dict[str, Any]) -> Any:
    return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class Placement:
    """A controller, its coprocessors and the transport joining them.

    Nodes left unnamed get default names ("controller", "coprocessor0", ...); the
    stored nodes carry their final names. Building one checks its shape only; which
    plugins run it is :func:`backline_core._resolution.resolve`'s business.

    >>> from backline_core._placement import Controller, Coprocessor, Placement
    >>> p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="steane")],
    ...               transport="any-transport")
    >>> [node.name for node in p.nodes], p.transport
    (['controller', 'coprocessor0'], 'any-transport')
    """

    controller: Controller
    coprocessors: Sequence[Coprocessor] = ()
    transport: str = "memcpy"
    qec_code: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.controller, Controller):
            raise PlacementError(
                f"controller must be a Controller(...), got {type(self.controller).__name__}: {_short(self.controller)}"
            )
        if isinstance(self.coprocessors, (Coprocessor, str, bytes)) or not isinstance(self.coprocessors, Sequence):
            raise PlacementError(
                f"coprocessors must be a list of Coprocessor nodes, got {type(self.coprocessors).__name__}: "
                f"{_short(self.coprocessors)} (wrap a single node in a list)"
            )
        coprocessors = tuple(self.coprocessors)
        for i, node in enumerate(coprocessors):
            if not isinstance(node, Coprocessor):
                raise PlacementError(
                    f"coprocessors[{i}] must be a Coprocessor(...), got {type(node).__name__}: {_short(node)}"
                )
        object.__setattr__(self, "coprocessors", coprocessors)
        nodes = (self.controller, *coprocessors)
        # Labels for messages; the same defaults are applied to the nodes below.
        labels = [n.name or default for n, default in zip(nodes, _default_names(len(coprocessors)))]

        if not isinstance(self.transport, str) or not self.transport:
            raise PlacementError(f"transport must be the name of a transport plugin (a str), not {self.transport!r}")

        named = tuple(n if n.name == label else dataclasses.replace(n, name=label) for n, label in zip(nodes, labels))
        seen: set[str] = set()
        for label in labels:
            if label in seen:
                raise PlacementError(
                    f"node name {label!r} is used twice; node names are session keys and must be unique "
                    "(rename one of them, or leave names empty for defaults)"
                )
            seen.add(label)
        object.__setattr__(self, "controller", named[0])
        object.__setattr__(self, "coprocessors", named[1:])

        if self.qec_code is not None and not (isinstance(self.qec_code, str) and IDENTIFIER.fullmatch(self.qec_code)):
            raise PlacementError(
                f"qec_code {self.qec_code!r} must be None or a non-empty identifier "
                "(letters, digits, '_', '.', '-', not starting with a digit, '.' or '-'), e.g. 'steane'"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}))

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The controller followed by the coprocessors."""
        return (self.controller, *self.coprocessors)

    def coprocessor(self, name: str) -> Coprocessor:
        """The coprocessor called ``name``."""
        for node in self.coprocessors:
            if node.name == name:
                return node
        names = ", ".join(repr(n.name) for n in self.coprocessors) or "none"
        raise PlacementError(f"no coprocessor named {name!r} in this placement; coprocessors: {names}")

    # -- serialized forms (see backline_core._serialization) --------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with ``"format": "backline.placement/1"``."""
        from . import _serialization as serialization

        return serialization.placement_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        """Inverse of :meth:`to_dict`."""
        from . import _serialization as serialization

        return serialization.placement_from_dict(data)

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys, compact)."""
        from . import _serialization as serialization

        return serialization.placement_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Placement:
        """Inverse of :meth:`to_json`."""
        from . import _serialization as serialization

        return serialization.placement_from_json(text)


def _default_names(n_coprocessors: int) -> list[str]:
    return ["controller", *(f"coprocessor{i}" for i in range(n_coprocessors))]
