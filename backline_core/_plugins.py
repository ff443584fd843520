"""Plugin discovery and loading.

Entry points are loaded with stevedore, one kind (entry-point group) at a time and, for a
lookup by name, only the entry points of that name: choosing ``memcpy`` never imports
another transport, and listing transports imports no compiler pass. A plugin that fails to
import is recorded with its error and never stops the others (nor another distribution's
plugin of the same name). Every loaded plugin is registered with one pluggy
``PluginManager`` whose hook specs live in :mod:`backline_core._hookspecs`; one hook call
per kind collects every plugin's records.

Names are unique per kind, except transports: several distributions may each serve a
part of one transport name, as long as no (name, hardware, role) is claimed twice.

>>> from backline_core import plugins
>>> plugins.get("decoder", "steane").name
'steane'
"""

from __future__ import annotations

import importlib.metadata
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import pluggy
from stevedore import extension, named

from ._errors import PluginError, UnknownPluginError, short_repr as _short
from ._hookspecs import ENTRY_POINT_GROUPS, PROJECT, RECORD_TYPES, BacklineSpecs, Transport

_KIND_TO_GROUP = {kind: group for group, kind in ENTRY_POINT_GROUPS.items()}
IN_PROCESS = "(registered in process)"


@dataclass(frozen=True)
class PluginInfo:
    """One row of ``backline plugins``."""

    kind: str
    name: str
    distribution: str
    version: str
    serves: str
    error: str | None = None
    #: what a record says of itself beyond ``serves`` (a decoder: its parameter schema, its sources)
    details: dict[str, Any] | None = None


def _check_kind(kind: str) -> str:
    if kind not in _KIND_TO_GROUP:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds: {', '.join(_KIND_TO_GROUP)}")
    return _KIND_TO_GROUP[kind]


def _format_error(err: BaseException) -> str:
    lines = traceback.format_exception_only(type(err), err)
    return lines[-1].strip() if lines else repr(err)


class PluginRegistry:
    """Loads plugins from entry points and collects the records they provide."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(BacklineSpecs)
        self._lock = threading.RLock()
        self._attempted: set[tuple[str, str]] = set()  # (group, entry-point name) loaded or tried
        self._group_loaded: set[str] = set()  # groups whose every entry point was tried
        self._errors: dict[tuple[str, str, str], str] = {}  # (kind, name, distribution) -> load error
        self._plugin_dist: dict[str, str] = {}  # registered name of an entry-point plugin -> distribution
        self._records: dict[str, list[Any]] = {}  # kind -> records of the last hook call
        self._dists: dict[tuple[str, str, str], tuple[str, str]] | None = None
        #: bumped whenever the set of registered plugins changes (resolution caches on it)
        self.generation = 0

    # -- registration -----------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin object (a module or any object with hookimpls).

        Its records become resolvable by name exactly like entry-point plugins; a name it
        shares with an installed plugin is an error at lookup, naming both.
        """
        with self._lock:
            if self.pm.is_registered(plugin):
                return
            try:
                self.pm.register(plugin, name=name)
            except pluggy.PluginValidationError as exc:
                raise PluginError(f"plugin {name or plugin!r} does not fit Backline's hook specs: {exc}") from None
            self.generation += 1
            self._records.clear()
            try:
                self.pm.check_pending()
            except pluggy.PluginValidationError as exc:
                # A misspelt hook must not poison the manager for every other plugin.
                self.unregister(plugin)
                raise PluginError(
                    f"plugin {name or plugin!r} implements a hook Backline does not define: {exc}; "
                    "hook names are " + ", ".join(hook for _, hook in RECORD_TYPES.values())
                ) from None
            try:
                self._probe(plugin)
            except PluginError as exc:
                self.unregister(plugin)
                raise PluginError(f"plugin {name or plugin!r}: {exc}") from None

    def unregister(self, plugin: object) -> None:
        """Remove a plugin registered with :meth:`register` and forget its records."""
        with self._lock:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
                self.generation += 1
            self._records.clear()

    # -- loading ----------------------------------------------------------------------

    def _distributions(self) -> dict[tuple[str, str, str], tuple[str, str]]:
        """(group, name, entry-point value) -> (distribution, version) of every installed entry point."""
        if self._dists is None:
            out: dict[tuple[str, str, str], tuple[str, str]] = {}
            for dist in importlib.metadata.distributions():
                for ep in dist.entry_points:
                    if ep.group in ENTRY_POINT_GROUPS:
                        out.setdefault((ep.group, ep.name, ep.value), (dist.metadata["Name"], dist.version))
            self._dists = out
        return self._dists

    def _dist_of(self, group: str, name: str, value: str) -> tuple[str, str]:
        return self._distributions().get((group, name, value), ("?", "?"))

    def _load(self, kind: str, name: str | None = None) -> None:
        """Import the entry points of ``kind`` (those called ``name``, or all) not tried yet."""
        group = _check_kind(kind)
        with self._lock:
            if group in self._group_loaded or (name is not None and (group, name) in self._attempted):
                return
            failed: list[tuple[Any, BaseException]] = []

            def on_failure(_mgr: Any, ep: Any, err: BaseException) -> None:
                failed.append((ep, err))

            common = dict(namespace=group, invoke_on_load=False, on_load_failure_callback=on_failure)
            if name is None:
                mgr: Any = extension.ExtensionManager(**common)
            else:
                mgr = named.NamedExtensionManager(names=[name], on_missing_entrypoints_callback=None, **common)
            for ext in mgr.extensions:
                ep = ext.entry_point
                dist, _ = self._dist_of(group, ep.name, ep.value)
                self._attempted.add((group, ep.name))
                if self.pm.is_registered(ext.plugin):
                    continue
                plugin_name = f"{group}:{ep.name}:{ep.value}"
                try:
                    self.register(ext.plugin, name=plugin_name)
                except PluginError as exc:  # a broken plugin is a row of the listing, never an outage
                    self._errors[(kind, ep.name, dist)] = str(exc)
                    continue
                self._plugin_dist[plugin_name] = dist
            for ep, err in failed:
                dist, _ = self._dist_of(group, ep.name, ep.value)
                self._errors[(kind, ep.name, dist)] = _format_error(err)
                self._attempted.add((group, ep.name))
            if name is None:
                self._group_loaded.add(group)
            else:
                self._attempted.add((group, name))

    def _probe(self, plugin: object) -> None:
        """Check a newly loaded plugin's hooks once, so a hook that raises or returns the wrong
        thing is refused at load (with its error) instead of breaking every later hook call."""
        for kind, (rtype, hook_name) in RECORD_TYPES.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                try:
                    batch = impl.function()
                except Exception as exc:
                    raise PluginError(f"{hook_name}() raised {_format_error(exc)}") from exc
                if not isinstance(batch, (list, tuple)) or not all(isinstance(r, rtype) for r in batch):
                    raise PluginError(f"{hook_name}() returned {_short(batch)}; return a list of "
                                      f"{rtype.__name__} records")

    def records(self, kind: str) -> list[Any]:
        """Every record of ``kind`` the registered plugins provide (one hook call)."""
        _check_kind(kind)
        with self._lock:
            cached = self._records.get(kind)
            if cached is not None:
                return cached
            rtype, hook_name = RECORD_TYPES[kind]
            hook = getattr(self.pm.hook, hook_name)
            # pluggy calls implementations last-registered first and drops None results;
            # every plugin was probed to return a list, so results line up with this order.
            impls = list(reversed(hook.get_hookimpls()))
            try:
                batches = hook()
            except Exception as exc:
                raise PluginError(f"a plugin's {hook_name}() raised {_format_error(exc)}") from exc
            owners = [impl.plugin_name for impl in impls] if len(batches) == len(impls) else [None] * len(batches)
            out: list[Any] = []
            for owner, batch in zip(owners, batches):
                if not isinstance(batch, (list, tuple)):
                    raise PluginError(f"plugin {owner!r}: {hook_name}() returned {_short(batch)}; return a list of "
                                      f"{rtype.__name__}")
                for record in batch:
                    if not isinstance(record, rtype):
                        raise PluginError(f"plugin {owner!r}: {hook_name}() returned {_short(record)}; expected "
                                          f"{rtype.__name__} records")
                    dist = self._plugin_dist.get(owner, IN_PROCESS) if owner else "?"
                    out.append(record if record.distribution else replace(record, distribution=dist))
            self._records[kind] = out
            return out

    # -- lookup -----------------------------------------------------------------------

    def _named(self, kind: str, name: str) -> list[Any]:
        self._load(kind, name)
        found = [r for r in self.records(kind) if r.name == name]
        if not found:  # a plugin may register a record under another name than its entry point's
            self._load(kind)
            found = [r for r in self.records(kind) if r.name == name]
        return found

    def get(self, kind: str, name: str) -> Any:
        """The record of ``kind`` named ``name`` (for a transport, the only part of that name)."""
        found = self._named(kind, name)
        if kind == "transport" and len(found) > 1:
            parts = "; ".join(f"{r.distribution}: {r.describe()}" for r in found)
            raise PluginError(
                f"transport {name!r} is served by several distributions ({parts}); ask for the part that serves "
                "a (hardware, role) pair with plugins.transport_backend(name, hardware, role)"
            )
        if len(found) > 1:
            raise PluginError(
                f"{kind} {name!r} is provided by more than one distribution: "
                f"{' and '.join(sorted(r.distribution for r in found))}; uninstall one of them"
            )
        if not found:
            self._raise_missing(kind, name)
        return found[0]

    def transport_parts(self, name: str) -> list[Transport]:
        """Every distribution's part of transport ``name`` (an unknown name lists what exists)."""
        found = self._named("transport", name)
        if not found:
            self._raise_missing("transport", name)
        return found

    def transport_backend(self, name: str, hardware: str, role: str) -> Transport:
        """The one part of transport ``name`` that serves (hardware, role)."""
        parts = self.transport_parts(name)
        serving = [p for p in parts if (hardware, role) in p.serves]
        if len(serving) > 1:
            raise PluginError(
                f"transport {name!r}: {hardware}/{role} is claimed by "
                f"{' and '.join(sorted(p.distribution for p in serving))}; uninstall one of them"
            )
        if not serving:
            from ._errors import PlacementError

            served = "; ".join(f"{p.distribution}: {p.describe()}" for p in parts)
            raise PlacementError(
                f"transport {name!r} has no backend for {hardware}/{role} ({served}): change the node's hardware, "
                "choose a transport that serves it, or install the package that adds that part"
            )
        return serving[0]

    def _raise_missing(self, kind: str, name: str) -> None:
        broken = {d: e for (k, n, d), e in self._errors.items() if k == kind and n == name}
        if broken:
            text = "; ".join(f"{d}: {e}" for d, e in sorted(broken.items()))
            raise PluginError(f"{kind} plugin {name!r} failed to load ({text}); reinstall the package that "
                              "provides it, or uninstall it")
        raise UnknownPluginError(kind, name, self.available(kind))

    # -- listing ----------------------------------------------------------------------

    def available(self, kind: str) -> list[PluginInfo]:
        """The plugins of one kind (loading only that kind); load errors are rows, not raised."""
        group = _check_kind(kind)
        self._load(kind)
        versions = {d: v for (g, _, _), (d, v) in self._distributions().items() if g == group}
        rows: list[PluginInfo] = []
        try:
            records = self.records(kind)
        except PluginError as exc:  # a plugin returning garbage must not hide the others
            return [PluginInfo(kind, "?", "?", "?", "", str(exc))]
        for record in records:
            dist = record.distribution
            rows.append(PluginInfo(kind, record.name, dist, versions.get(dist, ""), record.describe(),
                                       details=record.details() if hasattr(record, "details") else None))
        for (k, name, dist), error in self._errors.items():
            if k == kind:
                rows.append(PluginInfo(kind, name, dist, versions.get(dist, "?"), "", error))
        return sorted(rows, key=lambda r: (r.name, r.distribution))

    def listing(self) -> list[PluginInfo]:
        """Every installed plugin of every kind, with its distribution and any load error."""
        return [row for kind in _KIND_TO_GROUP for row in self.available(kind)]


_registry = PluginRegistry()


def registry() -> PluginRegistry:
    """The process-wide plugin registry."""
    return _registry


def get(kind: str, name: str) -> Any:
    """Shorthand for ``registry().get(kind, name)``."""
    return _registry.get(kind, name)


def transport_backend(name: str, hardware: str, role: str) -> Transport:
    """Shorthand for ``registry().transport_backend(name, hardware, role)``."""
    return _registry.transport_backend(name, hardware, role)


def register(plugin: object, name: str | None = None) -> None:
    """Shorthand for ``registry().register(plugin, name)``."""
    _registry.register(plugin, name)


def unregister(plugin: object) -> None:
    """Shorthand for ``registry().unregister(plugin)``."""
    _registry.unregister(plugin)


def listing() -> list[PluginInfo]:
    """Shorthand for ``registry().listing()``."""
    return _registry.listing()


def names(kind: str) -> Iterable[str]:
    """Names of the installed plugins of ``kind`` that load (only that kind is loaded)."""
    return sorted({info.name for info in _registry.available(kind) if info.error is None})
