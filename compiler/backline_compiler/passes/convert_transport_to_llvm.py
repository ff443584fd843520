"""convert-transport-to-llvm: transport ops become calls into the runtime's C ABI.

Every op maps onto the function of the same name in ``backline/backline.h``
(``transport.post`` -> ``bl_post``, ...); the calls, declarations, globals and stack slots
are built by :class:`~.llvm_lowering.LLVMLowering`. A ``!transport.session<...>`` becomes the
runtime's session pointer (``!llvm.ptr``); strings and context bytes become internal constant
globals (``__bl_str_<n>``, ``__bl_bytes_<n>``); results the runtime returns through
out-parameters are loaded from stack slots allocated in the function's entry block. Lowered calls do not branch on their status: each
is passed through ``bl_status_record``, which keeps the thread's first failure, and
``transport.take_status`` becomes ``bl_status_take()`` -- so a function returns the first
error to its caller and ``bl_last_error()`` holds its text. An absent library, init or fini
symbol, or empty context, is passed as a null pointer.

``transport.create`` passes its ``runs_in`` as the ``bl_runs_in`` value (absent: the core's
default for the role, ``BL_RUNS_ANY`` for a controller). Signatures and constants come from
``backline.h`` through cffi (:func:`~.llvm_lowering.abi_table`, ``backline_core._native.lib``).

``connect_async`` / ``exchange_keys_async`` become ``bl_connect_async`` /
``bl_exchange_keys_async``: the step runs on a runtime worker thread and the
``!transport.token`` is the ``i64`` token it returns (negative: the call itself failed);
``transport.await`` becomes ``bl_await``, whose status is recorded. ``transport.park``
becomes ``bl_park`` (the thread waits until the session is stopped).

Target modules (nested ``builtin.module``s with ``backline.target``, e.g. an
executor-run coprocessor's code from ``inject-transport-session``) are lowered each on
their own: their declarations and constant globals go into the target module, which
``cross-compile-targets`` compiles to a standalone object.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass

from backline_core._session import ROLES, runs_in_code

from ..dialects import transport as t
from .cross_compile_targets import TARGET_ATTR
from .llvm_lowering import PTR, LLVMLowering, abi_table

#: runtime function -> (argument types, result type), from backline.h
RUNTIME: dict[str, tuple[tuple[Attribute, ...], Attribute]] = abi_table(
    "bl_session_create", "bl_session_get", "bl_connect", "bl_alloc_memory", "bl_exchange_keys",
    "bl_establish_channel", "bl_set_message_sizes", "bl_set_coprocessor_fn_by_name", "bl_start",
    "bl_stage_payload", "bl_post", "bl_collect", "bl_reply_slot", "bl_last_rtt_ns", "bl_park", "bl_stop", "bl_destroy",
    "bl_connect_async", "bl_exchange_keys_async", "bl_await", "bl_status_record", "bl_status_take",
)

#: ops that are one runtime call on the session, whose status is recorded
SIMPLE_CALLS: dict[type[Operation], tuple[str, ...]] = {
    t.ConnectOp: ("bl_connect",),
    t.ExchangeKeysOp: ("bl_alloc_memory", "bl_exchange_keys"),  # memory is provisioned at exchange_keys
    t.EstablishChannelOp: ("bl_establish_channel",),
    t.StartOp: ("bl_start",),
    t.PostOp: ("bl_post",),
    t.ParkOp: ("bl_park",),
    t.StopOp: ("bl_stop",),
    t.DestroyOp: ("bl_destroy",),
}


def _lower(lo: LLVMLowering, op: Operation) -> list[SSAValue]:
    """Insert the runtime calls that ``op`` becomes, before it; its replacement results."""
    def cstring(text: str) -> SSAValue:
        return lo.cstring_ptr(text, op)

    def i32_(value: int) -> SSAValue:
        return lo.constant(value, i32, op)

    if type(op) in SIMPLE_CALLS:
        for name in SIMPLE_CALLS[type(op)]:
            lo.recorded(name, [op.operands[0]], op)
        return []
    match op:
        case t.CreateOp():
            out = lo.entry_slot(op, PTR)
            role = op.session.type.role_name
            runs_in = runs_in_code(role, op.runs_in.data if op.runs_in is not None else None)
            lo.recorded("bl_session_create", [cstring(op.backend_lib.data), i32_(ROLES[role]),
                                              cstring(op.key.data), cstring(op.config.data), i32_(runs_in), out], op)
            return [lo.load(out, PTR, op)]
        case t.GetSessionOp():
            return [lo.call("bl_session_get", [i32_(ROLES[op.session.type.role_name]), cstring(op.key.data)], op)]
        case t.ConnectAsyncOp():
            return [lo.call("bl_connect_async", [op.session], op)]
        case t.ExchangeKeysAsyncOp():
            return [lo.call("bl_exchange_keys_async", [op.session], op)]
        case t.AwaitOp():
            lo.recorded("bl_await", [op.token], op)
            return []
        case t.SetMessageSizesOp():
            lo.recorded("bl_set_message_sizes", [op.session, i32_(op.in_bytes.value.data), i32_(op.out_bytes.value.data)], op)
            return []
        case t.SetCoprocessorFnOp():
            _set_fn(lo, op)
            return []
        case t.StagePayloadOp():
            lo.recorded("bl_stage_payload", [op.session, op.payload, op.length, i32_(op.decoder_id.value.data)], op)
            return []
        case t.CollectOp():
            length = lo.entry_slot(op, i32)
            lo.recorded("bl_collect", [op.session, op.buffer, op.capacity, length], op)
            return [lo.load(length, i32, op)]
        case t.CollectValueOp():
            buf = lo.entry_slot(op, i64)
            lo.store(lo.constant(0, i64, op), buf, op)
            lo.recorded("bl_collect", [op.session, buf, i32_(8), lo.entry_slot(op, i32)], op)
            return [lo.load(buf, i64, op)]
        case t.ReplySlotOp():
            data, length = lo.entry_slot(op, PTR), lo.entry_slot(op, i32)
            lo.recorded("bl_reply_slot", [op.session, data, length], op)
            return [lo.load(data, PTR, op), lo.load(length, i32, op)]
        case t.LastRttNsOp():
            return [lo.call("bl_last_rtt_ns", [op.session], op)]
        case t.TakeStatusOp():
            return [lo.call("bl_status_take", [], op)]
    raise lo.fail(f"no lowering for {op.name}")


def _set_fn(lo: LLVMLowering, op: t.SetCoprocessorFnOp) -> None:
    def optional(attr: StringAttr | None) -> SSAValue:
        return lo.cstring_ptr(attr.data, op) if attr is not None and attr.data else lo.null_ptr(op)

    context = bytes.fromhex(op.context.data) if getattr(op, "context", None) is not None else b""
    params = lo.address(lo.bytes_global(context), op) if context else lo.null_ptr(op)
    lo.recorded("bl_set_coprocessor_fn_by_name", [
        op.session, lo.constant(op.decoder_id.value.data, i32, op), optional(op.library),
        lo.cstring_ptr(op.symbol.data, op), optional(op.init_symbol), optional(op.fini_symbol), params,
        lo.constant(len(context), i64, op)], op)


@dataclass(frozen=True)
class ConvertTransportToLLVM(ModulePass):
    """Lower the transport dialect to llvm.call into libbackline (see module docstring)."""

    name = "convert-transport-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        nested = [inner for inner in op.ops if isinstance(inner, ModuleOp) and TARGET_ATTR in inner.attributes]
        for module in (op, *nested):
            lowering = LLVMLowering(module, RUNTIME, pass_name=self.name,
                                    abi="the runtime's C ABI (backline/backline.h)")
            for old in [o for o in _walk_outside(module, nested) if o.dialect_name() == "transport"]:
                lowering.replace(old, _lower(lowering, old))
            lowering.finish()


def _walk_outside(module: ModuleOp, skip: list[ModuleOp]) -> list[Operation]:
    """The ops of ``module``, not descending into the modules of ``skip``."""
    out: list[Operation] = []
    for top in module.ops:
        if top in skip:
            continue
        out.extend(top.walk())
    return out
