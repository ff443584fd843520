"""The ``transport`` dialect: a controller/coprocessor session and its rounds, as IR.

Types
    ``!transport.session<controller>`` / ``!transport.session<coprocessor>`` (:class:`SessionType`):
    an opaque session handle whose role is part of the type, so the verifier rejects a
    controller-only op on a coprocessor session. ``!transport.token`` (:class:`TokenType`)
    names an ``*_async`` bring-up step for ``transport.await``.

Attribute
    ``#transport.backline<...>`` (:class:`BacklineAttr`): the placement, stored as the
    core's canonical attribute text. Parsing, printing and validation all go through
    :mod:`backline_core.serialization`; nothing here re-states a placement rule.

Ops (string/integer settings are properties, written in the attribute dictionary)::

    %s = transport.create {transport = "memcpy", backend_lib = "/x.so", key = "dec", config = "", hardware = "cpu"} : !transport.session<controller>
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
    transport.stop %s : !transport.session<controller>
    transport.destroy %s : !transport.session<controller>

Operands whose type is fixed by the op (``!llvm.ptr``, ``i32``, ``!transport.token``) are not
spelled out; session types always are (the role is information), and so are result types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I32, I64, IntegerAttr, StringAttr, i32, i64
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

from backline_core.errors import PlacementError, PluginError
from backline_core.hookspecs import HARDWARE, ROLES
from backline_core.placement import Placement

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

_PREFIX = "#" + "transport.backline"
_CLOSERS = {">": "<", "]": "[", "}": "{", ")": "("}


def _scan_balanced(content: str, start: int) -> int:
    """Index of the ``>`` closing the ``<`` just before ``start``; -1 if there is none.

    Nested ``<>``, ``[]``, ``{}``, ``()`` are balanced, and a double-quoted string is skipped
    whole (a backslash escapes the next character, covering the core's ``\\"``, ``\\\\`` and
    ``\\XX`` escapes). Mismatched brackets also give -1.
    """
    stack: list[str] = []
    i, n = start, len(content)
    while i < n:
        c = content[i]
        if c == '"':
            i += 1
            while i < n and content[i] != '"':
                i += 2 if content[i] == "\\" else 1
            if i >= n:
                return -1
        elif c in "<[{(":
            stack.append(c)
        elif c in _CLOSERS:
            if not stack:
                return i if c == ">" else -1
            if stack.pop() != _CLOSERS[c]:
                return -1
        i += 1
    return -1


def _check_placement(text: str) -> Placement:
    """The core's parse + validation; its message becomes the VerifyException's."""
    try:
        return Placement.from_attribute(text)
    except (PlacementError, PluginError) as exc:
        raise VerifyException(str(exc)) from exc


@irdl_attr_definition
class BacklineAttr(ParametrizedAttribute):
    """``#transport.backline<...>``: a placement, as the core's canonical attribute text.

    The single parameter ``text`` holds the whole ``#transport.backline<...>`` text. The
    attribute is validated when it is built (xDSL verifies attributes on construction), by
    :meth:`Placement.from_attribute`, so every rule and every message is the core's.
    Parsing reads the balanced body verbatim and stores the canonical form of a valid
    placement (so differently spaced or defaulted spellings print identically).
    """

    name = "transport.backline"

    text: StringAttr

    def __init__(self, text: str | StringAttr):
        super().__init__(StringAttr(text) if isinstance(text, str) else text)

    @staticmethod
    def from_placement(placement: Placement) -> BacklineAttr:
        return BacklineAttr(placement.to_attribute())

    def placement(self) -> Placement:
        """The validated :class:`Placement` (a fresh parse of ``text``)."""
        return _check_placement(self.text.data)

    def verify(self) -> None:
        if not self.text.data.startswith(_PREFIX + "<"):
            raise VerifyException(
                f"#transport.backline text must start with '{_PREFIX}<', got {self.text.data[:40]!r}"
            )
        _check_placement(self.text.data)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(self.text.data[len(_PREFIX) :])

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        # The body is the core's grammar, not xDSL's: take the balanced text between '<'
        # and '>' straight from the input and resume the lexer after it. xDSL 0.75 (pinned)
        # has no public API for this; _current_token / _resume_from are what its own
        # _parse_dialect_symbol_body uses (that one also treats '->' specially, which we don't want).
        if parser._current_token.text != "<":
            parser.raise_error("expected '<' after #transport.backline")
        lt = parser._current_token.span.start
        content = parser.lexer.input.content
        gt = _scan_balanced(content, lt + 1)
        if gt < 0:
            parser.raise_error("unterminated #transport.backline<...>: no balancing '>'", lt)
        raw = _PREFIX + content[lt : gt + 1]
        parser._resume_from(gt + 1)
        try:
            text = Placement.from_attribute(raw).to_attribute()
        except (PlacementError, PluginError):
            text = raw  # building the attribute raises the core's message
        return (StringAttr(text),)


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
    """

    name = "transport.create"

    transport = prop_def(StringAttr)
    backend_lib = prop_def(StringAttr)
    key = prop_def(StringAttr)
    config = prop_def(StringAttr)
    hardware = prop_def(StringAttr)

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
    ):
        super().__init__(
            result_types=[_session_type(role)],
            properties={
                "transport": _str(transport),
                "backend_lib": _str(backend_lib),
                "key": _str(key),
                "config": _str(config),
                "hardware": _str(hardware),
            },
        )

    def verify_(self) -> None:
        if not self.key.data:
            raise VerifyException("'transport.create' needs a non-empty key (the node name)")
        if not self.transport.data:
            raise VerifyException("'transport.create' needs a non-empty transport (the plugin name)")
        if self.hardware.data not in HARDWARE:
            raise VerifyException(
                f"'transport.create' hardware {self.hardware.data!r} is unknown; use one of {', '.join(HARDWARE)}"
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
    if not 0 <= value < 256:
        raise VerifyException(f"'{op.name}' decoder_id must be in [0, 256), got {value}")


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
        StopOp,
        DestroyOp,
        TakeStatusOp,
    ],
    [SessionType, TokenType, BacklineAttr],
)
