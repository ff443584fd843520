"""The ``executor`` dialect: host-to-executor kernel dispatch, as IR.

Types ``!executor.session`` (:class:`SessionType`) and ``!executor.token`` (:class:`TokenType`).
Ops (string settings are properties; ``symbol``/``object_file``/``library`` are written
in the parentheses after the session, as in the reference)::

    %session = executor.open("decoder-host:9000") : !executor.session
    executor.send_binary %session("/tmp/workspace/decode.o") : !executor.session
    %out = executor.launch %session("decode", "/tmp/workspace/decode.o")(%in) : !executor.session, (memref<8xi8>) -> memref<8xi8>
    %tok = executor.launch_async %session("spin", "/tmp/workspace/spin.o") : !executor.session -> !executor.token
    executor.await %session, %tok : !executor.session
    %r = executor.call %session("fn", "/lib.so")(%a, %buf) {num_input_args = 1 : i64} : !executor.session, (i64, !llvm.ptr) -> i32
    executor.close %session : !executor.session

``executor.open`` checks its address with :meth:`backline_core._placement.Endpoint.parse`.

Semantics (ABI 2 of the core's ``backline/executor.h``, which ``convert-executor-to-llvm``
targets):

* values cross by copy. A ``!llvm.ptr`` operand of ``executor.launch`` / ``executor.call`` is
  a *buffer*: its value is the address of a host ``bl_executor_buffer {ptr data; i64 bytes}``
  (``!llvm.struct<(ptr, i64)>``); the executor gets a copy of those ``bytes`` bytes, the
  kernel sees a pointer to its copy, and after the call the bytes are copied back into
  ``data``. A ``!llvm.ptr`` is never a result.
* ``executor.launch_async`` runs a function of C type ``int32_t fn(void)`` (a
  ``bl_status``) on a thread of its own in the executor; ``executor.await`` waits for it and
  its status is the function's (the executor's ``bl_last_error()`` text with it).
* ``executor.close`` ends the session: the executor waits for its outstanding launches,
  then drops its objects. Everything the session's launches set up in the executor (e.g. a
  coprocessor's transport session) lives until then.
"""

from __future__ import annotations

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, i64
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
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from backline_core._errors import PlacementError
from backline_core._placement import Endpoint


@irdl_attr_definition
class SessionType(ParametrizedAttribute, TypeAttribute):
    """``!executor.session``: a connection to one executor process."""

    name = "executor.session"


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """``!executor.token``: names one ``executor.launch_async``."""

    name = "executor.token"


SESSION = SessionType()
TOKEN = TokenType()


def _str(value: str | StringAttr) -> StringAttr:
    return StringAttr(value) if isinstance(value, str) else value


def _non_empty(op: Operation, **fields: StringAttr) -> None:
    for key, value in fields.items():
        if not value.data:
            raise VerifyException(f"'{op.name}' needs a non-empty {key}")


@irdl_op_definition
class OpenOp(IRDLOperation):
    """Open (or reuse) a session with the executor at ``address`` (``host:port``)."""

    name = "executor.open"

    address = prop_def(StringAttr)
    session = result_def(SESSION)

    assembly_format = "`(` $address `)` attr-dict `:` type($session)"

    def __init__(self, address: str | StringAttr):
        super().__init__(result_types=[SESSION], properties={"address": _str(address)})

    def endpoint(self) -> Endpoint:
        return Endpoint.parse(self.address.data)

    def verify_(self) -> None:
        try:
            self.endpoint()
        except PlacementError as exc:
            raise VerifyException(f"'executor.open' {exc}") from exc


@irdl_op_definition
class SendBinaryOp(IRDLOperation):
    """Ship ``object_file`` over the session; the executor loads it and exposes its symbols."""

    name = "executor.send_binary"

    session = operand_def(SESSION)
    object_file = prop_def(StringAttr)

    assembly_format = "$session `(` $object_file `)` attr-dict `:` type($session)"

    def __init__(self, session: SSAValue | Operation, object_file: str | StringAttr):
        super().__init__(operands=[session], properties={"object_file": _str(object_file)})

    def verify_(self) -> None:
        _non_empty(self, object_file=self.object_file)


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Invoke ``symbol`` of a sent ``object_file``; operands and results mirror the host-side call.

    A ``!llvm.ptr`` operand is the address of a ``bl_executor_buffer`` (see the module docstring).
    """

    name = "executor.launch"

    session = operand_def(SESSION)
    inputs = var_operand_def()
    symbol = prop_def(StringAttr)
    object_file = prop_def(StringAttr)
    outputs = var_result_def()

    assembly_format = (
        "$session `(` $symbol `,` $object_file `)` `` `(` $inputs `)` attr-dict"
        " `:` type($session) `,` functional-type($inputs, $outputs)"
    )

    def __init__(
        self,
        session: SSAValue | Operation,
        symbol: str | StringAttr,
        object_file: str | StringAttr,
        inputs: list[SSAValue | Operation] = (),  # type: ignore[assignment]
        result_types: list[Attribute] = (),  # type: ignore[assignment]
    ):
        super().__init__(
            operands=[session, list(inputs)],
            result_types=[list(result_types)],
            properties={"symbol": _str(symbol), "object_file": _str(object_file)},
        )

    def verify_(self) -> None:
        _non_empty(self, symbol=self.symbol, object_file=self.object_file)


@irdl_op_definition
class LaunchAsyncOp(IRDLOperation):
    """Start ``symbol``, an ``int32_t fn(void)``, without waiting; ``executor.await`` its token."""

    name = "executor.launch_async"

    session = operand_def(SESSION)
    symbol = prop_def(StringAttr)
    object_file = prop_def(StringAttr)
    token = result_def(TOKEN)

    assembly_format = "$session `(` $symbol `,` $object_file `)` attr-dict `:` type($session) `->` type($token)"

    def __init__(self, session: SSAValue | Operation, symbol: str | StringAttr, object_file: str | StringAttr):
        super().__init__(
            operands=[session],
            result_types=[TOKEN],
            properties={"symbol": _str(symbol), "object_file": _str(object_file)},
        )

    def verify_(self) -> None:
        _non_empty(self, symbol=self.symbol, object_file=self.object_file)


@irdl_op_definition
class AwaitOp(IRDLOperation):
    """Block until the ``executor.launch_async`` that produced ``token`` has finished; its
    status is the launched function's return value."""

    name = "executor.await"

    session = operand_def(SESSION)
    token = operand_def(TOKEN)

    assembly_format = "$session `,` $token attr-dict `:` type($session)"

    def __init__(self, session: SSAValue | Operation, token: SSAValue | Operation):
        super().__init__(operands=[session, token])


@irdl_op_definition
class CallOp(IRDLOperation):
    """Invoke ``symbol`` of an already-loaded shared ``library``.

    The first ``num_input_args`` operands are inputs; the rest are output buffers. A
    ``!llvm.ptr`` operand is the address of a ``bl_executor_buffer``; every buffer's bytes
    are copied back after the call.
    """

    name = "executor.call"

    session = operand_def(SESSION)
    args = var_operand_def()
    symbol = prop_def(StringAttr)
    library = prop_def(StringAttr)
    num_input_args = prop_def(IntegerAttr[I64])
    outputs = var_result_def()

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$session `(` $symbol `,` $library `)` `` `(` $args `)` attr-dict"
        " `:` type($session) `,` functional-type($args, $outputs)"
    )

    def __init__(
        self,
        session: SSAValue | Operation,
        symbol: str | StringAttr,
        library: str | StringAttr,
        args: list[SSAValue | Operation] = (),  # type: ignore[assignment]
        num_input_args: int | None = None,
        result_types: list[Attribute] = (),  # type: ignore[assignment]
    ):
        args = list(args)
        super().__init__(
            operands=[session, args],
            result_types=[list(result_types)],
            properties={
                "symbol": _str(symbol),
                "library": _str(library),
                "num_input_args": IntegerAttr(len(args) if num_input_args is None else num_input_args, i64),
            },
        )

    def verify_(self) -> None:
        _non_empty(self, symbol=self.symbol, library=self.library)
        n = self.num_input_args.value.data
        if not 0 <= n <= len(self.args):
            raise VerifyException(
                f"'executor.call' num_input_args = {n} must be in [0, {len(self.args)}] (the number of operands "
                "after the session)"
            )


@irdl_op_definition
class CloseOp(IRDLOperation):
    """Release the session and its executor-side resources."""

    name = "executor.close"

    session = operand_def(SESSION)
    assembly_format = "$session attr-dict `:` type($session)"

    def __init__(self, session: SSAValue | Operation):
        super().__init__(operands=[session])


Executor = Dialect(
    "executor",
    [OpenOp, SendBinaryOp, LaunchOp, LaunchAsyncOp, AwaitOp, CallOp, CloseOp],
    [SessionType, TokenType],
)
