"""convert-transport-to-llvm: transport ops become calls into the runtime's C ABI.

Every op maps onto the function of the same name in ``backline/backline.h``
(``transport.post`` -> ``bl_post``, ...). A ``!transport.session<...>`` becomes the
runtime's session pointer (``!llvm.ptr``); strings and context bytes become private
constant globals. Lowered calls do not branch on their status: each is passed through
``bl_status_record``, which keeps the thread's first failure, and
``transport.take_status`` becomes ``bl_status_take()`` -- so a function returns the first
error to its caller and ``bl_last_error()`` holds its text.

Not lowered to anything asynchronous: the C ABI has no asynchronous bring-up yet, so
``connect_async`` / ``exchange_keys_async`` run synchronously, their token carries the
status, and ``transport.await`` records it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from ..dialects import transport as t

PTR = llvm.LLVMPointerType()
ROLE_CODES = {"controller": 0, "coprocessor": 1}

#: runtime function -> (argument types, result type)
RUNTIME: dict[str, tuple[tuple[Attribute, ...], Attribute]] = {
    "bl_session_create": ((PTR, i32, PTR, PTR, PTR), i32),
    "bl_session_get": ((i32, PTR), PTR),
    "bl_connect": ((PTR,), i32),
    "bl_alloc_memory": ((PTR,), i32),
    "bl_exchange_keys": ((PTR,), i32),
    "bl_establish_channel": ((PTR,), i32),
    "bl_set_message_sizes": ((PTR, i32, i32), i32),
    "bl_set_coprocessor_fn_by_name": ((PTR, i32, PTR, PTR, PTR, PTR, PTR, i64), i32),
    "bl_start": ((PTR,), i32),
    "bl_stage_payload": ((PTR, PTR, i32, i32), i32),
    "bl_post": ((PTR,), i32),
    "bl_collect": ((PTR, PTR, i32, PTR), i32),
    "bl_reply_slot": ((PTR, PTR, PTR), i32),
    "bl_last_rtt_ns": ((PTR,), i64),
    "bl_stop": ((PTR,), i32),
    "bl_destroy": ((PTR,), i32),
    "bl_status_record": ((i32,), i32),
    "bl_status_take": ((), i32),
}

#: ops that are one runtime call on the session, whose status is recorded
SIMPLE_CALLS: dict[type[Operation], tuple[str, ...]] = {
    t.ConnectOp: ("bl_connect",),
    t.ExchangeKeysOp: ("bl_alloc_memory", "bl_exchange_keys"),  # memory is provisioned at exchange_keys
    t.EstablishChannelOp: ("bl_establish_channel",),
    t.StartOp: ("bl_start",),
    t.PostOp: ("bl_post",),
    t.StopOp: ("bl_stop",),
    t.DestroyOp: ("bl_destroy",),
}


class _Lowering:
    """Builds the replacement ops; owns the module's runtime declarations and globals."""

    def __init__(self, module: ModuleOp) -> None:
        self.module = module
        self.symbols = {op.sym_name.data for op in module.ops if isinstance(op, llvm.FuncOp | llvm.GlobalOp)}
        self.new_top: list[Operation] = []

    # -- module-level symbols -------------------------------------------------------------

    def declare(self, name: str) -> None:
        if name in self.symbols:
            return
        inputs, output = RUNTIME[name]
        self.new_top.append(llvm.FuncOp(name, llvm.LLVMFunctionType(inputs, output), linkage=llvm.LinkageAttr("external")))
        self.symbols.add(name)

    def global_bytes(self, data: bytes, hint: str) -> str:
        name = f"__backline_{hint}_{hashlib.sha1(data).hexdigest()[:12]}"
        if name not in self.symbols:
            array = llvm.LLVMArrayType(IntAttr(len(data)), i8)
            value = DenseIntOrFPElementsAttr.from_list(TensorType(i8, [len(data)]), [b - 256 if b > 127 else b for b in data])
            self.new_top.append(llvm.GlobalOp(array, name, "private", constant=True, value=value))
            self.symbols.add(name)
        return name

    # -- op builders ----------------------------------------------------------------------

    def call(self, ops: list[Operation], name: str, *args: SSAValue) -> SSAValue:
        self.declare(name)
        output = RUNTIME[name][1]
        op = llvm.CallOp(name, *args, return_type=output)
        ops.append(op)
        return op.results[0]

    def recorded(self, ops: list[Operation], name: str, *args: SSAValue) -> SSAValue:
        return self.call(ops, "bl_status_record", self.call(ops, name, *args))

    def const(self, ops: list[Operation], value: int, typ: Attribute) -> SSAValue:
        op = llvm.ConstantOp(IntegerAttr(value, typ), typ)
        ops.append(op)
        return op.result

    def cstring(self, ops: list[Operation], text: str) -> SSAValue:
        name = self.global_bytes(text.encode() + b"\0", "str")
        op = llvm.AddressOfOp(name, PTR)
        ops.append(op)
        return op.result

    def slot(self, ops: list[Operation], typ: Attribute) -> SSAValue:
        """A stack slot, allocated in the function's entry block: an alloca inside a loop
        would grow the stack on every round."""
        func = self.current.parent_op()
        while func is not None and not isinstance(func, llvm.FuncOp):
            func = func.parent_op()
        if func is None:
            raise PassFailedException(f"convert-transport-to-llvm: {self.current.name} is not inside an llvm.func")
        entry = func.body.blocks.first
        size = llvm.ConstantOp(IntegerAttr(1, i64), i64)
        alloca = llvm.AllocaOp(size, typ, alignment=8)
        if entry.first_op is None:
            entry.add_ops([size, alloca])
        else:
            PatternRewriter(entry.first_op).insert([size, alloca], InsertPoint.before(entry.first_op))
        return alloca.res

    def load(self, ops: list[Operation], ptr: SSAValue, typ: Attribute) -> SSAValue:
        op = llvm.LoadOp(ptr, typ)
        ops.append(op)
        return op.dereferenced_value

    # -- per op ----------------------------------------------------------------------------

    def lower(self, op: Operation) -> tuple[list[Operation], list[SSAValue]]:
        self.current = op
        ops: list[Operation] = []
        if type(op) in SIMPLE_CALLS:
            for name in SIMPLE_CALLS[type(op)]:
                self.recorded(ops, name, op.operands[0])
            return ops, []
        match op:
            case t.CreateOp():
                role = ROLE_CODES[op.session.type.role_name]
                out = self.slot(ops, PTR)
                self.recorded(ops, "bl_session_create", self.cstring(ops, op.backend_lib.data),
                              self.const(ops, role, i32), self.cstring(ops, op.key.data),
                              self.cstring(ops, op.config.data), out)
                return ops, [self.load(ops, out, PTR)]
            case t.GetSessionOp():
                role = ROLE_CODES[op.session.type.role_name]
                return ops, [self.call(ops, "bl_session_get", self.const(ops, role, i32), self.cstring(ops, op.key.data))]
            case t.ConnectAsyncOp():
                return ops, [self.recorded(ops, "bl_connect", op.session)]
            case t.ExchangeKeysAsyncOp():
                self.recorded(ops, "bl_alloc_memory", op.session)
                return ops, [self.recorded(ops, "bl_exchange_keys", op.session)]
            case t.AwaitOp():
                self.call(ops, "bl_status_record", op.token)
                return ops, []
            case t.SetMessageSizesOp():
                self.recorded(ops, "bl_set_message_sizes", op.session,
                              self.const(ops, op.in_bytes.value.data, i32), self.const(ops, op.out_bytes.value.data, i32))
                return ops, []
            case t.SetCoprocessorFnOp():
                return self._set_fn(op, ops), []
            case t.StagePayloadOp():
                self.recorded(ops, "bl_stage_payload", op.session, op.payload, op.length,
                              self.const(ops, op.decoder_id.value.data, i32))
                return ops, []
            case t.CollectOp():
                length = self.slot(ops, i32)
                self.recorded(ops, "bl_collect", op.session, op.buffer, op.capacity, length)
                return ops, [self.load(ops, length, i32)]
            case t.CollectValueOp():
                buf = self.slot(ops, i64)
                ops.append(llvm.StoreOp(self.const(ops, 0, i64), buf))
                self.recorded(ops, "bl_collect", op.session, buf, self.const(ops, 8, i32), self.slot(ops, i32))
                return ops, [self.load(ops, buf, i64)]
            case t.ReplySlotOp():
                data, length = self.slot(ops, PTR), self.slot(ops, i32)
                self.recorded(ops, "bl_reply_slot", op.session, data, length)
                return ops, [self.load(ops, data, PTR), self.load(ops, length, i32)]
            case t.LastRttNsOp():
                return ops, [self.call(ops, "bl_last_rtt_ns", op.session)]
            case t.TakeStatusOp():
                return ops, [self.call(ops, "bl_status_take")]
        raise PassFailedException(f"convert-transport-to-llvm: no lowering for {op.name}")

    def _set_fn(self, op: t.SetCoprocessorFnOp, ops: list[Operation]) -> list[Operation]:
        def optional(attr: StringAttr | None) -> SSAValue:
            if attr is None or not attr.data:
                null = llvm.IntToPtrOp(self.const(ops, 0, i64))  # xDSL's backend has no llvm.mlir.zero
                ops.append(null)
                return null.output
            return self.cstring(ops, attr.data)

        context = bytes.fromhex(op.context.data) if getattr(op, "context", None) is not None else b""
        if context:
            addr = llvm.AddressOfOp(self.global_bytes(context, "ctx"), PTR)
            ops.append(addr)
            params = addr.result
        else:
            params = optional(None)
        self.recorded(ops, "bl_set_coprocessor_fn_by_name", op.session, self.const(ops, op.decoder_id.value.data, i32),
                      optional(op.library), self.cstring(ops, op.symbol.data), optional(op.init_symbol),
                      optional(op.fini_symbol), params, self.const(ops, len(context), i64))
        return ops


@dataclass(frozen=True)
class ConvertTransportToLLVM(ModulePass):
    """Lower the transport dialect to llvm.call into libbackline (see module docstring)."""

    name = "convert-transport-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lowering = _Lowering(op)
        targets = [o for o in op.walk() if o.dialect_name() == "transport"]
        for old in targets:
            new_ops, new_results = lowering.lower(old)
            rewriter = PatternRewriter(old)
            rewriter.replace(old, new_ops, new_results, safe_erase=False)
        if lowering.new_top:
            body = op.body.block
            first = body.first_op
            if first is None:
                body.add_ops(lowering.new_top)
            else:
                PatternRewriter(first).insert(lowering.new_top, InsertPoint.before(first))
