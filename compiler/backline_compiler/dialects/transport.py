"""The ``transport`` dialect: a controller/coprocessor session and its rounds, as IR.

Types
    ``!transport.session<controller>`` / ``!transport.session<coprocessor>`` (:class:`SessionType`):
    an opaque session handle whose role is part of the type, so the verifier rejects a
    controller-only op on a coprocessor session. ``!transport.token`` (:class:`TokenType`)
    names an ``*_async`` bring-up step for ``transport.await``.

Attributes
    ``#transport.backline<...>`` (:class:`BacklineAttr`): the placement, a typed attribute
    whose nodes are ``#transport.node<...>`` (:class:`NodeAttr`), with ``#transport.endpoint<...>``
    and ``#transport.fn<...>`` inside. Their fields are those of the core's dataclasses
    (``Placement``, ``Controller``/``Coprocessor``, ``Endpoint``, ``CoprocessorFunction``); it
    converts to and from a ``Placement`` through ``Placement.to_dict()`` / ``from_dict()``, and
    its verifier is the core's shape check::

        #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">,
          coprocessors = [#transport.node<name = "dec", hardware = "cpu", init_args = {idle_spin_us = 5000},
          coprocessor_fn = "steane", runs_in = "thread">], transport = "memcpy">

Ops (string/integer settings are properties, written in the attribute dictionary)::

    %s = transport.create {transport = "memcpy", backend_lib = "/x.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<controller>
    %s = transport.get_session {key = "controller"} : !transport.session<controller>
    transport.connect %s : !transport.session<controller>
    %t = transport.connect_async %s : !transport.session<controller> -> !transport.token
    transport.exchange_keys %s : !transport.session<controller>
    %t = transport.exchange_keys_async %s : !transport.session<controller> -> !transport.token
    transport.await %t
    transport.establish_channel %s : !transport.session<controller>
    transport.set_message_sizes %s {in_bytes = 8 : i64, out_bytes = 8 : i64} : !transport.session<controller>
    transport.set_coprocessor_fn %s {symbol = "decode", library = "/lib.so", decoder_id = 0 : i32} : !transport.session<coprocessor>
    transport.start %s : !transport.session<controller>
    transport.stage_payload %s, %ptr, %len {decoder_id = 0 : i32} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %n = transport.collect %s, %buf, %cap : !transport.session<controller> -> i32
    %v = transport.collect_value %s : !transport.session<controller> -> i64
    %slot, %len = transport.reply_slot %s : !transport.session<controller> -> !llvm.ptr, i32
    %ns = transport.last_rtt_ns %s : !transport.session<controller> -> i64
    transport.park %s : !transport.session<coprocessor>
    transport.stop %s : !transport.session<controller>
    transport.destroy %s : !transport.session<controller>

Operands whose type is fixed by the op (``!llvm.ptr``, ``i32``, ``!transport.token``) are not
spelled out; session types always are (the role is information), and so are result types.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from xdsl.dialects.builtin import (
    I32,
    I64,
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.dialects.llvm import LLVMPointerType
from xdsl.ir import (
    Attribute,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Position

from backline_core import (
    Controller,
    Coprocessor,
    CoprocessorFunction,
    Endpoint,
    Placement,
    PlacementError,
)
from backline_core.sdk import FORMAT, HARDWARE, ROLES, RUNS_IN, lib

CONTROLLER, COPROCESSOR = ROLES

#: The opaque pointer type the data-path operands use.
PTR = LLVMPointerType()


# -- types --------------------------------------------------------------------------------


@irdl_attr_definition
class SessionType(ParametrizedAttribute, TypeAttribute):
    """``!transport.session<controller>`` or ``!transport.session<coprocessor>``."""

    name = "transport.session"

    role: StringAttr

    def __init__(self, role: str | StringAttr):
        super().__init__(StringAttr(role) if isinstance(role, str) else role)

    @property
    def role_name(self) -> str:
        return self.role.data

    def verify(self) -> None:
        if self.role.data not in ROLES:
            raise VerifyException(
                f"!transport.session role {self.role.data!r} is unknown; use one of {', '.join(ROLES)}"
            )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.role.data}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            role = parser.parse_keyword_in(ROLES, " as the !transport.session role")
        return (StringAttr(role),)


CONTROLLER_SESSION = SessionType(CONTROLLER)
COPROCESSOR_SESSION = SessionType(COPROCESSOR)


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """``!transport.token``: names an ``*_async`` bring-up step for ``transport.await``."""

    name = "transport.token"


TOKEN = TokenType()


# -- the placement attribute --------------------------------------------------------------
#
# ``#transport.backline<...>`` and the records inside it are typed attributes, one per
# dataclass of the core's placement model: ``Placement``, ``Controller`` and ``Coprocessor``
# (one ``#transport.node``), ``Endpoint`` and ``CoprocessorFunction``. Their parameters are
# derived from the dataclasses' fields -- names, order, type hints and defaults -- so a
# field added to the model needs no change here, unless its type has no value kind below.
# Values are builtin attributes holding the core's dict form (``Placement.to_dict()``).
# Each record prints as ``key = value`` fields in field order, leaving out a field equal
# to its default unless the core's dict form writes it anyway (``hardware``, ``transport``);
# parsing reads exactly the fields and value kinds of that record (never an arbitrary
# attribute), so nesting is bounded.


@dataclass(frozen=True)
class _Kind:
    """How one field's values are parsed and constrained."""

    parse: Callable[[AttrParser, str], Attribute]
    constraint: Any  # the IRDL parameter annotation
    record: type[_Record] | None = None  # the record a dict value converts to (to/from dict)
    optional: bool = False  # None is a value (NoneAttr)


@dataclass(frozen=True)
class _Field:
    """One ``key = value`` field of a record attribute: a field of the core's dataclass."""

    name: str  # the dataclass field's, also the printed key
    param: str  # the attribute parameter's (``name`` is taken by the attribute's own name)
    kind: _Kind
    default: Attribute | None  # None: the field is required
    always: bool = False  # printed even when equal to the default

    @property
    def parse(self) -> Callable[[AttrParser, str], Attribute]:
        return self.kind.parse


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _number(parser: AttrParser, what: str, parse: Callable[[], int | float | None]) -> int | float | None:
    """``parse()``, with an integer past 64 bits (or past what Python converts) a parse error."""
    start = parser.pos
    try:
        value = parse()
    except ValueError:  # more digits than Python converts to an int
        value = _I64_MAX + 1
    if isinstance(value, int) and not _I64_MIN <= value <= _I64_MAX:
        parser.raise_error(f"{what}: the integer literal is too long (it must fit in 64 bits)", start, parser.pos)
    return value


def _int_attr(parser: AttrParser, what: str) -> int:
    value = _number(parser, what, lambda: parser.parse_optional_integer(allow_boolean=False))
    if value is None:
        parser.raise_error(f"{what} must be an integer")
    return int(value)


def _optional_text(parser: AttrParser, what: str) -> str | None:
    """A string literal; the lexer makes one with non-ASCII escapes a bytes literal: decode it."""
    if (text := parser.parse_optional_str_literal()) is not None:
        return text
    start = parser.pos
    if (data := parser.parse_optional_bytes_literal()) is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        parser.raise_error(f"{what} is not UTF-8 text", start, parser.pos)


def _p_string(parser: AttrParser, what: str) -> Attribute:
    value = _optional_text(parser, what)
    if value is None:
        parser.raise_error(f'{what} must be a string "..."')
    return StringAttr(value)


def _p_int(parser: AttrParser, what: str) -> Attribute:
    return IntegerAttr(_int_attr(parser, what), i64)


def _p_bool(parser: AttrParser, what: str) -> Attribute:
    value = parser.parse_optional_boolean()
    if value is None:
        parser.raise_error(f"{what} must be true or false")
    return IntegerAttr.from_bool(value)


def _p_scalar(parser: AttrParser, what: str, floats: bool) -> Attribute:
    if (text := _optional_text(parser, what)) is not None:
        return StringAttr(text)
    if (flag := parser.parse_optional_boolean()) is not None:
        return IntegerAttr.from_bool(flag)
    start = parser.pos
    number = _number(parser, what, parser.parse_optional_number)
    if isinstance(number, float) and floats:
        return FloatAttr(number, f64)
    if isinstance(number, int):
        return IntegerAttr(number, i64)
    kinds = "a string, an integer, a float or a boolean" if floats else "a string or an integer"
    parser.raise_error(f"{what} must be {kinds}", start)


def _scalar_dict(floats: bool) -> Callable[[AttrParser, str], Attribute]:
    def parse(parser: AttrParser, what: str) -> Attribute:
        entries: dict[str, Attribute] = {}

        def entry() -> None:
            at = parser.pos
            key = parser.parse_optional_identifier()
            if key is None:
                key = _optional_text(parser, f"{what} key")
            if key is None:
                parser.raise_error(f"{what}: expected a key (an identifier or a string)")
            if key in entries:
                parser.raise_error(f"{what}: key {key!r} appears twice", at, parser.pos)
            parser.parse_punctuation("=", f" after {what} key {key!r}")
            entries[key] = _p_scalar(parser, f"{what}[{key!r}]", floats)

        parser.parse_comma_separated_list(parser.Delimiter.BRACES, entry, f" in {what}")
        return DictionaryAttr({k: entries[k] for k in sorted(entries)})

    return parse


def _p_int_list(parser: AttrParser, what: str) -> Attribute:
    items = parser.parse_comma_separated_list(
        parser.Delimiter.SQUARE, lambda: IntegerAttr(_int_attr(parser, f"{what} item"), i64), f" in {what}")
    return ArrayAttr(items)


def _p_record(cls: type[_Record]) -> Callable[[AttrParser, str], Attribute]:
    def parse(parser: AttrParser, what: str) -> Attribute:
        if parser.parse_optional_characters(f"#{cls.name}") is None:
            parser.raise_error(f"{what} must be a #{cls.name}<...>")
        return cls.new(cls.parse_parameters(parser))

    return parse


def _p_record_list(cls: type[_Record]) -> Callable[[AttrParser, str], Attribute]:
    item = _p_record(cls)

    def parse(parser: AttrParser, what: str) -> Attribute:
        return ArrayAttr(parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: item(parser, f"{what} item"), f" in {what}"))

    return parse


def _p_string_or_record(cls: type[_Record]) -> Callable[[AttrParser, str], Attribute]:
    def parse(parser: AttrParser, what: str) -> Attribute:
        if (text := _optional_text(parser, what)) is not None:
            return StringAttr(text)
        if parser.parse_optional_characters(f"#{cls.name}") is None:
            parser.raise_error(f'{what} must be a string "..." or a #{cls.name}<...>')
        return cls.new(cls.parse_parameters(parser))

    return parse


#: core dataclass -> its record attribute (filled as the records are defined, inner ones first)
_RECORD_OF: dict[type, type[_Record]] = {}

_STRING = _Kind(_p_string, StringAttr)


def _value_kind(hint: Any, where: str) -> _Kind:
    """The value kind of a field typed ``hint`` (its values as the core's dict form holds them)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        kinds = [_value_kind(m, where) for m in members]
        records = {k.record for k in kinds if k.record is not None}
        if len(kinds) == 1:
            kind = kinds[0]
        elif len(records) == 1 and all(k.record is not None or k.parse is _p_string for k in kinds):
            (record,) = records
            kind = _Kind(_p_string_or_record(record), StringAttr | record, record)
        else:
            raise TypeError(f"{where}: the placement attributes have no value kind for the union {hint}; "
                            "add one in backline_compiler/dialects/transport.py")
        return dataclasses.replace(kind, optional=len(members) < len(args))
    # the dict form writes bytes as hex text and a Python callable as its module:qualname
    if hint in (str, bytes) or hint is Callable or origin is Callable:
        return _STRING
    if hint is bool:
        return _Kind(_p_bool, IntegerAttr)
    if hint is int:
        return _Kind(_p_int, IntegerAttr)
    if origin is tuple and args[1:] == (Ellipsis,) and args[0] is int:
        return _Kind(_p_int_list, ArrayAttr[IntegerAttr])
    if origin in (Mapping, dict) and args[0] is str:
        return _Kind(_scalar_dict(floats=float in (typing.get_args(args[1]) or (args[1],))), DictionaryAttr)
    if origin in (Sequence, list, tuple) and args and args[0] in _RECORD_OF:
        record = _RECORD_OF[args[0]]
        return _Kind(_p_record_list(record), ArrayAttr[record], record)
    if hint in _RECORD_OF:
        return _Kind(_p_record(_RECORD_OF[hint]), _RECORD_OF[hint], _RECORD_OF[hint])
    raise TypeError(f"{where}: the placement attributes have no value kind for the type {hint}; "
                    "add one in backline_compiler/dialects/transport.py")


def _default_form(value: Any) -> Any:
    """A dataclass default in the dict form (bytes as hex text, a tuple as a list)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return list(value)
    return value


def _fields(short: str, sources: Sequence[type], probes: Sequence[Mapping[str, Any]]) -> tuple[_Field, ...]:
    """The fields of a record holding the dataclasses ``sources`` (in their field order).

    A field only some sources have is optional in the record; ``probes`` are the core's dict
    forms of such objects with default fields, which say what the core writes even at its default.
    """
    found: dict[str, list[tuple[type, dataclasses.Field, Any]]] = {}
    for source in sources:
        hints = typing.get_type_hints(source)
        for f in dataclasses.fields(source):
            if f.init and f.compare and not f.name.startswith("_"):  # what the placement's value is made of
                found.setdefault(f.name, []).append((source, f, hints[f.name]))
    out = []
    for name, where in found.items():
        source, f, hint = where[0]
        if any(h != hint for _, _, h in where):
            raise TypeError(f"{short}: field {name!r} has different types in {[s.__name__ for s, _, _ in where]}")
        kind = _value_kind(hint, f"{source.__name__}.{name}")
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None if len(where) < len(sources) else dataclasses.MISSING
        if value is dataclasses.MISSING:
            default = None
        elif value is None:
            default, kind = _NONE, dataclasses.replace(kind, optional=True)
        else:
            default = _attr(_default_form(value), kind.record, f"{source.__name__}.{name} default")
        always = default is not None and not isinstance(default, NoneAttr) and any(
            name in p and p[name] == _plain(default) for p in probes)
        param = f"{short}_{name}" if name == "name" or hasattr(ParametrizedAttribute, name) else name
        out.append(_Field(name, param, kind, default, always))
    return tuple(out)


def _float_text(value: float) -> str:
    """``repr`` with the '.' the MLIR float syntax needs (``1e-05`` -> ``1.0e-05``)."""
    mantissa, e, exponent = repr(value).partition("e")
    return (mantissa if "." in mantissa else mantissa + ".0") + e + exponent


def _print_value(printer: Printer, value: Attribute) -> None:
    if isinstance(value, StringAttr):
        printer.print_string_literal(value.data)
    elif isinstance(value, IntegerAttr):
        number = value.value.data
        printer.print_string(("true" if number else "false") if value.type == i1 else str(number))
    elif isinstance(value, FloatAttr):
        printer.print_string(_float_text(value.value.data))
    elif isinstance(value, DictionaryAttr):
        printer.print_string("{")
        for i, key in enumerate(sorted(value.data)):
            printer.print_string(", " if i else "")
            printer.print_identifier_or_string_literal(key)
            printer.print_string(" = ")
            _print_value(printer, value.data[key])
        printer.print_string("}")
    elif isinstance(value, ArrayAttr):
        printer.print_string("[")
        printer.print_list(value.data, lambda item: _print_value(printer, item))
        printer.print_string("]")
    else:
        printer.print_attribute(value)


def _plain(value: Attribute) -> Any:
    """A parameter as the core's dict form holds it."""
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, StringAttr):
        return value.data
    if isinstance(value, IntegerAttr):
        return bool(value.value.data) if value.type == i1 else value.value.data
    if isinstance(value, FloatAttr):
        return value.value.data
    if isinstance(value, DictionaryAttr):
        return {k: _plain(v) for k, v in value.data.items()}
    if isinstance(value, ArrayAttr):
        return [_plain(v) for v in value.data]
    raise VerifyException(f"a placement attribute cannot hold {value}")


def _attr(value: Any, record: type[_Record] | None, what: str) -> Attribute:
    """Inverse of :func:`_plain` (an attribute is kept as it is)."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, Mapping):
        if record is not None:
            return record.from_dict(value)
        return DictionaryAttr({str(k): _attr(value[k], None, f"{what}[{k!r}]") for k in sorted(value)})
    if isinstance(value, (list, tuple)):
        return ArrayAttr([_attr(v, record, f"{what} item") for v in value])
    if isinstance(value, bool):
        return IntegerAttr.from_bool(value)
    if isinstance(value, int) and _I64_MIN <= value <= _I64_MAX:
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    raise VerifyException(f"{what}: {value!r} has no #transport.backline form")


class _Record(ParametrizedAttribute):
    """A ``#transport.<kind><key = value, ...>`` attribute (see the comment above)."""

    FIELDS: ClassVar[tuple[_Field, ...]] = ()

    def __init__(self, **fields: Any) -> None:
        """Fields by their printed names; a plain value (str, int, dict, ...) is converted, None is the default."""
        unknown = set(fields) - {f.name for f in self.FIELDS}
        if unknown:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(unknown)}")
        params = []
        for f in self.FIELDS:
            value = fields.get(f.name)
            if value is None:
                value = f.default
            elif not isinstance(value, Attribute):
                value = _attr(value, f.kind.record, f"#{self.name} {f.name}")
            params.append(value)
        super().__init__(*params)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        shown = [(f, v) for f, v in zip(self.FIELDS, self.parameters) if f.always or v != f.default]
        for i, (f, value) in enumerate(shown):
            printer.print_string(f"{', ' if i else ''}{f.name} = ")
            _print_value(printer, value)
        printer.print_string(">")

    @classmethod
    def parse_fields(cls, parser: AttrParser) -> tuple[list[Attribute], Position, Position]:
        """The parameters of ``<...>``, and where it starts and ends."""
        start = parser.pos
        by_name = {f.name: f for f in cls.FIELDS}
        known = ", ".join(by_name)
        values: dict[str, Attribute] = {}
        parser.parse_punctuation("<", f" after #{cls.name}")
        end = parser.pos
        if parser.parse_optional_punctuation(">") is None:
            while True:
                at = parser.pos
                key = parser.parse_optional_identifier()
                if key is None:
                    parser.raise_error(f"expected a field of #{cls.name} ({known})")
                if key not in by_name:
                    parser.raise_error(f"#{cls.name} has no field {key!r}; its fields: {known}", at, parser.pos)
                if key in values:
                    parser.raise_error(f"#{cls.name} field {key!r} is given twice", at, parser.pos)
                parser.parse_punctuation("=", f" after #{cls.name} field {key!r}")
                values[key] = by_name[key].parse(parser, f"#{cls.name} {key}")
                end = parser.pos
                if parser.parse_optional_punctuation(">") is not None:
                    break
                parser.parse_punctuation(",", f" or '>' after #{cls.name} field {key!r}")
        for f in cls.FIELDS:
            if f.default is None and f.name not in values:
                parser.raise_error(f"#{cls.name} needs the field {f.name!r}", start, end + 1)
        return [values.get(f.name, f.default) for f in cls.FIELDS], start, end + 1

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return cls.parse_fields(parser)[0]

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from their defaults (or are always written), as plain values."""
        return {f.name: _plain(v) for f, v in zip(self.FIELDS, self.parameters) if f.always or v != f.default}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_dict` (the core's dict form of this record)."""
        by_name = {f.name: f for f in cls.FIELDS}
        unknown = sorted(str(k) for k in data if k not in by_name and k != "format")
        if unknown:
            raise VerifyException(f"#{cls.name} has no fields {unknown}; its fields: {', '.join(by_name)}")
        return cls(**{k: v for k, v in data.items() if k in by_name})


_NONE = NoneAttr()

# The core's dict form of a placement whose records have their default fields (and what
# each record needs): it writes ``hardware`` and ``transport`` even at their defaults.
_PROBE = Placement(controller=Controller(), coprocessors=[Coprocessor(
    coprocessor_fn=CoprocessorFunction(name="f", library="l", symbol="s"), endpoint=Endpoint(host="h", port=1))]
).to_dict()
_NODE_PROBES = (_PROBE["controller"], *_PROBE["coprocessors"])


def _record(base: type[_Record], cls_name: str, attr_name: str, doc: str, sources: Sequence[type],
            probes: Sequence[Mapping[str, Any]]) -> Any:
    """Define the record attribute ``#attr_name<...>`` of the core's dataclasses ``sources``."""
    short = attr_name.rpartition(".")[2]
    fields = _fields(short, sources, probes)
    constraints = {f.param: f.kind.constraint | NoneAttr if f.kind.optional else f.kind.constraint for f in fields}
    namespace = {"name": attr_name, "FIELDS": fields, "__doc__": doc, "__module__": __name__,
                 "__qualname__": cls_name, "__annotations__": constraints}
    cls = irdl_attr_definition(init=False)(type(cls_name, (base,), namespace))
    for source in sources:
        _RECORD_OF[source] = cls
    return cls


EndpointAttr = _record(_Record, "EndpointAttr", "transport.endpoint", """\
``#transport.endpoint<host = "::1", port = 9000>``: a coprocessor's network address
(the fields of :class:`~backline_core.Endpoint`).""", [Endpoint], [_PROBE["coprocessors"][0]["endpoint"]])

FnAttr = _record(_Record, "FnAttr", "transport.fn", """\
``#transport.fn<name = "steane", library = "...", symbol = "...", decoder_ids = [0, 1], ...>``:
a :class:`~backline_core.CoprocessorFunction` (its fields, in its dict form: ``context`` as hex
text, ``python`` as ``module:qualname``).""", [CoprocessorFunction], [_PROBE["coprocessors"][0]["coprocessor_fn"]])

NodeAttr = _record(_Record, "NodeAttr", "transport.node", """\
``#transport.node<name = "dec", hardware = "cpu", runs_in = "thread", ...>``: a controller or a
coprocessor of a placement (the fields of :class:`~backline_core.Controller` and
:class:`~backline_core.Coprocessor`; ``hardware`` is always written).""", [Controller, Coprocessor], _NODE_PROBES)


def _core_message(exc: Exception) -> str:
    # The core's dict reader says "JSON"; here the text is the attribute.
    return str(exc).replace("invalid placement JSON", "invalid #transport.backline placement", 1)


@functools.lru_cache(maxsize=64)
def _placement_of(attr: BacklineAttr) -> Placement:
    return Placement.from_dict(attr.to_dict())


class _Placement(_Record):
    """What ``#transport.backline`` adds to a record: it is a :class:`Placement`."""

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        params, start, end = cls.parse_fields(parser)
        data = {"format": FORMAT, **{f.name: _plain(v) for f, v in zip(cls.FIELDS, params) if v != f.default}}
        try:
            placement = Placement.from_dict(data)
        except PlacementError as exc:
            parser.raise_error(_core_message(exc), start, end)
        return cls.from_placement(placement).parameters

    @classmethod
    def from_placement(cls, placement: Placement) -> BacklineAttr:
        """The attribute of ``placement`` (PlacementError if a function of it cannot be named)."""
        return cls.from_dict(placement.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The core's dict form (``Placement.from_dict`` reads it)."""
        return {"format": FORMAT, **super().to_dict()}

    def placement(self) -> Placement:
        """The :class:`Placement` (VerifyException with the core's message if its shape is wrong)."""
        try:
            return _placement_of(self)
        except PlacementError as exc:
            raise VerifyException(_core_message(exc)) from exc

    def verify(self) -> None:
        self.placement()


BacklineAttr = _record(_Placement, "BacklineAttr", "transport.backline", """\
``#transport.backline<controller = #transport.node<...>, coprocessors = [#transport.node<...>, ...],
transport = "memcpy", qec_code = "steane">``: a placement (the fields of :class:`~backline_core.Placement`).

It converts to and from the core's :class:`~backline_core.Placement` through
``Placement.to_dict()`` / ``from_dict()``; verifying it checks the placement's shape (no
plugin is consulted). Parsing stores the canonical form (default names filled in, keys
sorted), so equal placements print the same text.""", [Placement], [_PROBE])


# -- op helpers ---------------------------------------------------------------------------


def _needs_role(op: Operation, session: SSAValue, role: str) -> None:
    got = session.type
    if not (isinstance(got, SessionType) and got.role.data == role):
        raise VerifyException(f"'{op.name}' needs a !transport.session<{role}>, got {got}")


def _str(value: str | StringAttr) -> StringAttr:
    return StringAttr(value) if isinstance(value, str) else value


def _int(value: int | IntegerAttr, type_: Attribute) -> IntegerAttr:
    return IntegerAttr(value, type_) if isinstance(value, int) else value


def _session_type(role: str | SessionType) -> SessionType:
    return role if isinstance(role, SessionType) else SessionType(role)


_SESSION_FORMAT = "$session attr-dict `:` type($session)"


class _SessionOp(IRDLOperation):
    """An op whose first operand is a session; ``ROLE`` (if set) is the role it needs."""

    ROLE: ClassVar[str | None] = None

    def verify_(self) -> None:
        if self.ROLE is not None:
            _needs_role(self, self.operands[0], self.ROLE)


class _SessionOnlyOp(_SessionOp):
    """An op whose only operand is the session and that has no results."""

    session = operand_def(SessionType)
    assembly_format = _SESSION_FORMAT

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session])


class _AsyncSessionOp(_SessionOp):
    """A bring-up step that returns at once with a token for ``transport.await``."""

    session = operand_def(SessionType)
    token = result_def(TOKEN)
    assembly_format = "$session attr-dict `:` type($session) `->` type($token)"

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session], result_types=[TOKEN])


# -- bring-up -----------------------------------------------------------------------------


@irdl_op_definition
class CreateOp(IRDLOperation):
    """Instantiate a session on ``backend_lib``; the result type's role picks the side.

    ``transport`` is the plugin name, ``key`` the session registry key (the node name),
    ``config`` the node's configuration string, ``hardware`` the node's hardware.
    ``runs_in`` is where the coprocessor runs (``controller-thread``, ``thread``, ``process``
    or ``executor``, which the backend sees as another process): a coprocessor session's own
    place, or where a controller session expects its coprocessor; absent,
    ``bl_session_create`` gets the core's default for the role.
    """

    name = "transport.create"

    transport = prop_def(StringAttr)
    backend_lib = prop_def(StringAttr)
    key = prop_def(StringAttr)
    config = prop_def(StringAttr)
    hardware = prop_def(StringAttr)
    runs_in = opt_prop_def(StringAttr)

    session = result_def(SessionType)

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($session)"

    def __init__(
        self,
        role: str | SessionType,
        *,
        transport: str | StringAttr,
        backend_lib: str | StringAttr,
        key: str | StringAttr,
        config: str | StringAttr = "",
        hardware: str | StringAttr = "cpu",
        runs_in: str | StringAttr | None = None,
    ):
        props: dict[str, Attribute] = {
            "transport": _str(transport),
            "backend_lib": _str(backend_lib),
            "key": _str(key),
            "config": _str(config),
            "hardware": _str(hardware),
        }
        if runs_in is not None:
            props["runs_in"] = _str(runs_in)
        super().__init__(result_types=[_session_type(role)], properties=props)

    def verify_(self) -> None:
        if not self.key.data:
            raise VerifyException("'transport.create' needs a non-empty key (the node name)")
        if not self.transport.data:
            raise VerifyException("'transport.create' needs a non-empty transport (the plugin name)")
        if self.hardware.data not in HARDWARE:
            raise VerifyException(
                f"'transport.create' hardware {self.hardware.data!r} is unknown; use one of {', '.join(HARDWARE)}"
            )
        if self.runs_in is not None and self.runs_in.data not in RUNS_IN:
            raise VerifyException(
                f"'transport.create' runs_in {self.runs_in.data!r} is not a place; use one of {', '.join(RUNS_IN)}"
            )


@irdl_op_definition
class GetSessionOp(IRDLOperation):
    """The session ``transport.create`` registered under (result role, ``key``)."""

    name = "transport.get_session"

    key = prop_def(StringAttr)
    session = result_def(SessionType)

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($session)"

    def __init__(self, role: str | SessionType, key: str | StringAttr):
        super().__init__(result_types=[_session_type(role)], properties={"key": _str(key)})

    def verify_(self) -> None:
        if not self.key.data:
            raise VerifyException("'transport.get_session' needs a non-empty key")


@irdl_op_definition
class ConnectOp(_SessionOnlyOp):
    """Reach the peer and bring up the out-of-band channel."""

    name = "transport.connect"


@irdl_op_definition
class ConnectAsyncOp(_AsyncSessionOp):
    """``transport.connect`` that returns at once; ``transport.await`` its token."""

    name = "transport.connect_async"


@irdl_op_definition
class ExchangeKeysOp(_SessionOnlyOp):
    """Swap region handles with the peer (provisions the local reply region)."""

    name = "transport.exchange_keys"


@irdl_op_definition
class ExchangeKeysAsyncOp(_AsyncSessionOp):
    """``transport.exchange_keys`` that returns at once; ``transport.await`` its token."""

    name = "transport.exchange_keys_async"


@irdl_op_definition
class AwaitOp(IRDLOperation):
    """Block until the ``*_async`` step that produced ``token`` has finished."""

    name = "transport.await"

    token = operand_def(TOKEN)
    assembly_format = "$token attr-dict"

    def __init__(self, token: SSAValue | Operation):
        super().__init__(operands=[token])


@irdl_op_definition
class EstablishChannelOp(_SessionOnlyOp):
    """Program the data movement over the exchanged regions."""

    name = "transport.establish_channel"


@irdl_op_definition
class SetMessageSizesOp(_SessionOp):
    """Request and reply size in bytes of one round. Controller only."""

    name = "transport.set_message_sizes"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    in_bytes = prop_def(IntegerAttr[I64])
    out_bytes = prop_def(IntegerAttr[I64])

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _SESSION_FORMAT

    def __init__(self, session: SSAValue | Operation, in_bytes: int | IntegerAttr, out_bytes: int | IntegerAttr):
        super().__init__(
            operands=[session],
            properties={"in_bytes": _int(in_bytes, i64), "out_bytes": _int(out_bytes, i64)},
        )

    def verify_(self) -> None:
        super().verify_()
        for field in ("in_bytes", "out_bytes"):
            value = getattr(self, field).value.data
            if value <= 0:
                raise VerifyException(f"'transport.set_message_sizes' {field} must be positive, got {value}")


@irdl_op_definition
class SetCoprocessorFnOp(_SessionOp):
    """Register the per-round function the coprocessor runs. Coprocessor only.

    ``symbol`` in ``library`` serves ``decoder_id``; ``init_symbol``/``fini_symbol`` are
    optional lifecycle hooks and ``context`` optional bytes (hex) handed to the init hook.
    """

    name = "transport.set_coprocessor_fn"
    ROLE: ClassVar[str | None] = COPROCESSOR

    session = operand_def(SessionType)
    symbol = prop_def(StringAttr)
    library = prop_def(StringAttr)
    decoder_id = prop_def(IntegerAttr[I32])
    init_symbol = opt_prop_def(StringAttr)
    fini_symbol = opt_prop_def(StringAttr)
    context = opt_prop_def(StringAttr)

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _SESSION_FORMAT

    def __init__(
        self,
        session: SSAValue | Operation,
        *,
        symbol: str | StringAttr,
        library: str | StringAttr,
        decoder_id: int | IntegerAttr = 0,
        init_symbol: str | StringAttr | None = None,
        fini_symbol: str | StringAttr | None = None,
        context: str | bytes | StringAttr | None = None,
    ):
        if isinstance(context, bytes):
            context = context.hex()
        props: dict[str, Attribute] = {
            "symbol": _str(symbol),
            "library": _str(library),
            "decoder_id": _int(decoder_id, i32),
        }
        for key, value in (("init_symbol", init_symbol), ("fini_symbol", fini_symbol), ("context", context)):
            if value is not None:
                props[key] = _str(value)
        super().__init__(operands=[session], properties=props)

    def verify_(self) -> None:
        super().verify_()
        if not self.symbol.data:
            raise VerifyException("'transport.set_coprocessor_fn' needs a non-empty symbol")
        _check_decoder_id(self, self.decoder_id)
        if self.context is not None:
            try:
                bytes.fromhex(self.context.data)
            except ValueError:
                raise VerifyException(
                    f"'transport.set_coprocessor_fn' context must be hex (two digits a byte), got {self.context.data!r}"
                ) from None


def _check_decoder_id(op: Operation, attr: IntegerAttr) -> None:
    value = attr.value.data
    if not 0 <= value < lib.BL_MAX_DECODERS:
        raise VerifyException(f"'{op.name}' decoder_id must be in [0, {lib.BL_MAX_DECODERS}), got {value}")


# -- rounds -------------------------------------------------------------------------------


@irdl_op_definition
class StartOp(_SessionOnlyOp):
    """Run the engine."""

    name = "transport.start"


@irdl_op_definition
class StagePayloadOp(_SessionOp):
    """Copy ``length`` bytes at ``payload`` into the request slot, tagged ``decoder_id``. Controller only."""

    name = "transport.stage_payload"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    payload = operand_def(PTR)
    length = operand_def(i32)
    decoder_id = prop_def(IntegerAttr[I32])

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$session `,` $payload `,` $length attr-dict `:` type($session)"

    def __init__(
        self,
        session: SSAValue | Operation,
        payload: SSAValue | Operation,
        length: SSAValue | Operation,
        decoder_id: int | IntegerAttr = 0,
    ):
        super().__init__(operands=[session, payload, length], properties={"decoder_id": _int(decoder_id, i32)})

    def verify_(self) -> None:
        super().verify_()
        _check_decoder_id(self, self.decoder_id)


@irdl_op_definition
class PostOp(_SessionOnlyOp):
    """Transmit the staged request. Controller only."""

    name = "transport.post"
    ROLE: ClassVar[str | None] = CONTROLLER


@irdl_op_definition
class CollectOp(_SessionOp):
    """Wait for the reply and copy it into ``buffer`` (at most ``capacity`` bytes); returns its length.

    Destination-passing form. Controller only.
    """

    name = "transport.collect"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    buffer = operand_def(PTR)
    capacity = operand_def(i32)
    length = result_def(i32)

    assembly_format = "$session `,` $buffer `,` $capacity attr-dict `:` type($session) `->` type($length)"

    def __init__(self, session: SSAValue | Operation, buffer: SSAValue | Operation, capacity: SSAValue | Operation):
        super().__init__(operands=[session, buffer, capacity], result_types=[i32])


@irdl_op_definition
class CollectValueOp(_SessionOp):
    """Wait for the reply; its first (up to) 8 bytes, little-endian, zero-extended. Controller only."""

    name = "transport.collect_value"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    value = result_def(i64)

    assembly_format = "$session attr-dict `:` type($session) `->` type($value)"

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session], result_types=[i64])


@irdl_op_definition
class ReplySlotOp(_SessionOp):
    """This round's slot in the transport-owned reply ring: (pointer, length). Controller only."""

    name = "transport.reply_slot"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    slot = result_def(PTR)
    length = result_def(i32)

    assembly_format = "$session attr-dict `:` type($session) `->` type($slot) `,` type($length)"

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session], result_types=[PTR, i32])


@irdl_op_definition
class LastRttNsOp(_SessionOp):
    """The previous round's round-trip time in nanoseconds. Controller only."""

    name = "transport.last_rtt_ns"
    ROLE: ClassVar[str | None] = CONTROLLER

    session = operand_def(SessionType)
    rtt = result_def(i64)

    assembly_format = "$session attr-dict `:` type($session) `->` type($rtt)"

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session], result_types=[i64])


# -- teardown -----------------------------------------------------------------------------


@irdl_op_definition
class ParkOp(_SessionOnlyOp):
    """Block the calling thread until the session is stopped (from another thread) or destroyed.

    Coprocessor only: the thread that launched a coprocessor whose backend serves on its own
    poller thread (an executor's serve function) waits here, then tears it down.
    """

    name = "transport.park"
    ROLE: ClassVar[str | None] = COPROCESSOR


@irdl_op_definition
class StopOp(_SessionOnlyOp):
    """Halt the session (idempotent)."""

    name = "transport.stop"


@irdl_op_definition
class DestroyOp(_SessionOnlyOp):
    """Release the session."""

    name = "transport.destroy"


# -- status ----------------------------------------------------------------------------------


@irdl_op_definition
class TakeStatusOp(IRDLOperation):
    """The first runtime failure recorded on this thread since the last take (0 if none).

    Lowered transport ops record every status instead of branching on it; a function
    returns this to its caller, and ``bl_last_error()`` then gives that failure's text.
    """

    name = "transport.take_status"

    status = result_def(i32)

    assembly_format = "attr-dict `:` type($status)"

    def __init__(self):
        super().__init__(result_types=[i32])


Transport = Dialect(
    "transport",
    [
        CreateOp,
        GetSessionOp,
        ConnectOp,
        ConnectAsyncOp,
        ExchangeKeysOp,
        ExchangeKeysAsyncOp,
        AwaitOp,
        EstablishChannelOp,
        SetMessageSizesOp,
        SetCoprocessorFnOp,
        StartOp,
        StagePayloadOp,
        PostOp,
        CollectOp,
        CollectValueOp,
        ReplySlotOp,
        LastRttNsOp,
        ParkOp,
        StopOp,
        DestroyOp,
        TakeStatusOp,
    ],
    [SessionType, TokenType, BacklineAttr, NodeAttr, EndpointAttr, FnAttr],
)
