"""Resolve a placement against the installed plugins, in one step.

A :class:`~backline_core._placement.Placement` is a value that checks only its own shape.
:func:`resolve` decides whether the installed plugins can run it and returns what
deployment needs, per node: the backend library for (transport, hardware, role), the
configuration the backend accepted, where a coprocessor runs and its built function. It
checks everything a deploy would otherwise find late -- a transport that does not serve
a node, a place it cannot run a coprocessor in, configuration keys or values the core or
the backend refuses (by the backend's own code, ``bl_config_check``), a decoder whose build
parameters are missing, a native function whose library or symbol does not load.
``deploy``, ``backline bench``, the frontend device and the compiler passes all call it.

>>> from backline_core import Controller, Coprocessor, Placement, plugins
>>> from backline_core._resolution import resolve
>>> if "memcpy" in plugins.names("transport"):
...     r = resolve(Placement(controller=Controller(), transport="memcpy",
...                           coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="process")]))
...     assert (r.coprocessor("dec").runs_in, r.coprocessor("dec").function.name) == ("process", "steane")
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from . import _plugins as plugins
from ._config import format_config, parse_config
from ._coprocessor_function import CoprocessorFunction
from ._errors import PlacementError, PluginError, TransportError
from ._hookspecs import Transport
from ._abi import check, lib, load_symbol
from ._placement import Coprocessor, Endpoint, Node, Placement
from ._session import ROLES, c_string, runs_in_code


#: The executor plugin a dispatched coprocessor uses when its executor_options name none.
DEFAULT_EXECUTOR = "orc"


@dataclass(frozen=True)
class ResolvedNode:
    """One node of a resolved placement, as deployment uses it."""

    node: Node
    #: the transport part (one distribution's record) serving this node's (hardware, role)
    transport: Transport
    #: path of its backend library
    library: str
    #: the configuration string the core and the backend accepted
    config: str
    #: coprocessor: where it runs (a ``RUNS_IN`` value); controller: None
    runs_in: str | None = None
    #: coprocessor: its built function
    function: CoprocessorFunction | None = None
    #: coprocessor: the configuration of the controller's session with it (the controller's
    #: init_args, plus this coprocessor's endpoint where the transport needs one)
    controller_config: str = ""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def role(self) -> str:
        return self.node.role

    @property
    def hardware(self) -> str:
        return self.node.hardware

    def __str__(self) -> str:
        where = f", runs in {self.runs_in}" if self.runs_in else ""
        fn = f", function {self.function.name}" if self.function else ""
        return (f"{self.role} {self.name!r}: {self.transport.name} ({self.transport.distribution}) "
                f"{self.hardware}/{self.role}{where}, config {self.config!r}{fn}")

    @property
    def executor_options(self) -> dict[str, str | int]:
        """Coprocessor in an executor: how to reach it (its node's executor_options); else empty."""
        return dict(self.node.executor_options) if self.runs_in == "executor" else {}

    @property
    def in_controller_process(self) -> bool:
        """Whether this coprocessor lives in the controller's process (its thread or another)."""
        return self.runs_in in ("controller-thread", "thread")


@dataclass(frozen=True)
class Resolution:
    """A placement with every node resolved (see :func:`resolve`)."""

    placement: Placement
    controller: ResolvedNode
    coprocessors: tuple[ResolvedNode, ...]

    def coprocessor(self, name: str) -> ResolvedNode:
        """The resolved coprocessor called ``name``."""
        self.placement.coprocessor(name)  # an unknown name is its PlacementError, listing the names
        return next(node for node in self.coprocessors if node.name == name)


_cache: dict[tuple[Placement, int], Resolution] = {}
_cache_lock = threading.Lock()
_CACHE_SIZE = 64


def resolve(placement: Placement) -> Resolution:
    """Resolve ``placement`` against the installed plugins; raise PlacementError saying what to change.

    Results are cached per placement value (until a plugin is registered or loaded)."""
    if not isinstance(placement, Placement):
        raise PlacementError(f"resolve() takes a Placement, not {type(placement).__name__}")
    key = (placement, plugins.registry().generation)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    result = _resolve(placement)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[key] = result
    return result


def _resolve(placement: Placement) -> Resolution:
    name = placement.transport
    ctl = placement.controller
    if ctl.dispatched:
        raise PlacementError(
            f"controller {ctl.name!r} has executor_options/remote=True; only coprocessors run in executors, "
            "so run the controller's program on its machine and put its coprocessors in executors"
        )
    ctl_part = _part(name, ctl)
    ctl_library = ctl_part.library(ctl.hardware, "controller")
    coprocessors = []
    for node in placement.coprocessors:
        part = _part(name, node, ctl_part)
        if part.needs_endpoint and node.endpoint is None:
            raise PlacementError(
                f"transport {name!r} needs a network endpoint on each coprocessor: pass "
                f"endpoint=Endpoint(host=..., port=...) (coprocessor {node.name!r} has none)"
            )
        runs_in = "executor" if node.dispatched else node.runs_in or part.runs_in[0]
        if runs_in not in part.runs_in:
            raise PlacementError(
                f"coprocessor {node.name!r}: transport {name!r} ({part.distribution}) runs coprocessors in "
                f"{', '.join(part.runs_in)}, not {runs_in!r}; choose one of those or another transport"
            )
        library = part.library(node.hardware, "coprocessor")
        config, ctl_config = node.config_string(), ctl.config_string()
        if part.needs_endpoint:
            config, ctl_config = _with_endpoint(node, node, name), _with_endpoint(ctl, node, name)
        _check_config(library, "coprocessor", node, node.name, config, runs_in)
        # The controller's session for this key expects the coprocessor where the placement puts it.
        _check_config(ctl_library, "controller", ctl, node.name, ctl_config, runs_in)
        function = _function(node, runs_in)
        if runs_in == "executor":
            _check_executor(node, part, function)
            library, function = _on_executor_machine(node, library, function)
        coprocessors.append(ResolvedNode(node, part, library, config, runs_in, function, ctl_config))
    if not placement.coprocessors:
        _check_config(ctl_library, "controller", ctl, ctl.name, ctl.config_string(), None)
    controller = ResolvedNode(ctl, ctl_part, ctl_library, ctl.config_string())
    return Resolution(placement, controller, tuple(coprocessors))


#: The configuration key of a networked transport's secret (backline/sdk/remote.h reads it).
SECRET_KEY = "secret_file"


def needs_secret(resolution: Resolution) -> bool:
    """Whether some coprocessor's transport authenticates its ends and neither end names a secret."""
    return any(node.transport.needs_endpoint and SECRET_KEY not in parse_config(node.config)
               and SECRET_KEY not in parse_config(node.controller_config) for node in resolution.coprocessors)


def with_secret(placement: Placement, path: str) -> Placement:
    """``placement`` with ``secret_file=path`` in the init_args of its controller and of each
    coprocessor that has none (call it when :func:`needs_secret` says so): one value that both
    ends read, wherever the placement goes next (a deployment, a compiled program)."""
    def add(node: Any) -> Any:
        if SECRET_KEY in node.init_args:
            return node
        return dataclasses.replace(node, init_args={**node.init_args, SECRET_KEY: path})

    try:
        return dataclasses.replace(placement, controller=add(placement.controller),
                                   coprocessors=[add(c) for c in placement.coprocessors])
    except (ValueError, PlacementError) as exc:
        raise PlacementError(f"the deployment's secret file {path!r}: {exc}") from None


#: The configuration keys that carry a coprocessor's Endpoint to a transport that needs one.
ENDPOINT_KEYS = ("host", "port")


def _with_endpoint(side: Node, coprocessor: Coprocessor, transport: str) -> str:
    """``side``'s configuration (the coprocessor's own, or its controller's for this pair) with
    the coprocessor's endpoint as ``host`` and ``port``: one value, read by both backends."""
    clash = [key for key in ENDPOINT_KEYS if key in side.init_args]
    if clash:
        raise PlacementError(
            f"{side.role} {side.name!r}: init_args set {', '.join(clash)}, which transport {transport!r} takes from "
            f"the coprocessor's endpoint; give endpoint=Endpoint(host=..., port=...) on coprocessor "
            f"{coprocessor.name!r} instead"
        )
    assert coprocessor.endpoint is not None
    args = {**side.init_args, "host": coprocessor.endpoint.host, "port": coprocessor.endpoint.port}
    try:
        return format_config(args)
    except ValueError as exc:
        raise PlacementError(f"{side.role} {side.name!r}: {exc}") from None


def _check_executor(node: Coprocessor, part: Transport, function: CoprocessorFunction) -> None:
    """What an executor-run coprocessor needs from this host's side."""
    opts = node.executor_options
    who = f"coprocessor {node.name!r}"
    kind = str(opts.get("executor", DEFAULT_EXECUTOR))
    try:
        plugins.get("executor", kind)  # UnknownPluginError lists the installed executors
    except PluginError as exc:
        raise PlacementError(f"{who} runs in an executor: {exc}") from None
    if "address" not in opts and "port" not in opts:
        raise PlacementError(f"{who}: executor_options say nothing about where to reach the executor: give "
                             "address='host:port' (or host= and port=), or pass executor=Executor.local()")
    if "secret_file" not in opts:
        raise PlacementError(f"{who}: executor_options need secret_file, the file holding the executor's secret "
                             "(Executor.local() and Executor.ssh() make one)")
    if function.is_python:
        raise PlacementError(f"{who}: function {function.name!r} is a Python callable; an executor runs compiled "
                             "code, so give a native function (a decoder plugin such as 'steane', or a "
                             "CoprocessorFunction with library= and symbol=)")
    machine = str(opts["host"]) if "host" in opts else Endpoint.parse(str(opts["address"])).host
    if not part.needs_endpoint and not on_this_machine(machine):
        raise PlacementError(f"{who}: transport {part.name!r} ({part.distribution}) joins nodes on one machine, "
                             f"but its executor runs on {machine!r}; use a transport that crosses machines")


def _on_executor_machine(node: Coprocessor, library: str,
                         function: CoprocessorFunction) -> tuple[str, CoprocessorFunction]:
    """The node's library paths as its executor's machine sees them.

    An executor whose packages were deployed elsewhere (``Executor.ssh`` sets
    ``site_packages``) has the same package files under another directory: each path is
    re-rooted there, package-relative. Without ``site_packages`` the paths stay (same machine)."""
    site = node.executor_options.get("site_packages")
    if not site:
        return library, function
    library = executor_path(library, str(site), node.name)
    if function.library:
        function = dataclasses.replace(function, library=executor_path(function.library, str(site), node.name))
    return library, function


def executor_path(path: str, site_packages: str, who: str = "") -> str:
    """``path`` (a file inside an importable package here) under ``site_packages`` instead."""
    directory = os.path.dirname(os.path.realpath(path))
    while directory != os.path.dirname(directory):
        name = os.path.basename(directory)
        try:
            spec = importlib.util.find_spec(name) if name.isidentifier() else None
        except (ImportError, ValueError):
            spec = None
        locations = [os.path.realpath(p) for p in (spec.submodule_search_locations or [])] if spec else []
        if directory in locations:
            return os.path.join(site_packages, os.path.relpath(os.path.realpath(path), os.path.dirname(directory)))
        directory = os.path.dirname(directory)
    raise PlacementError(
        f"coprocessor {who!r}: {path} is not inside an installed Python package, so its executor's machine "
        f"cannot find it under {site_packages}; install it there (Executor.ssh(packages=...))"
    )


def on_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (a loopback address or this host's name)."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _part(name: str, node: Node, controller_part: Transport | None = None) -> Transport:
    try:
        return plugins.transport_backend(name, node.hardware, node.role)
    except PlacementError as exc:
        hint = ""
        if controller_part is not None and controller_part.needs_endpoint:
            hint = (f"; a coprocessor served by something Backline does not start is reached with "
                    f"connect_controller(placement, {node.name!r}, in_bytes=..., out_bytes=...)")
        raise PlacementError(f"{node.role} {node.name!r}: {exc}{hint}") from None


def served_elsewhere(placement: Placement, coprocessor: str) -> bool:
    """Whether no installed part of the placement's transport serves ``coprocessor``'s side: its
    coprocessor is a server that Backline does not run (cuqr's decoding servers)."""
    node = placement.coprocessor(coprocessor)
    parts = plugins.registry().transport_parts(placement.transport)
    return not any((node.hardware, "coprocessor") in part.serves for part in parts)


def resolve_controller(placement: Placement, coprocessor: str) -> tuple[ResolvedNode, ResolvedNode]:
    """The controller's side alone of its session with ``coprocessor``, which is served at its
    Endpoint by a server Backline neither starts nor checks (see :func:`served_elsewhere`): the
    controller's part and library, the place its part allows, and its configuration with the
    endpoint and both nodes' init_args (the coprocessor's have no other reader), checked by its
    backend. Returns the resolved controller and coprocessor (the latter
    with no library, configuration or function: the server has those)."""
    name, ctl, node = placement.transport, placement.controller, placement.coprocessor(coprocessor)
    ctl_part = _part(name, ctl)
    ctl_library = ctl_part.library(ctl.hardware, "controller")
    if node.endpoint is None:
        raise PlacementError(f"coprocessor {node.name!r} has no Endpoint: a controller can only connect to a "
                             "coprocessor served elsewhere at a host and port")
    runs_in = "executor" if node.dispatched else node.runs_in or ctl_part.runs_in[0]
    if runs_in not in ctl_part.runs_in:
        raise PlacementError(
            f"coprocessor {node.name!r}: transport {name!r} ({ctl_part.distribution}) reaches coprocessors in "
            f"{', '.join(ctl_part.runs_in)}, not {runs_in!r}; choose one of those or another transport"
        )
    # No backend reads the coprocessor's init_args on its side: they describe the server to the
    # controller's session with it (cuqr: which decoder, how many bits), beside the controller's own.
    clash = sorted(set(ctl.init_args) & set(node.init_args))
    if clash:
        raise PlacementError(f"coprocessor {node.name!r}: init_args {', '.join(clash)} are also the controller's; "
                             "give each key on one of them")
    both = dataclasses.replace(ctl, init_args={**ctl.init_args, **node.init_args})
    ctl_config = _with_endpoint(both, node, name) if ctl_part.needs_endpoint else both.config_string()
    _check_config(ctl_library, "controller", both, node.name, ctl_config, runs_in)
    controller = ResolvedNode(ctl, ctl_part, ctl_library, ctl.config_string())
    return controller, ResolvedNode(node, ctl_part, "", "", runs_in, None, ctl_config)


def _check_config(library: str, role: str, node: Node, key: str, config: str, runs_in: str | None) -> None:
    try:
        check(lib.bl_config_check(c_string(library, "backend library"), ROLES[role], c_string(key, "session key"),
                                  c_string(config, "configuration"), runs_in_code(role, runs_in)))
    except (TransportError, UnicodeEncodeError) as exc:
        if isinstance(exc, TransportError) and exc.status != "BL_EINVAL":
            raise PlacementError(f"{role} {node.name!r}: its transport backend {library} cannot be used: {exc}") \
                from None
        raise PlacementError(f"{role} {node.name!r}: init_args {dict(node.init_args)!r} refused: {exc}") from None


def _function(node: Coprocessor, runs_in: str) -> CoprocessorFunction:
    fn = node.coprocessor_fn
    if isinstance(fn, str):
        record = plugins.get("decoder", fn)  # UnknownPluginError lists the installed decoders
        if node.hardware not in record.hardware:
            raise PlacementError(
                f"coprocessor {node.name!r}: decoder {fn!r} runs on {', '.join(record.hardware)}, "
                f"not {node.hardware}"
            )
        try:
            inspect.signature(record.build).bind()
        except TypeError:
            needed = [p.name for p in inspect.signature(record.build).parameters.values()
                      if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            raise PlacementError(
                f"coprocessor {node.name!r}: decoder {fn!r} needs build parameters ({', '.join(needed)}), which a "
                f"decoder name cannot carry; build the function and pass it instead: coprocessor_fn="
                f"plugins.get('decoder', {fn!r}).build({', '.join(f'{n}=...' for n in needed)})"
            ) from None
        try:
            function = record.build()
        except Exception as exc:
            raise PlacementError(f"coprocessor {node.name!r}: decoder {fn!r} failed to build: {exc}") from exc
        if not isinstance(function, CoprocessorFunction):
            raise PluginError(f"decoder {fn!r} ({record.distribution}) built {function!r}, not a CoprocessorFunction")
    else:
        function = fn  # Coprocessor wraps callables into CoprocessorFunction
    if function.is_python:
        if runs_in == "process":
            try:
                function.to_dict()  # another process imports it by module:qualname
            except PlacementError as exc:
                raise PlacementError(f"coprocessor {node.name!r} runs in another process: {exc}") from None
    else:
        try:
            for symbol, ctype in ((function.symbol, "bl_coprocessor_fn"), (function.init_symbol, "bl_fn_init"),
                                  (function.fini_symbol, "bl_fn_fini")):
                if symbol:
                    load_symbol(function.library, symbol, ctype)
        except PluginError as exc:
            raise PlacementError(f"coprocessor {node.name!r}: function {function.name!r}: {exc}") from None
    return function
