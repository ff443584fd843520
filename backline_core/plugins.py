"""Plugin discovery and loading.

Entry points are read with stevedore: a single named plugin is loaded lazily
(choosing ``memcpy`` never imports another transport), and a plugin that fails to
import is recorded with its error instead of breaking the others. Every loaded
plugin is registered with one pluggy ``PluginManager`` whose hook specs live in
:mod:`backline_core.hookspecs`.

>>> from backline_core import plugins
>>> plugins.get("decoder", "steane").name
'steane'
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pluggy
from stevedore import _cache as _stevedore_cache
from stevedore import driver, exception, extension

from .errors import PluginError, UnknownPluginError
from .hookspecs import ENTRY_POINT_GROUPS, PROJECT, RECORD_TYPES, BacklineSpecs

_KIND_TO_GROUP = {kind: group for group, kind in ENTRY_POINT_GROUPS.items()}


@dataclass(frozen=True)
class PluginInfo:
    """One row of ``backline plugins``."""

    kind: str
    name: str
    distribution: str
    version: str
    serves: str
    error: str | None = None


class PluginRegistry:
    """Loads plugins from entry points and keeps the records they provide."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(BacklineSpecs)
        self._records: dict[tuple[str, str], Any] = {}
        self._errors: dict[tuple[str, str], str] = {}
        self._lock = threading.RLock()

    # -- registration -----------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin object (a module or any object with hookimpls).

        Its records become resolvable by name exactly like entry-point plugins.
        """
        with self._lock:
            if not self.pm.is_registered(plugin):
                self.pm.register(plugin, name=name)
                try:
                    self.pm.check_pending()
                except pluggy.PluginValidationError as exc:
                    # A misspelt hook must not poison the manager for every other plugin.
                    self.pm.unregister(plugin)
                    raise PluginError(
                        f"plugin {name or plugin!r} implements a hook Backline does not define: {exc}; "
                        "hook names are backline_transports, backline_decoders, backline_executors, "
                        "backline_passes and backline_devices"
                    ) from None
            for kind in RECORD_TYPES:
                for record in self._records_of(plugin, kind):
                    self._records[(kind, record.name)] = record

    def unregister(self, plugin: object) -> None:
        """Remove a plugin registered with :meth:`register` and forget its records."""
        with self._lock:
            for kind in RECORD_TYPES:
                for record in self._records_of(plugin, kind):
                    self._records.pop((kind, record.name), None)
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)

    def _records_of(self, plugin: object, kind: str) -> list[Any]:
        rtype, hook_name = RECORD_TYPES[kind]
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        caller = self.pm.subset_hook_caller(hook_name, remove_plugins=others)
        records: list[Any] = []
        for batch in caller():
            for record in batch or ():
                if not isinstance(record, rtype):
                    raise PluginError(
                        f"plugin {plugin!r} returned {record!r} from {hook_name}(); "
                        f"expected {rtype.__name__} records"
                    )
                records.append(record)
        return records

    # -- lookup -----------------------------------------------------------------------

    def get(self, kind: str, name: str) -> Any:
        """Return the record of ``kind`` registered under ``name``, loading it lazily."""
        if kind not in _KIND_TO_GROUP:
            raise ValueError(f"unknown plugin kind {kind!r}; kinds: {', '.join(_KIND_TO_GROUP)}")
        with self._lock:
            record = self._records.get((kind, name))
            if record is not None:
                return record
            group = _KIND_TO_GROUP[kind]
            try:
                mgr = driver.DriverManager(
                    namespace=group, name=name, invoke_on_load=False,
                    on_load_failure_callback=_raise_load_failure,
                )
            except exception.NoMatches:
                raise UnknownPluginError(kind, name, self.available(kind)) from None
            except exception.MultipleMatches as exc:
                raise PluginError(f"more than one installed package provides {kind} {name!r}: {exc}") from None
            except _LoadFailure as exc:
                self._errors[(kind, name)] = exc.text
                raise PluginError(
                    f"{kind} plugin {name!r} failed to load: {exc.text}"
                    " (reinstall the package that provides it, or uninstall it)"
                ) from exc.__cause__
            self.register(mgr.driver, name=f"{group}:{name}")
            record = self._records.get((kind, name))
            if record is None:
                provided = [n for (k, n) in self._records if k == kind]
                raise PluginError(
                    f"entry point {name!r} in group {group} loads {mgr.driver!r}, which provides no "
                    f"{kind} named {name!r} (it provides: {', '.join(provided) or 'nothing'})"
                )
            return record

    def available(self, kind: str) -> list[PluginInfo]:
        """The plugins of one kind, loading each (errors are recorded, not raised)."""
        return [info for info in self.listing() if info.kind == kind]

    def listing(self) -> list[PluginInfo]:
        """Every installed plugin of every kind, with its distribution and any load error."""
        dists = _entry_point_distributions()
        rows: list[PluginInfo] = []
        for group, kind in ENTRY_POINT_GROUPS.items():
            failures: dict[str, str] = {}

            def on_failure(_mgr: Any, ep: Any, err: BaseException, failures=failures) -> None:
                failures[ep.name] = _format_error(err)

            mgr = extension.ExtensionManager(
                namespace=group, invoke_on_load=False, on_load_failure_callback=on_failure
            )
            names = sorted({ext.name for ext in mgr.extensions} | set(failures))
            loaded = {ext.name: ext.plugin for ext in mgr.extensions}
            for name in names:
                dist, version = dists.get((group, name), ("?", "?"))
                error = failures.get(name)
                serves = ""
                if error is None:
                    try:
                        with self._lock:
                            self.register(loaded[name], name=f"{group}:{name}")
                            record = self._records.get((kind, name))
                        if record is None:
                            error = f"provides no {kind} named {name!r}"
                        else:
                            serves = record.describe()
                    except Exception as exc:  # a broken plugin must not break the listing
                        error = _format_error(exc)
                if error is not None:
                    self._errors[(kind, name)] = error
                rows.append(PluginInfo(kind, name, dist, version, serves, error))
        # In-process registrations (no entry point) are listed too.
        seen = {(r.kind, r.name) for r in rows}
        for (kind, name), record in sorted(self._records.items()):
            if (kind, name) not in seen:
                rows.append(PluginInfo(kind, name, "(registered in process)", "", record.describe()))
        return rows

    def refresh(self) -> None:
        """Forget cached entry points and every registered plugin (in-process ones too),
        e.g. after installing a package while this process runs."""
        with self._lock:
            extension.ExtensionManager.ENTRY_POINT_CACHE.clear()
            # stevedore also keeps a per-process copy of its on-disk cache
            internal = getattr(getattr(_stevedore_cache, "_c", None), "_internal", None)
            if isinstance(internal, dict):
                internal.clear()
            importlib.invalidate_caches()
            for plugin in list(self.pm.get_plugins()):
                self.pm.unregister(plugin)
            self._records.clear()
            self._errors.clear()


class _LoadFailure(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _raise_load_failure(_mgr: Any, ep: Any, err: BaseException) -> None:
    raise _LoadFailure(_format_error(err)) from err


def _format_error(err: BaseException) -> str:
    lines = traceback.format_exception_only(type(err), err)
    return lines[-1].strip() if lines else repr(err)


def _entry_point_distributions() -> dict[tuple[str, str], tuple[str, str]]:
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group in ENTRY_POINT_GROUPS:
                out.setdefault((ep.group, ep.name), (dist.metadata["Name"], dist.version))
    return out


_registry = PluginRegistry()


def registry() -> PluginRegistry:
    """The process-wide plugin registry."""
    return _registry


def get(kind: str, name: str) -> Any:
    """Shorthand for ``registry().get(kind, name)``."""
    return _registry.get(kind, name)


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
    """Names of the installed plugins of ``kind`` that load without error."""
    return [info.name for info in _registry.available(kind) if info.error is None]
