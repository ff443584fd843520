"""What the ``convert-*-to-llvm`` passes share: building calls into a runtime's C ABI.

:class:`LLVMLowering` is given the module and the runtime's ABI table (function name ->
parameter types, result type) and owns what a lowering adds around the call sites:

* runtime functions, declared once each (external linkage) and only when used. A top-level
  function of that name already in the module must have the table's type (a definition is
  allowed, e.g. a mock runtime); anything else is an error;
* constant globals -- NUL-terminated C strings (``__bl_str_<n>``) and raw bytes
  (``__bl_bytes_<n>``) -- one per distinct content, ``internal``, named around the module's
  symbols. A matching one left by an earlier lowering is reused;
* stack slots, allocated in the entry block of the function (``llvm.func`` or ``func.func``)
  around the op being lowered, in allocation order, sized by one shared ``1 : i64`` per
  function: an alloca inside a loop would grow the stack on every round;
* every ``int32`` status passed through ``bl_status_record`` (core, ``backline.h``, so the
  table lists it), which keeps the calling thread's first failure
  (:meth:`LLVMLowering.recorded`).

Op builders insert right before the op being lowered (``before``); :meth:`replace` hands its
results over and erases it, and :meth:`finish` puts the globals and then the declarations,
each in first-use order, at the top of the module.

:func:`abi_table` reads the core's C signatures from its headers (through cffi), so no
lowering restates one: a pointer is ``!llvm.ptr``, an ``[u]intN_t`` ``iN``, an enum ``i32``,
``double`` ``f64``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from xdsl.dialects import func, llvm
from typing import Any

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
    f64,
    i8,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from backline_core._native import ffi, lib

PTR = llvm.LLVMPointerType()
STRING_PREFIX = "__bl_str_"
BYTES_PREFIX = "__bl_bytes_"
STATUS_RECORD = "bl_status_record"

#: runtime function -> (parameter types, result type)
RuntimeTable = Mapping[str, tuple[Sequence[Attribute], Attribute]]

_FLOATS = {"double": f64, "float": f32}


def llvm_type(ctype: Any) -> Attribute:
    """The LLVM type of a cffi ctype of the core's headers."""
    if ctype.kind in ("pointer", "array"):
        return PTR
    if ctype.kind == "enum":
        return IntegerType(8 * ffi.sizeof(ctype))
    if ctype.kind == "void":
        return llvm.LLVMVoidType()
    if ctype.kind == "primitive":
        if ctype.cname in _FLOATS:
            return _FLOATS[ctype.cname]
        if ctype.cname == "_Bool":
            return IntegerType(1)
        return IntegerType(8 * ffi.sizeof(ctype))
    raise TypeError(f"no LLVM type for the C type {ctype.cname}")


def c_signature(ctype: Any) -> tuple[tuple[Attribute, ...], Attribute]:
    """(parameter types, result type) of a cffi function ctype."""
    if ctype.kind != "function" or ctype.ellipsis:
        raise TypeError(f"{ctype.cname} is not a fixed-arity C function type")
    return tuple(llvm_type(a) for a in ctype.args), llvm_type(ctype.result)


def abi_table(*names: str) -> dict[str, tuple[tuple[Attribute, ...], Attribute]]:
    """Runtime function name -> its signature in the core's headers (``backline.h``, ``device.h``,
    ``executor.h``), as the core's cffi binding declares it."""
    return {name: c_signature(ffi.typeof(getattr(lib, name))) for name in names}


class LLVMLowering:
    """Builds runtime calls for one pass run over ``module`` (see the module docstring).

    ``pass_name`` prefixes the errors; ``abi`` names the runtime's ABI in them (e.g.
    ``"the executor runtime ABI (backline/executor.h)"``).
    """

    def __init__(self, module: ModuleOp, runtime: RuntimeTable, *, pass_name: str, abi: str) -> None:
        self.module = module
        self.runtime = runtime
        self.pass_name = pass_name
        self.abi = abi
        self.symbols: dict[str, Operation] = {
            name.data: op for op in module.ops if isinstance(name := getattr(op, "sym_name", None), StringAttr)}
        self.declared: set[str] = set()
        self.declarations: list[llvm.FuncOp] = []
        self.globals: list[llvm.GlobalOp] = []
        #: (global type, value) -> name, of the constant globals this lowering may reuse
        self.constants: dict[tuple[Attribute, Attribute], str] = {
            (op.global_type, op.value): op.sym_name.data for op in module.ops
            if isinstance(op, llvm.GlobalOp) and op.constant is not None and op.value is not None
            and op.sym_name.data.startswith((STRING_PREFIX, BYTES_PREFIX))}
        self.entry_cursor: dict[Operation, Operation] = {}
        self.ones: dict[Operation, SSAValue] = {}

    def fail(self, message: str) -> PassFailedException:
        return PassFailedException(f"{self.pass_name}: {message}")

    # -- module-level symbols -------------------------------------------------------------

    def function_type(self, name: str) -> llvm.LLVMFunctionType:
        inputs, output = self.runtime[name]
        return llvm.LLVMFunctionType(list(inputs), output)

    def declare(self, name: str) -> None:
        """Declare runtime function ``name`` once, or check the module's own has its type."""
        if name in self.declared:
            return
        want = self.function_type(name)
        existing = self.symbols.get(name)
        if existing is None:
            decl = llvm.FuncOp(name, want, linkage=llvm.LinkageAttr("external"))
            self.declarations.append(decl)
            self.symbols[name] = decl
        elif not isinstance(existing, llvm.FuncOp) or existing.function_type != want:
            found = (f"declared with type {existing.function_type}" if isinstance(existing, llvm.FuncOp | func.FuncOp)
                     else f"a {existing.name}")
            raise self.fail(f"@{name} is {found}, but {self.abi} gives it {want}")
        self.declared.add(name)

    def _constant_global(self, prefix: str, data: bytes) -> str:
        """An ``i8`` array global holding ``data``: a string attribute when ``data`` is ASCII (it
        reads in the IR), dense bytes otherwise (printed non-ASCII text parses back as a
        ``BytesAttr``, which xDSL's LLVM backend cannot convert)."""
        global_type = llvm.LLVMArrayType(len(data), i8)
        value: Attribute = (StringAttr(data.decode("ascii")) if data.isascii() else DenseIntOrFPElementsAttr.from_list(
            TensorType(i8, [len(data)]), [b - 256 if b > 127 else b for b in data]))
        name = self.constants.get((global_type, value))
        if name is None:
            n = 0
            while f"{prefix}{n}" in self.symbols:
                n += 1
            name = f"{prefix}{n}"
            op = llvm.GlobalOp(global_type, name, "internal", constant=True, value=value)
            self.globals.append(op)
            self.symbols[name] = op
            self.constants[(global_type, value)] = name
        return name

    def cstring(self, text: str) -> str:
        """The name of a constant global holding ``text``, UTF-8, NUL-terminated."""
        return self._constant_global(STRING_PREFIX, text.encode("utf-8") + b"\0")

    def bytes_global(self, data: bytes) -> str:
        """The name of a constant global holding ``data`` as is."""
        return self._constant_global(BYTES_PREFIX, data)

    def finish(self) -> None:
        """Put the new globals, then the new declarations, at the top of the module."""
        new: list[Operation] = [*self.globals, *self.declarations]
        self.globals, self.declarations = [], []
        if new:
            Rewriter.insert_op(new, InsertPoint.at_start(self.module.body.block))

    # -- op builders: each inserts right before ``before`` ---------------------------------

    def call(self, name: str, args: Sequence[SSAValue], before: Operation) -> SSAValue:
        """``llvm.call @name(args)`` of a runtime function, declared on first use."""
        self.declare(name)
        call = _insert(llvm.CallOp(name, *args, return_type=self.runtime[name][1]), before)
        return call.results[0]

    def recorded(self, name: str, args: Sequence[SSAValue], before: Operation) -> SSAValue:
        """Call ``name`` and pass its ``int32`` status through ``bl_status_record``."""
        rc = self.call(name, args, before)
        rc.name_hint = "rc"
        return self.call(STATUS_RECORD, [rc], before)

    def constant(self, value: int, type_: Attribute, before: Operation) -> SSAValue:
        return _insert(llvm.ConstantOp(IntegerAttr(value, type_), type_), before).result

    def address(self, global_name: str, before: Operation) -> SSAValue:
        return _insert(llvm.AddressOfOp(global_name, PTR), before).result

    def cstring_ptr(self, text: str, before: Operation) -> SSAValue:
        """The address of :meth:`cstring` ``(text)``."""
        return self.address(self.cstring(text), before)

    def null_ptr(self, before: Operation) -> SSAValue:
        """``llvm.mlir.zero : !llvm.ptr``, which xDSL's LLVM backend turns into ``ptr null``."""
        return _insert(llvm.ZeroOp.build(result_types=[PTR]), before).res

    def load(self, ptr: SSAValue, type_: Attribute, before: Operation) -> SSAValue:
        return _insert(llvm.LoadOp(ptr, type_), before).dereferenced_value

    def store(self, value: SSAValue, ptr: SSAValue, before: Operation) -> None:
        _insert(llvm.StoreOp(value, ptr), before)

    def replace(self, op: Operation, results: Sequence[SSAValue]) -> None:
        """Hand ``op``'s results (and their names) over to ``results`` and erase ``op``."""
        for old, new in zip(op.results, results, strict=True):
            if old.name_hint:
                new.name_hint = old.name_hint
            old.replace_all_uses_with(new)
        Rewriter.erase_op(op)

    # -- the entry block -------------------------------------------------------------------

    def at_entry(self, anchor: Operation, ops: Sequence[Operation]) -> None:
        """Insert ``ops`` in the entry block of ``anchor``'s function, after earlier entry ops."""
        if not ops:
            return
        fn = self._function_of(anchor)
        cursor = self.entry_cursor.get(fn)
        if cursor is not None:
            Rewriter.insert_op(ops, InsertPoint.after(cursor))
        else:
            Rewriter.insert_op(ops, InsertPoint.at_start(fn.regions[0].blocks.first))
        self.entry_cursor[fn] = ops[-1]

    def entry_slot(self, anchor: Operation, type_: Attribute, *, count: int | None = None) -> SSAValue:
        """An entry-block ``llvm.alloca`` of one ``type_`` (or of an array of ``count``, sized by
        a constant of its own), at the type's ABI alignment."""
        if count is None:
            size = self._one(anchor)
            sized: list[Operation] = []
        else:
            size_op = llvm.ConstantOp(IntegerAttr(count, i64), i64)
            size, sized = size_op.result, [size_op]
        alloca = llvm.AllocaOp(size, type_)
        del alloca.properties["alignment"]  # let LLVM pick the type's ABI alignment
        self.at_entry(anchor, [*sized, alloca])
        return alloca.res

    def _one(self, anchor: Operation) -> SSAValue:
        fn = self._function_of(anchor)
        if fn not in self.ones:
            one = llvm.ConstantOp(IntegerAttr(1, i64), i64)
            one.result.name_hint = "one"
            self.at_entry(anchor, [one])
            self.ones[fn] = one.result
        return self.ones[fn]

    def _function_of(self, op: Operation) -> Operation:
        parent = op.parent_op()
        while parent is not None and not isinstance(parent, llvm.FuncOp | func.FuncOp):
            parent = parent.parent_op()
        if parent is None or not parent.regions[0].blocks:
            raise self.fail(f"'{op.name}' is not inside a function body")
        return parent


_OpT = TypeVar("_OpT", bound=Operation)


def _insert(op: _OpT, before: Operation) -> _OpT:
    Rewriter.insert_op(op, InsertPoint.before(before))
    return op
