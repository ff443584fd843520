"""Two stable serialized forms of a :class:`~backline_core.placement.Placement`.

* The attribute text the compiler carries on the module, in MLIR attribute syntax::

      #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller",
      hardware = "cpu">, coprocessors = [#transport.node<name = "coprocessor0", hardware = "cpu",
      coprocessor_fn = "steane">]>

  (on one line). It is canonical: fields come in a fixed order, optional fields equal to
  their default are left out (``transport``, ``controller``, ``name`` and ``hardware`` are
  always written), dict keys are sorted, so equal placements always print the same text.
* JSON (:func:`placement_to_json`), the same fields as nested objects plus
  ``"format": "backline.placement/1"``.

Both round-trip exactly, and both are read back through the normal placement validation.
The attribute grammar (``value`` is the start symbol)::

    value  := STRING | NUMBER | "true" | "false" | dict | list | record
    dict   := "{" [ key "=" value ("," key "=" value)* ] "}"
    list   := "[" [ value ("," value)* ] "]"
    record := "#" NAME "<" [ IDENT "=" value ("," IDENT "=" value)* ] ">"
    key    := IDENT | STRING
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .coprocessor_function import CoprocessorFunction
from .errors import PlacementError
from .placement import IDENTIFIER, Controller, Coprocessor, Endpoint, Node, Placement

FORMAT = "backline.placement/1"
_DIALECT = "transport"

# -- the model as ordered fields ---------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    """A typed group of ordered fields: ``#transport.<kind><...>`` or a JSON object."""

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
        fn = n.coprocessor_fn
        items.append(("coprocessor_fn", fn if isinstance(fn, str) else _fn_record(fn)))
    return _Record("node", tuple(items))


# Field order of a #transport.fn record: the CoprocessorFunction field order.
_FN_FIELDS = ("name", "library", "symbol", "decoder_ids", "context", "init_symbol", "fini_symbol", "python",
              "reply_bits")


def _fn_record(fn: CoprocessorFunction) -> _Record:
    data = fn.to_dict()  # raises PlacementError for a callable that cannot be named
    if data.get("decoder_ids") == [0]:
        del data["decoder_ids"]  # the default
    return _Record("fn", tuple((k, data[k]) for k in _FN_FIELDS if data.get(k) is not None))


# -- attribute text: printer --------------------------------------------------------------


def _quote(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:  # the C0/C1 control characters
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _key(key: str) -> str:
    return key if IDENTIFIER.fullmatch(key) else _quote(key)


def _render(value: Any) -> str:
    if isinstance(value, _Record):
        fields = ", ".join(f"{k} = {_render(v)}" for k, v in value.items)
        return f"#{_DIALECT}.{value.kind}<{fields}>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_render(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    raise PlacementError(f"cannot write {value!r} ({type(value).__name__}) in a placement attribute")


def placement_to_attribute(p: Placement) -> str:
    """The canonical ``#transport.backline<...>`` text of ``p``."""
    return _render(_placement_record(p))


# -- attribute text: tokenizer and parser -------------------------------------------------

_PUNCT = frozenset("<>{}[]=,")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_IDENT_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_IDENT_CHAR = _IDENT_START | _DIGITS | frozenset(".-")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}


@dataclass(frozen=True)
class _Token:
    kind: str  # punct, record, ident, string, int, float, eof
    text: str  # as written, for messages
    value: Any
    offset: int

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        if self.kind == "punct":
            return f"'{self.value}'"
        shown = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return {"string": "string ", "ident": "identifier ", "record": "attribute "}.get(self.kind, "number ") + shown


def _syntax_error(message: str) -> PlacementError:
    return PlacementError(f"invalid placement attribute: {message}")


def _expected(what: str, tok: _Token) -> PlacementError:
    return _syntax_error(f"expected {what} at offset {tok.offset}, found {tok.describe()}")


class _Lexer:
    """Produces tokens on demand, so an error is reported where the parse stops."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._peeked: _Token | None = None

    def peek(self) -> _Token:
        if self._peeked is None:
            self._peeked = self._scan()
        return self._peeked

    def next(self) -> _Token:
        tok = self.peek()
        self._peeked = None
        return tok

    def _scan(self) -> _Token:
        text, n, i = self.text, len(self.text), self.pos
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            self.pos = i
            return _Token("eof", "", None, i)
        ch = text[i]
        if ch in _PUNCT:
            self.pos = i + 1
            return _Token("punct", ch, ch, i)
        if ch == '"':
            return self._string(i)
        if ch == "#":
            j = i + 1
            if j >= n or text[j] not in _IDENT_START:
                raise _syntax_error(f"expected an attribute name after '#' at offset {j}")
            while j < n and text[j] in _IDENT_CHAR:
                j += 1
            self.pos = j
            return _Token("record", text[i:j], text[i + 1 : j], i)
        if ch in _IDENT_START:
            j = i + 1
            while j < n and text[j] in _IDENT_CHAR:
                j += 1
            self.pos = j
            return _Token("ident", text[i:j], text[i:j], i)
        if ch == "-" or ch in _DIGITS:
            return self._number(i)
        raise _syntax_error(f"unexpected character {ch!r} at offset {i}")

    def _digits(self, j: int, after: str) -> int:
        text, n = self.text, len(self.text)
        if j >= n or text[j] not in _DIGITS:
            raise _syntax_error(f"expected a digit after {after!r} at offset {j}")
        while j < n and text[j] in _DIGITS:
            j += 1
        return j

    def _number(self, i: int) -> _Token:
        text, n = self.text, len(self.text)
        j = i + 1 if text[i] == "-" else i
        j = self._digits(j, "-") if j > i else self._digits(j, "")
        is_float = False
        if j < n and text[j] == ".":
            j = self._digits(j + 1, ".")
            is_float = True
        if j < n and text[j] in "eE":
            j += 1
            if j < n and text[j] in "+-":
                j += 1
            j = self._digits(j, "e")
            is_float = True
        self.pos = j
        literal = text[i:j]
        if is_float:
            return _Token("float", literal, float(literal), i)
        return _Token("int", literal, int(literal), i)

    def _string(self, i: int) -> _Token:
        text, n = self.text, len(self.text)
        out: list[str] = []
        j = i + 1
        while True:
            if j >= n:
                raise _syntax_error(f"unterminated string starting at offset {i}: expected a closing '\"'")
            ch = text[j]
            if ch == '"':
                self.pos = j + 1
                return _Token("string", text[i : j + 1], "".join(out), i)
            if ch == "\\":
                esc = text[j + 1 : j + 2]
                if esc in _SIMPLE_ESCAPES:
                    out.append(_SIMPLE_ESCAPES[esc])
                    j += 2
                elif len(text[j + 1 : j + 3]) == 2 and set(text[j + 1 : j + 3]) <= _HEX:
                    out.append(chr(int(text[j + 1 : j + 3], 16)))
                    j += 3
                else:
                    raise _syntax_error(
                        f"invalid escape {text[j:j + 2]!r} at offset {j}: use \\\", \\\\, \\n, \\t or \\XX "
                        "(two hex digits)"
                    )
                continue
            # Raw control characters would make the text depend on the editor; require escapes.
            if ord(ch) < 0x20 or ord(ch) == 0x7F:
                raise _syntax_error(f"unescaped control character {ch!r} in string at offset {j}: write it as \\XX")
            out.append(ch)
            j += 1


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
        shown = repr(self.value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return {"str": "string", "int": "integer", "float": "float", "bool": "boolean"}[self.kind] + " " + shown


@dataclass(frozen=True)
class _Entry:
    value: _Val
    where: str  # of the key


class _Parser:
    def __init__(self, text: str) -> None:
        self.lex = _Lexer(text)

    def parse(self) -> _Val:
        value = self.value()
        tok = self.lex.peek()
        if tok.kind != "eof":
            raise _expected("end of input", tok)
        return value

    def value(self) -> _Val:
        tok = self.lex.next()
        where = f"offset {tok.offset}"
        if tok.kind == "string":
            return _Val("str", tok.value, where)
        if tok.kind in ("int", "float"):
            return _Val(tok.kind, tok.value, where)
        if tok.kind == "ident" and tok.value in ("true", "false"):
            return _Val("bool", tok.value == "true", where)
        if tok.kind == "punct" and tok.value == "{":
            return _Val("dict", self.entries("}", "key", string_keys=True), where)
        if tok.kind == "punct" and tok.value == "[":
            return _Val("list", self.items(), where)
        if tok.kind == "record":
            self.expect("<")
            return _Val("record", self.entries(">", "field", string_keys=False), where, name=tok.value)
        raise _expected("a value (string, number, true, false, {...}, [...] or #attribute<...>)", tok)

    def expect(self, punct: str) -> None:
        tok = self.lex.next()
        if tok.kind != "punct" or tok.value != punct:
            raise _expected(f"'{punct}'", tok)

    def _closes(self, punct: str) -> bool:
        tok = self.lex.peek()
        if tok.kind == "punct" and tok.value == punct:
            self.lex.next()
            return True
        return False

    def _separator(self, close: str) -> bool:
        """Consume ',' (more follows: True) or ``close`` (done: False)."""
        tok = self.lex.next()
        if tok.kind == "punct" and tok.value == ",":
            return True
        if tok.kind == "punct" and tok.value == close:
            return False
        raise _expected(f"',' or '{close}'", tok)

    def items(self) -> list[_Val]:
        out: list[_Val] = []
        if self._closes("]"):
            return out
        while True:
            out.append(self.value())
            if not self._separator("]"):
                return out

    def entries(self, close: str, what: str, string_keys: bool) -> dict[str, _Entry]:
        out: dict[str, _Entry] = {}
        if self._closes(close):
            return out
        while True:
            tok = self.lex.next()
            if not (tok.kind == "ident" or (string_keys and tok.kind == "string")):
                raise _expected(f"a {what} name", tok)
            if tok.value in out:
                raise _syntax_error(f"duplicate {what} {tok.value!r} at offset {tok.offset}")
            self.expect("=")
            out[tok.value] = _Entry(self.value(), f"offset {tok.offset}")
            if not self._separator(close):
                return out


# -- JSON as the same tree ----------------------------------------------------------------


def _json_tree(value: Any, path: str) -> _Val:
    where = path or "the top level"
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
        return _Val("list", [_json_tree(v, f"{path}[{i}]") for i, v in enumerate(value)], where)
    if isinstance(value, Mapping):
        entries = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise PlacementError(f"invalid placement JSON: key {key!r} at {where} is not a string")
            sub = f"{path}.{key}" if path else key
            entries[key] = _Entry(_json_tree(item, sub), sub)
        return _Val("dict", entries, where)
    raise PlacementError(
        f"invalid placement JSON: {where} holds {type(value).__name__} {value!r}; "
        "only JSON types (dict, list, str, int, float, bool, None) are allowed"
    )


# -- reading the tree into the model ------------------------------------------------------


class _Reader:
    """Turns a parsed tree (from either form) into model objects, checking every type."""

    def __init__(self, source: str) -> None:
        self.source = source  # "attribute" or "JSON"

    def error(self, message: str) -> PlacementError:
        return PlacementError(f"invalid placement {self.source}: {message}")

    def fields(
        self, v: _Val, kind: str, what: str, known: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, _Val]:
        if v.kind == "record" and v.name == f"{_DIALECT}.{kind}":
            entries = v.value
        elif v.kind == "dict" and self.source == "JSON":
            entries = v.value
        else:
            shape = f"#{_DIALECT}.{kind}<...>" if self.source == "attribute" else "an object"
            raise self.error(f"{what} at {v.where} must be {shape}, found {v.describe()}")
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
            known.append("coprocessor_fn")
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


def placement_from_attribute(text: str) -> Placement:
    """Parse ``#transport.backline<...>`` text into a validated :class:`Placement`."""
    if not isinstance(text, str):
        raise PlacementError(f"a placement attribute is a str, not {type(text).__name__}")
    return _Reader("attribute").placement(_Parser(text).parse())


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
            problem = f"its format is {version!r}, which this version of backline_core cannot read (upgrade it)"
        else:
            problem = f"its format is {version!r}, which is not a backline placement"
        raise PlacementError(f"invalid placement JSON: {problem}; expected \"format\": {FORMAT!r}")
    return _Reader("JSON").placement(_json_tree(data, ""), extra_known=("format",))


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
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise PlacementError(f"invalid placement JSON at offset {exc.pos}: {exc.msg}") from None
    return placement_from_dict(data)
