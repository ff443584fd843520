"""``convert-executor-to-llvm``: executor ops become calls into the executor runtime's C ABI.

The ABI is declared and documented in ``backline_compiler/runtime/executor.h`` (the runtime
that implements it is not written yet). Each op becomes an ``llvm.call``::

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
  ``llvm.mlir.global``s named ``__bl_exec_str_<n>`` (NUL-terminated, one per distinct string,
  names chosen not to clash) read through ``llvm.mlir.addressof``.
* Operands and results are marshalled through stack slots: one ``llvm.alloca`` per value
  and an ``llvm.alloca N x !llvm.ptr`` of the slot addresses (``argv`` / ``resv``), all allocated
  and wired up once in the function's entry block; at the call site the operands are stored
  into their slots, and after the call the results are loaded from theirs. An empty list is
  passed as a null pointer with a count of 0.
* ``sig`` is the kernel's LLVM IR function type as text, e.g. ``"i64 (i64, ptr)"``
  (``"void ()"`` without results; several results are a literal struct return,
  ``"{i64, i32} (i64)"``): the runtime needs it to call the symbol with the values.
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

from collections.abc import Sequence
from dataclasses import dataclass, field

from llvmlite import ir
from xdsl.backend.llvm.convert_type import convert_type
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import LLVMTranslationException, PassFailedException

from ..dialects import executor
from .cross_compile_targets import Target, target_modules
from .dispatch_executor_targets import flat_callee

PTR = llvm.LLVMPointerType()
VOID = llvm.LLVMVoidType()
LINK_OBJECTS_ATTR = "backline.link_objects"
STRING_PREFIX = "__bl_exec_str_"

#: name -> (parameter types, result type) of the runtime functions the lowering calls
RUNTIME_FUNCTIONS: dict[str, tuple[tuple[Attribute, ...], Attribute]] = {
    "bl_executor_open": ((PTR,), PTR),
    "bl_executor_send_binary": ((PTR, PTR), i32),
    "bl_executor_launch": ((PTR, PTR, PTR, PTR, PTR, i64, PTR, i64), i32),
    "bl_executor_launch_async": ((PTR, PTR, PTR, PTR), i32),
    "bl_executor_await": ((PTR, i64), i32),
    "bl_executor_call": ((PTR, PTR, PTR, PTR, PTR, i64, i64, PTR, i64), i32),
    "bl_executor_close": ((PTR,), i32),
    "bl_status_record": ((i32,), i32),
}

_FUNCS = (llvm.FuncOp, func.FuncOp)
_EXECUTOR_TYPES: dict[type[Attribute], Attribute] = {executor.SessionType: PTR, executor.TokenType: i64}


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"{ConvertExecutorToLLVM.name}: {message}")


def _function_type(name: str) -> llvm.LLVMFunctionType:
    inputs, output = RUNTIME_FUNCTIONS[name]
    return llvm.LLVMFunctionType(list(inputs), output)


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


@dataclass
class _Lowering:
    module: ModuleOp
    symbols: set[str]
    strings: dict[str, str] = field(default_factory=dict)
    new_globals: list[llvm.GlobalOp] = field(default_factory=list)
    used_runtime: list[str] = field(default_factory=list)
    entry_cursor: dict[Operation, Operation] = field(default_factory=dict)
    ones: dict[Operation, SSAValue] = field(default_factory=dict)

    # -- helpers ------------------------------------------------------------------------

    def string(self, text: str, before: Operation) -> SSAValue:
        """The address of a NUL-terminated constant holding ``text``."""
        name = self.strings.get(text)
        if name is None:
            n = len(self.strings)
            while f"{STRING_PREFIX}{n}" in self.symbols:
                n += 1
            name = f"{STRING_PREFIX}{n}"
            self.symbols.add(name)
            self.strings[text] = name
            data = text + "\0"
            self.new_globals.append(llvm.GlobalOp(
                llvm.LLVMArrayType(len(data.encode("utf-8")), i8), name, "internal",
                constant=True, value=StringAttr(data)))
        addr = llvm.AddressOfOp(name, PTR)
        _insert_before(addr, before)
        return addr.result

    def call(self, name: str, args: Sequence[SSAValue], before: Operation) -> llvm.CallOp:
        if name not in self.used_runtime:
            self.used_runtime.append(name)
        _inputs, output = RUNTIME_FUNCTIONS[name]
        call = llvm.CallOp(name, *args, return_type=None if output == VOID else output)
        _insert_before(call, before)
        return call

    def status(self, name: str, args: Sequence[SSAValue], before: Operation) -> None:
        rc = self.call(name, args, before)
        assert rc.returned is not None
        rc.returned.name_hint = "rc"
        self.call("bl_status_record", [rc.returned], before)

    def constant(self, value: int, type_: Attribute, before: Operation) -> SSAValue:
        const = llvm.ConstantOp(IntegerAttr(value, type_), type_)
        _insert_before(const, before)
        return const.result

    def _function_of(self, op: Operation) -> Operation | None:
        parent = op.parent_op()
        while parent is not None and not isinstance(parent, _FUNCS):
            parent = parent.parent_op()
        return parent

    def entry(self, anchor: Operation, ops: Sequence[Operation]) -> None:
        """Insert ``ops`` in the entry block of ``anchor``'s function, after earlier entry ops."""
        fn = self._function_of(anchor)
        if fn is None:  # not inside a function: put them right before the op
            for new in ops:
                _insert_before(new, anchor)
            return
        block: Block = fn.regions[0].blocks[0]
        cursor = self.entry_cursor.get(fn)
        if cursor is None:
            if block.first_op is None:
                block.add_ops(ops)
            else:
                block.insert_ops_before(list(ops), block.first_op)
        else:
            block.insert_ops_after(list(ops), cursor)
        self.entry_cursor[fn] = ops[-1]

    def one(self, anchor: Operation) -> SSAValue:
        fn = self._function_of(anchor)
        key = fn if fn is not None else anchor
        if key not in self.ones:
            const = llvm.ConstantOp(IntegerAttr(1, i64), i64)
            const.result.name_hint = "one"
            self.entry(anchor, [const])
            self.ones[key] = const.result
        return self.ones[key]

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
                            "the llvm dialect first (the executor ABI passes integers, floats, !llvm.ptr, "
                            "vectors, arrays and structs by value)") from None
        one = self.one(anchor)
        allocas = [_alloca(one, t) for t in types]
        count = llvm.ConstantOp(IntegerAttr(len(types), i64), i64)
        array = _alloca(count, PTR)
        array.res.name_hint = "argv" if what == "operand" else "resv"
        wiring: list[Operation] = []
        for i, slot in enumerate(allocas):
            # ptr-typed GEP with one index: xDSL's LLVM backend (llvmlite) mistypes array-typed GEPs
            gep = llvm.GEPOp(array, [i], PTR)
            wiring += [gep, llvm.StoreOp(slot, gep)]
        self.entry(anchor, [*allocas, count, array, *wiring])
        return [a.res for a in allocas], array.res

    def null(self, before: Operation) -> SSAValue:
        zero = llvm.ZeroOp.build(result_types=[PTR])
        _insert_before(zero, before)
        return zero.res

    def marshal(self, op: Operation, inputs: Sequence[SSAValue], outputs: Sequence[Attribute]
                ) -> tuple[SSAValue, SSAValue, list[SSAValue], SSAValue]:
        """(argv, resv, result slots, signature) for a launch-like op; stores the operands."""
        in_slots, argv = self.slots(op, [v.type for v in inputs], "operand")
        out_slots, resv = self.slots(op, list(outputs), "result")
        for value, slot in zip(inputs, in_slots, strict=True):
            _insert_before(llvm.StoreOp(value, slot), op)
        sig = self.string(llvm_signature([v.type for v in inputs], outputs), op)
        return (argv if argv is not None else self.null(op), resv if resv is not None else self.null(op),
                out_slots, sig)

    def load_results(self, op: Operation, slots: Sequence[SSAValue], results: Sequence[SSAValue]) -> None:
        for slot, result in zip(slots, results, strict=True):
            load = llvm.LoadOp(slot, result.type)
            _insert_before(load, op)
            if result.name_hint:
                load.dereferenced_value.name_hint = result.name_hint
            result.replace_all_uses_with(load.dereferenced_value)

    # -- the ops ------------------------------------------------------------------------

    def lower(self, op: Operation) -> None:
        match op:
            case executor.OpenOp():
                session = self.call("bl_executor_open", [self.string(op.address.data, op)], op)
                assert session.returned is not None
                session.returned.name_hint = op.session.name_hint or "session"
                op.session.replace_all_uses_with(session.returned)
            case executor.SendBinaryOp():
                self.status("bl_executor_send_binary", [op.session, self.string(op.object_file.data, op)], op)
            case executor.LaunchOp():
                outputs = [r.type for r in op.outputs]
                argv, resv, slots, sig = self.marshal(op, list(op.inputs), outputs)
                self.status("bl_executor_launch", [
                    op.session, self.string(op.symbol.data, op), self.string(op.object_file.data, op), sig,
                    argv, self.constant(len(op.inputs), i64, op), resv, self.constant(len(outputs), i64, op)], op)
                self.load_results(op, slots, list(op.outputs))
            case executor.LaunchAsyncOp():
                slot = _alloca(self.one(op), i64)
                slot.res.name_hint = "token_slot"
                self.entry(op, [slot])
                _insert_before(llvm.StoreOp(self.constant(0, i64, op), slot), op)
                self.status("bl_executor_launch_async", [
                    op.session, self.string(op.symbol.data, op), self.string(op.object_file.data, op), slot.res], op)
                load = llvm.LoadOp(slot, i64)
                load.dereferenced_value.name_hint = op.token.name_hint or "token"
                _insert_before(load, op)
                op.token.replace_all_uses_with(load.dereferenced_value)
            case executor.AwaitOp():
                self.status("bl_executor_await", [op.session, op.token], op)
            case executor.CallOp():
                outputs = [r.type for r in op.outputs]
                argv, resv, slots, sig = self.marshal(op, list(op.args), outputs)
                self.status("bl_executor_call", [
                    op.session, self.string(op.symbol.data, op), self.string(op.library.data, op), sig,
                    argv, self.constant(len(op.args), i64, op),
                    self.constant(op.num_input_args.value.data, i64, op),
                    resv, self.constant(len(outputs), i64, op)], op)
                self.load_results(op, slots, list(op.outputs))
            case executor.CloseOp():
                self.status("bl_executor_close", [op.session], op)
            case _:
                raise _fail(f"no lowering for '{op.name}'")
        block = op.parent_block()
        assert block is not None
        block.erase_op(op)


def _insert_before(new: Operation, existing: Operation) -> None:
    block = existing.parent_block()
    assert block is not None
    block.insert_op_before(new, existing)


def _alloca(one: SSAValue, elem_type: Attribute) -> llvm.AllocaOp:
    alloca = llvm.AllocaOp(one, elem_type)
    del alloca.properties["alignment"]  # let LLVM pick the type's ABI alignment
    return alloca


def _declare_runtime(module: ModuleOp, names: Sequence[str]) -> None:
    existing = {op.sym_name.data: op for op in module.ops if isinstance(op, llvm.FuncOp)}
    decls: list[Operation] = []
    for name in names:
        if name not in existing:  # else: checked by _check_runtime_names
            decls.append(llvm.FuncOp(name, _function_type(name), linkage=llvm.LinkageAttr("external")))
    _prepend(module, decls)


def _prepend(module: ModuleOp, ops: Sequence[Operation]) -> None:
    if not ops:
        return
    block = module.body.block
    if block.first_op is None:
        block.add_ops(ops)
    else:
        block.insert_ops_before(list(ops), block.first_op)


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


def _check_runtime_names(module: ModuleOp) -> None:
    """A top-level function named like a runtime function must have the ABI's type."""
    for op in module.ops:
        if (isinstance(op, llvm.FuncOp) and (name := op.sym_name.data) in RUNTIME_FUNCTIONS
                and op.function_type != (want := _function_type(name))):
            raise _fail(f"@{name} is declared with type {op.function_type}, but the executor runtime ABI "
                            f"(runtime/executor.h) gives it {want}")


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
    _prepend(module, hoisted)
    if objects:
        module.attributes[LINK_OBJECTS_ATTR] = ArrayAttr([StringAttr(o) for o in objects])


@dataclass(frozen=True)
class ConvertExecutorToLLVM(ModulePass):
    """Lower the executor dialect to calls into the executor runtime; fold away target modules."""

    name = "convert-executor-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        symbols = {name.data for o in op.ops if isinstance(name := getattr(o, "sym_name", None), StringAttr)}
        targets = _check_target_modules(op)
        executor_ops = [o for o in op.walk() if o.dialect_name() == "executor"]
        if executor_ops:
            _check_runtime_names(op)
        lowering = _Lowering(op, symbols)
        for o in executor_ops:
            lowering.lower(o)
        _convert_types(op)
        if lowering.used_runtime:
            _declare_runtime(op, lowering.used_runtime)
        _prepend(op, lowering.new_globals)
        _fold_target_modules(op, targets)
