"""The stable serialized forms of a :class:`~backline_core._placement.Placement`: a dict and JSON.

:func:`placement_to_dict` gives nested objects with ``"format": "backline.placement/1"``;
:func:`placement_to_json` the canonical JSON text of it (sorted keys, compact). Fields
equal to their default are left out (``transport``, ``controller``, ``name`` and
``hardware`` are always written), so equal placements always give the same text. Both
round-trip exactly and are read back through the normal placement checks; every error
names where in the input it is. (The compiler carries a placement as a typed IR
attribute of its own, built from and read back into these dicts.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._coprocessor_function import CoprocessorFunction
from ._errors import PlacementError
from ._errors import short_repr as _short
from ._placement import Controller, Coprocessor, Endpoint, Node, Placement

FORMAT = "backline.placement/1"
#: Nesting deeper than this is refused before Python's recursion limit is reached.
MAX_DEPTH = 32

# -- the model as ordered fields ---------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    """A typed group of ordered fields (a JSON object)."""

    kind: str
    items: tuple[tuple[str, Any], ...]


def _placement_record(p: Placement) -> _Record:
    items: list[tuple[str, Any]] = [("transport", p.transport)]
    if p.qec_code is not None:
        items.append(("qec_code", p.qec_code))
    items.append(("controller", _node_record(p.controller)))
    if p.coprocessors:
        items.append(("coprocessors", [_node_record(n) for n in p.coprocessors]))
    return _Record("backline", tuple(items))


def _node_record(n: Node) -> _Record:
    items: list[tuple[str, Any]] = [("name", n.name), ("hardware", n.hardware)]
    if n.remote:
        items.append(("remote", True))
    if n.executor_options:
        items.append(("executor_options", dict(n.executor_options)))
    if n.init_args:
        items.append(("init_args", dict(n.init_args)))
    if n.endpoint is not None:
        items.append(("endpoint", _Record("endpoint", (("host", n.endpoint.host), ("port", n.endpoint.port)))))
    if isinstance(n, Coprocessor):
        if n.runs_in is not None:
            items.append(("runs_in", n.runs_in))
        fn = n.coprocessor_fn
        items.append(("coprocessor_fn", fn if isinstance(fn, str) else _fn_record(fn)))
    return _Record("node", tuple(items))


# Field order of a function record: the CoprocessorFunction field order.
_FN_FIELDS = ("name", "library", "symbol", "decoder_ids", "context", "init_symbol", "fini_symbol", "python",
              "reply_bits")


def _fn_record(fn: CoprocessorFunction) -> _Record:
    data = fn.to_dict()  # raises PlacementError for a callable that cannot be named
    if data.get("decoder_ids") == [0]:
        del data["decoder_ids"]  # the default
    return _Record("fn", tuple((k, data[k]) for k in _FN_FIELDS if data.get(k) is not None))


@dataclass(frozen=True)
class _Val:
    """A parsed value with where it came from (``offset N`` or a JSON path)."""

    kind: str  # str, int, float, bool, null, dict, list, record
    value: Any  # scalar; dict[str, _Entry]; list[_Val]
    where: str
    name: str = ""  # a record's attribute name, e.g. "transport.node"

    def describe(self) -> str:
        if self.kind == "record":
            return f"#{self.name}<...>"
        if self.kind in ("dict", "list"):
            return {"dict": "a dict", "list": "a list"}[self.kind]
        if self.kind == "null":
            return "null"
        if self.kind == "bool":
            return "boolean " + ("true" if self.value else "false")
        if self.kind == "int" and self.value.bit_length() > 128:
            return f"an integer of {self.value.bit_length()} bits"
        shown = repr(self.value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return {"str": "string", "int": "integer", "float": "float", "bool": "boolean"}[self.kind] + " " + shown


@dataclass(frozen=True)
class _Entry:
    value: _Val
    where: str  # of the key


# -- JSON as the same tree ----------------------------------------------------------------


def _json_tree(value: Any, path: str, depth: int = 0) -> _Val:
    where = path or "the top level"
    if depth > MAX_DEPTH:
        raise PlacementError(f"invalid placement JSON: {where} is nested more than {MAX_DEPTH} levels deep")
    if value is None:
        return _Val("null", None, where)
    if isinstance(value, bool):
        return _Val("bool", value, where)
    if isinstance(value, int):
        return _Val("int", value, where)
    if isinstance(value, float):
        return _Val("float", value, where)
    if isinstance(value, str):
        return _Val("str", value, where)
    if isinstance(value, (list, tuple)):
        return _Val("list", [_json_tree(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)], where)
    if isinstance(value, Mapping):
        entries = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise PlacementError(f"invalid placement JSON: key {_short(key)} at {where} is not a string")
            sub = f"{path}.{key}" if path else key
            entries[key] = _Entry(_json_tree(item, sub, depth + 1), sub)
        return _Val("dict", entries, where)
    raise PlacementError(
        f"invalid placement JSON: {where} holds {type(value).__name__} {value!r}; "
        "only JSON types (dict, list, str, int, float, bool, None) are allowed"
    )


# -- reading the tree into the model ------------------------------------------------------


class _Reader:
    """Turns a parsed tree into model objects, checking every type."""

    source = "JSON"

    def error(self, message: str) -> PlacementError:
        return PlacementError(f"invalid placement {self.source}: {message}")

    def fields(
        self, v: _Val, kind: str, what: str, known: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, _Val]:
        if v.kind != "dict":
            raise self.error(f"{what} at {v.where} must be an object, found {v.describe()}")
        entries = v.value
        for key, entry in entries.items():
            if key not in known:
                raise self.error(f"unknown field {key!r} in {what} at {entry.where}; known fields: {', '.join(known)}")
        for key in required:
            if key not in entries:
                raise self.error(f"{what} at {v.where} is missing the field {key!r}")
        return {key: entry.value for key, entry in entries.items()}

    def _typed(self, v: _Val, kinds: tuple[str, ...], what: str, expected: str) -> Any:
        if v.kind not in kinds:
            raise self.error(f"{what} at {v.where} must be {expected}, found {v.describe()}")
        return v.value

    def string(self, v: _Val, what: str) -> str:
        return self._typed(v, ("str",), what, "a string")

    def optional_string(self, v: _Val | None, what: str) -> str | None:
        if v is None or v.kind == "null":  # null only occurs in JSON
            return None
        return self.string(v, what)

    def integer(self, v: _Val, what: str) -> int:
        return self._typed(v, ("int",), what, "an integer")

    def boolean(self, v: _Val, what: str) -> bool:
        return self._typed(v, ("bool",), what, "true or false")

    def array(self, v: _Val, what: str) -> list[_Val]:
        return self._typed(v, ("list",), what, "a list [...]")

    def scalar_map(self, v: _Val, what: str, kinds: tuple[str, ...], expected: str) -> dict[str, Any]:
        entries = self._typed(v, ("dict",), what, "a dict {...}")
        return {key: self._typed(e.value, kinds, f"{what}[{key!r}]", expected) for key, e in entries.items()}

    def built(self, what: str, where: str, build: Any) -> Any:
        """Run a constructor, saying where in the text an invalid value came from."""
        try:
            return build()
        except PlacementError as exc:
            raise self.error(f"{what} at {where}: {exc}") from exc

    # -- the model

    def placement(self, v: _Val, extra_known: Sequence[str] = ()) -> Placement:
        known = ("transport", "qec_code", "controller", "coprocessors", *extra_known)
        f = self.fields(v, "backline", "the placement", known, required=("controller",))
        transport = self.string(f["transport"], "transport") if "transport" in f else "memcpy"
        qec_code = self.optional_string(f.get("qec_code"), "qec_code")
        controller = self.node(f["controller"], Controller, "the controller")
        items = self.array(f["coprocessors"], "coprocessors") if "coprocessors" in f else []
        coprocessors = [self.node(item, Coprocessor, f"coprocessors[{i}]") for i, item in enumerate(items)]
        # Placement-level errors (transport, names, ...) concern the whole text: no location.
        return Placement(controller=controller, coprocessors=coprocessors, transport=transport, qec_code=qec_code)

    def node(self, v: _Val, cls: type[Node], what: str) -> Node:
        known = ["name", "hardware", "remote", "executor_options", "init_args", "endpoint"]
        if cls is Coprocessor:
            known += ["runs_in", "coprocessor_fn"]
        f = self.fields(v, "node", what, known, required=("coprocessor_fn",) if cls is Coprocessor else ())
        kwargs: dict[str, Any] = {}
        if "name" in f:
            kwargs["name"] = self.string(f["name"], f"{what}: name")
        if "hardware" in f:
            kwargs["hardware"] = self.string(f["hardware"], f"{what}: hardware")
        if "remote" in f:
            kwargs["remote"] = self.boolean(f["remote"], f"{what}: remote")
        if "executor_options" in f:
            kwargs["executor_options"] = self.scalar_map(
                f["executor_options"], f"{what}: executor_options", ("str", "int"), "a string or an integer"
            )
        if "init_args" in f:
            kwargs["init_args"] = self.scalar_map(
                f["init_args"], f"{what}: init_args", ("str", "int", "float", "bool"), "a string, number or boolean"
            )
        if f.get("endpoint") is not None and f["endpoint"].kind != "null":
            kwargs["endpoint"] = self.endpoint(f["endpoint"], f"{what}: endpoint")
        if "runs_in" in f:
            kwargs["runs_in"] = self.optional_string(f["runs_in"], f"{what}: runs_in")
        if "coprocessor_fn" in f:
            fn, label = f["coprocessor_fn"], f"{what}: coprocessor_fn"
            kwargs["coprocessor_fn"] = self.string(fn, label) if fn.kind == "str" else self.function(fn, label)
        return self.built(what, v.where, lambda: cls(**kwargs))

    def endpoint(self, v: _Val, what: str) -> Endpoint:
        f = self.fields(v, "endpoint", what, ("host", "port"), required=("host", "port"))
        host, port = self.string(f["host"], f"{what}: host"), self.integer(f["port"], f"{what}: port")
        return self.built(what, v.where, lambda: Endpoint(host=host, port=port))

    def function(self, v: _Val, what: str) -> CoprocessorFunction:
        f = self.fields(v, "fn", what, _FN_FIELDS, required=("name",))
        data: dict[str, Any] = {}
        for key, item in f.items():
            if key == "decoder_ids":
                items = self.array(item, f"{what}: decoder_ids")
                data[key] = [self.integer(i, f"{what}: decoder_ids item") for i in items]
            elif key == "name":
                data[key] = self.string(item, f"{what}: name")
            elif key == "reply_bits":
                if item.kind != "null":  # null only occurs in JSON
                    data[key] = self.integer(item, f"{what}: reply_bits")
            else:
                value = self.optional_string(item, f"{what}: {key}")
                if value is not None:
                    data[key] = value
        if "context" in data:
            try:
                bytes.fromhex(data["context"])
            except ValueError:
                raise self.error(
                    f"{what}: context at {f['context'].where} must be a hex string (two digits a byte), "
                    f"found {data['context']!r}"
                ) from None
        return self.built(what, v.where, lambda: CoprocessorFunction.from_dict(data))


# -- JSON ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return {k: _plain(v) for k, v in value.items}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def placement_to_dict(p: Placement) -> dict[str, Any]:
    """A JSON-ready dict of ``p``, with ``"format": "backline.placement/1"``."""
    return {"format": FORMAT, **_plain(_placement_record(p))}


def placement_from_dict(data: Mapping[str, Any]) -> Placement:
    """Build a validated :class:`Placement` from :func:`placement_to_dict` output."""
    if not isinstance(data, Mapping):
        raise PlacementError(f"invalid placement JSON: expected an object, found {type(data).__name__}")
    version = data.get("format")
    if version != FORMAT:
        if version is None:
            problem = "it has no \"format\" key"
        elif isinstance(version, str) and version.startswith("backline.placement/"):
            problem = f"its format is {_short(version)}, which this version of backline_core cannot read (upgrade it)"
        else:
            problem = f"its format is {_short(version)}, which is not a backline placement"
        raise PlacementError(f"invalid placement JSON: {problem}; expected \"format\": {FORMAT!r}")
    return _Reader().placement(_json_tree(data, ""), extra_known=("format",))


def placement_to_json(p: Placement) -> str:
    """Canonical JSON text of ``p`` (sorted keys, no whitespace)."""
    return json.dumps(placement_to_dict(p), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise PlacementError(f"invalid placement JSON: key {key!r} appears twice in one object")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise PlacementError(f"invalid placement JSON: {name} is not a JSON number")


def placement_from_json(text: str | bytes) -> Placement:
    """Parse :func:`placement_to_json` text into a validated :class:`Placement`."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise PlacementError(f"placement JSON must be a str or bytes, not {type(text).__name__}")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise PlacementError(f"invalid placement JSON at offset {exc.pos}: {exc.msg}") from None
    except PlacementError:
        raise
    except RecursionError:
        raise PlacementError(f"invalid placement JSON: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise PlacementError(f"invalid placement JSON: {exc}") from None
    return placement_from_dict(data)
