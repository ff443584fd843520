"""``convert-executor-to-llvm``: executor ops become calls into the executor runtime's C ABI.

The ABI is the core's ``backline/executor.h`` (ABI 2; libbackline's executor client
implements it), and the functions' types are read from it through cffi
(``backline_core._native``, :func:`runtime_functions`), like the transport ABI: nothing
here restates a C signature. Each op becomes an ``llvm.call``, built, like the
declarations, string globals and stack slots below, by
:class:`~.llvm_lowering.LLVMLowering`, which ``convert-transport-to-llvm`` shares::

    executor.open(addr)                     -> %s = bl_executor_open(addr) : ptr
    executor.send_binary %s(obj)            -> bl_executor_send_binary(%s, obj)
    executor.launch %s(sym, obj)(args)      -> bl_executor_launch(%s, sym, obj, sig, argv, nargs, resv, nres)
    executor.launch_async %s(sym, obj)      -> bl_executor_launch_async(%s, sym, obj, &token)
    executor.await %s, %t                   -> bl_executor_await(%s, %t)
    executor.call %s(sym, lib)(args)        -> bl_executor_call(%s, sym, lib, sig, argv, nargs, num_input_args,
                                                                resv, nres)
    executor.close %s                       -> bl_executor_close(%s)

* Every ``int32`` status a runtime call returns goes through ``bl_status_record`` (core,
  ``backline.h``), which keeps the calling thread's first failure; the compiled program hands
  it back with ``bl_status_take()`` at its end. ``bl_executor_open`` returns a pointer (NULL on
  failure, after recording the failure itself).
* ``!executor.session`` becomes ``!llvm.ptr`` and ``!executor.token`` becomes ``i64``, wherever
  they appear (op results, block arguments, function signatures).
* Strings (address, paths, symbols, signatures) become ``internal constant``
  ``llvm.mlir.global``s named ``__bl_str_<n>`` (NUL-terminated, one per distinct string,
  names chosen not to clash) read through ``llvm.mlir.addressof``.
* A session stored to memory (``dispatch-executor-targets`` keeps the program session in an
  ``i64`` module global) is stored as an ``i64`` (``llvm.ptrtoint``) and read back through
  ``llvm.inttoptr``.
* Operands and results are marshalled through stack slots: one ``llvm.alloca`` per value
  and an ``llvm.alloca N x !llvm.ptr`` of the slot addresses (``argv`` / ``resv``), all allocated
  and wired up once in the function's entry block; at the call site the operands are stored
  into their slots, and after the call the results are loaded from theirs. An empty list is
  passed as a null pointer with a count of 0.
* ``sig`` is the kernel's LLVM IR function type as text, e.g. ``"i64 (i64, ptr)"``
  (``"void ()"`` without results; several results are a literal struct return,
  ``"{i64, i32} (i64)"``): the runtime needs it to call the symbol with the values.
* A ``!llvm.ptr`` operand is a buffer: its value, stored in its slot like any other, is the
  address of a ``bl_executor_buffer {ptr data; i64 bytes}`` the host filled in; the runtime
  ships the bytes and copies them back after the call (ABI 2).
* Runtime functions are declared once (only those used). An existing top-level function of
  the same name must have the same type (a definition is allowed: e.g. a mock runtime).

Finally the pass folds away the target modules that ``cross-compile-targets`` left, so the
result is a flat module of ``llvm.func`` / ``llvm.mlir.global`` that
:func:`backline_compiler.codegen.to_llvm_ir` accepts:

* a remote target module (one with an ``address``) is erased: its object reaches the
  executor through ``executor.send_binary``. A host ``llvm.call`` to one of its functions
  means ``dispatch-executor-targets`` did not run, and is an error;
* a local target module is erased after its function declarations are hoisted to the top
  level (unless the host declares them already, with the same type) and its object file is
  appended to the top module's ``backline.link_objects`` array: whoever links or JITs the
  program has to add those objects.

A target module without ``backline.object_file`` is an error (run ``cross-compile-targets``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir
from xdsl.backend.llvm.convert_type import convert_type
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import LLVMTranslationException, PassFailedException

from backline_core import _native

from ..dialects import executor
from .cross_compile_targets import Target, target_modules
from .dispatch_executor_targets import flat_callee
from .llvm_lowering import PTR, STATUS_RECORD, LLVMLowering, abi_table

LINK_OBJECTS_ATTR = "backline.link_objects"
#: where the ABI is declared, as the errors name it
ABI = "the executor runtime ABI (backline/executor.h)"

#: the runtime functions the lowering calls (executor.h, and backline.h's bl_status_record)
RUNTIME_NAMES = ("bl_executor_open", "bl_executor_send_binary", "bl_executor_launch", "bl_executor_launch_async",
                 "bl_executor_await", "bl_executor_call", "bl_executor_close", STATUS_RECORD)


@functools.cache
def runtime_functions() -> dict[str, tuple[tuple[Attribute, ...], Attribute]]:
    """name -> (parameter types, result type) of :data:`RUNTIME_NAMES`, from the core's headers.

    Read when a module has executor ops to lower, so a core built without the executor
    client fails only there, saying so."""
    missing = [name for name in RUNTIME_NAMES if not hasattr(_native.lib, name)]
    if missing:
        raise PassFailedException(
            f"{ConvertExecutorToLLVM.name}: the core's C binding (backline_core._native) has no "
            f"{', '.join(missing)}: it was built without backline/executor.h; rebuild the core "
            "(python setup.py build_ext --inplace in the repository root)")
    return abi_table(*RUNTIME_NAMES)

_EXECUTOR_TYPES: dict[type[Attribute], Attribute] = {executor.SessionType: PTR, executor.TokenType: i64}


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"{ConvertExecutorToLLVM.name}: {message}")


def llvm_signature(inputs: Sequence[Attribute], outputs: Sequence[Attribute]) -> str:
    """The LLVM IR text of the kernel type ``inputs -> outputs`` (e.g. ``"i64 (i64, ptr)"``)."""
    args = [convert_type(t) for t in inputs]
    if not outputs:
        ret: ir.Type = ir.VoidType()
    elif len(outputs) == 1:
        ret = convert_type(outputs[0])
    else:
        ret = ir.LiteralStructType([convert_type(t) for t in outputs])
    return str(ir.FunctionType(ret, args))


def _convert_executor_type(t: Attribute) -> Attribute:
    return _EXECUTOR_TYPES.get(type(t), t)


class _Lowering:
    """The executor ops' lowerings, on top of the shared :class:`LLVMLowering`."""

    def __init__(self, module: ModuleOp) -> None:
        self.lo = LLVMLowering(module, runtime_functions(), pass_name=ConvertExecutorToLLVM.name, abi=ABI)

    def slots(self, anchor: Operation, types: Sequence[Attribute], what: str) -> tuple[list[SSAValue], SSAValue | None]:
        """Entry-block stack slots for ``types`` and an array of their addresses (None if empty)."""
        if not types:
            return [], None
        for i, t in enumerate(types):
            try:
                if isinstance(convert_type(t), ir.VoidType):
                    raise LLVMTranslationException("void")
            except LLVMTranslationException:
                raise _fail(f"'{anchor.name}' {what} #{i} has type {t}, which has no LLVM lowering: lower it to "
                            "the llvm dialect first (the executor ABI passes integers, floats, arrays and literal "
                            "structs by value, and !llvm.ptr buffers)") from None
        slots = [self.lo.entry_slot(anchor, t) for t in types]
        array = self.lo.entry_slot(anchor, PTR, count=len(types))
        array.name_hint = "argv" if what == "operand" else "resv"
        wiring: list[Operation] = []
        for i, slot in enumerate(slots):
            # ptr-typed GEP with one index: xDSL's LLVM backend (llvmlite) mistypes array-typed GEPs
            gep = llvm.GEPOp(array, [i], PTR)
            wiring += [gep, llvm.StoreOp(slot, gep)]
        self.lo.at_entry(anchor, wiring)
        return slots, array

    def marshal(self, op: Operation, inputs: Sequence[SSAValue], outputs: Sequence[Attribute]
                ) -> tuple[SSAValue, SSAValue, list[SSAValue], SSAValue]:
        """(argv, resv, result slots, signature) for a launch-like op; stores the operands."""
        in_slots, argv = self.slots(op, [v.type for v in inputs], "operand")
        out_slots, resv = self.slots(op, list(outputs), "result")
        for value, slot in zip(inputs, in_slots, strict=True):
            self.lo.store(value, slot, op)
        sig = self.lo.cstring_ptr(llvm_signature([v.type for v in inputs], outputs), op)
        return (argv if argv is not None else self.lo.null_ptr(op), resv if resv is not None else self.lo.null_ptr(op),
                out_slots, sig)

    def load_results(self, op: Operation, slots: Sequence[SSAValue]) -> list[SSAValue]:
        return [self.lo.load(slot, result.type, op) for slot, result in zip(slots, op.results, strict=True)]

    # -- the ops ------------------------------------------------------------------------

    def lower(self, op: Operation) -> None:
        lo = self.lo
        results: list[SSAValue] = []
        match op:
            case executor.OpenOp():
                session = lo.call("bl_executor_open", [lo.cstring_ptr(op.address.data, op)], op)
                session.name_hint = "session"
                results = [session]
            case executor.SendBinaryOp():
                lo.recorded("bl_executor_send_binary", [op.session, lo.cstring_ptr(op.object_file.data, op)], op)
            case executor.LaunchOp():
                outputs = [r.type for r in op.outputs]
                argv, resv, slots, sig = self.marshal(op, list(op.inputs), outputs)
                lo.recorded("bl_executor_launch", [
                    op.session, lo.cstring_ptr(op.symbol.data, op), lo.cstring_ptr(op.object_file.data, op), sig,
                    argv, lo.constant(len(op.inputs), i64, op), resv, lo.constant(len(outputs), i64, op)], op)
                results = self.load_results(op, slots)
            case executor.LaunchAsyncOp():
                slot = lo.entry_slot(op, i64)
                slot.name_hint = "token_slot"
                lo.store(lo.constant(0, i64, op), slot, op)
                lo.recorded("bl_executor_launch_async", [
                    op.session, lo.cstring_ptr(op.symbol.data, op), lo.cstring_ptr(op.object_file.data, op), slot], op)
                token = lo.load(slot, i64, op)
                token.name_hint = "token"
                results = [token]
            case executor.AwaitOp():
                lo.recorded("bl_executor_await", [op.session, op.token], op)
            case executor.CallOp():
                outputs = [r.type for r in op.outputs]
                argv, resv, slots, sig = self.marshal(op, list(op.args), outputs)
                lo.recorded("bl_executor_call", [
                    op.session, lo.cstring_ptr(op.symbol.data, op), lo.cstring_ptr(op.library.data, op), sig,
                    argv, lo.constant(len(op.args), i64, op),
                    lo.constant(op.num_input_args.value.data, i64, op),
                    resv, lo.constant(len(outputs), i64, op)], op)
                results = self.load_results(op, slots)
            case executor.CloseOp():
                lo.recorded("bl_executor_close", [op.session], op)
            case _:
                raise _fail(f"no lowering for '{op.name}'")
        lo.replace(op, results)


def _convert_types(module: ModuleOp) -> None:
    """``!executor.session`` -> ``!llvm.ptr``, ``!executor.token`` -> ``i64`` on what is left."""
    for op in list(module.walk()):
        for region in op.regions:
            for block in region.blocks:
                for arg in list(block.args):
                    if type(arg.type) in _EXECUTOR_TYPES:
                        Rewriter.replace_value_with_new_type(arg, _convert_executor_type(arg.type))
        for result in list(op.results):
            if type(result.type) in _EXECUTOR_TYPES:
                Rewriter.replace_value_with_new_type(result, _convert_executor_type(result.type))
        if isinstance(op, llvm.FuncOp):
            ft = op.function_type
            inputs = [_convert_executor_type(t) for t in ft.inputs.data]
            output = _convert_executor_type(ft.output)
            if inputs != list(ft.inputs.data) or output != ft.output:
                op.function_type = llvm.LLVMFunctionType(inputs, output, ft.is_variadic)
        elif isinstance(op, func.FuncOp):
            ft = op.function_type
            inputs = [_convert_executor_type(t) for t in ft.inputs.data]
            outputs = [_convert_executor_type(t) for t in ft.outputs.data]
            if inputs != list(ft.inputs.data) or outputs != list(ft.outputs.data):
                op.function_type = FunctionType.from_lists(inputs, outputs)


def _check_target_modules(module: ModuleOp) -> list[Target]:
    """The target modules, each cross-compiled, none of whose remote functions is called directly."""
    targets = target_modules(ConvertExecutorToLLVM.name, module)
    for target in targets:
        if target.object_file is None:
            raise _fail(f"target '{target.name}' has no backline.object_file: run cross-compile-targets first")
    remote = {op.sym_name.data: t for t in targets if t.remote for op in t.module.ops if isinstance(op, llvm.FuncOp)}
    for top in module.ops:
        if isinstance(top, ModuleOp):
            continue
        for inner in top.walk():
            if isinstance(inner, llvm.CallOp) and (callee := flat_callee(inner)) in remote:
                raise _fail(f"@{callee} runs on the executor of target '{remote[callee].name}' but is still "
                            "called directly: run dispatch-executor-targets first")
    top_funcs = {op.sym_name.data: op for op in module.ops if isinstance(op, llvm.FuncOp)}
    for target in targets:
        if target.remote:
            continue
        for decl in target.module.ops:
            if not isinstance(decl, llvm.FuncOp) or (mine := top_funcs.get(decl.sym_name.data)) is None:
                continue
            if mine.body.blocks:
                raise _fail(f"@{decl.sym_name.data} is defined in the host module and by target '{target.name}'")
            if mine.function_type != decl.function_type:
                raise _fail(f"the host declares @{decl.sym_name.data} as {mine.function_type} but target "
                            f"'{target.name}' defines it as {decl.function_type}")
    return targets


def _fold_target_modules(module: ModuleOp, targets: list[Target]) -> None:
    if not targets:
        return
    top_funcs = {op.sym_name.data: op for op in module.ops if isinstance(op, llvm.FuncOp)}
    links = module.attributes.get(LINK_OBJECTS_ATTR)
    objects = [a.data for a in links.data if isinstance(a, StringAttr)] if isinstance(links, ArrayAttr) else []
    hoisted: list[Operation] = []
    for target in targets:
        if not target.remote:
            assert target.object_file is not None
            if target.object_file not in objects:
                objects.append(target.object_file)
            for decl in target.module.ops:
                if not isinstance(decl, llvm.FuncOp):
                    continue
                name = decl.sym_name.data
                if name not in top_funcs:  # else: a host declaration, checked to agree
                    copy = decl.clone()
                    hoisted.append(copy)
                    top_funcs[name] = copy
        module.body.block.erase_op(target.module)
    if hoisted:
        Rewriter.insert_op(hoisted, InsertPoint.at_start(module.body.block))
    if objects:
        module.attributes[LINK_OBJECTS_ATTR] = ArrayAttr([StringAttr(o) for o in objects])


@dataclass(frozen=True)
class ConvertExecutorToLLVM(ModulePass):
    """Lower the executor dialect to calls into the executor runtime; fold away target modules."""

    name = "convert-executor-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        targets = _check_target_modules(op)
        ops = [o for o in op.walk() if o.dialect_name() == "executor"]
        stores = [o for o in op.walk()
                  if isinstance(o, llvm.StoreOp) and isinstance(o.value.type, executor.SessionType)]
        loads = [o for o in op.walk()
                 if isinstance(o, llvm.LoadOp) and isinstance(o.dereferenced_value.type, executor.SessionType)]
        if ops:  # the ABI is read only when there is something to lower
            lowering = _Lowering(op)
            for o in ops:
                lowering.lower(o)
            lowering.lo.finish()
        _convert_types(op)
        _sessions_in_memory_as_integers(stores, loads)
        _fold_target_modules(op, targets)


def _sessions_in_memory_as_integers(stores: list[llvm.StoreOp], loads: list[llvm.LoadOp]) -> None:
    """A session stored to memory goes there as an ``i64`` (``ptrtoint``/``inttoptr``):
    ``dispatch-executor-targets`` keeps program sessions in ``i64`` module globals, because
    xDSL's LLVM backend can give a pointer global no null initialiser and types a global's
    address by the global's type."""
    for store in stores:
        as_int = llvm.PtrToIntOp(store.value, i64)
        Rewriter.insert_op(as_int, InsertPoint.before(store))
        store.operands[0] = as_int.output
    for load in loads:
        word = llvm.LoadOp(load.ptr, i64)
        as_ptr = llvm.IntToPtrOp(word.dereferenced_value)
        Rewriter.insert_op([word, as_ptr], InsertPoint.before(load))
        if load.dereferenced_value.name_hint:
            as_ptr.output.name_hint = load.dereferenced_value.name_hint
        load.dereferenced_value.replace_all_uses_with(as_ptr.output)
        Rewriter.erase_op(load)
