"""Builds one ``llvm.func`` (and the module around it) from xDSL op constructors.

Values are :class:`Val` (an xDSL SSA value and its type name) or Python constants; constants
become ``llvm.mlir.constant`` only where an op needs an SSA value. Stack buffers are allocated
in the entry block (so loops do not grow the stack), whatever block asks for them.
:meth:`FunctionWriter.module` returns the function with its string globals and declarations
as a ``builtin.module``; the caller verifies it (``module.verify()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from ..dialects.bquantum import DEVICE

PTR = llvm.LLVMPointerType()
#: the IR types the frontend uses, by name ("ptr" is ``!llvm.ptr``, "device" ``!bquantum.device``)
TYPES: dict[str, Attribute] = {"i1": i1, "i8": i8, "i16": i16, "i32": i32, "i64": i64, "f64": f64, "ptr": PTR,
                               "device": DEVICE}
_NAMES: dict[Attribute, str] = {t: name for name, t in TYPES.items()}


@dataclass(frozen=True)
class Val:
    """An SSA value of the function being written, and its type name (a key of :data:`TYPES`)."""

    value: SSAValue
    ty: str


Scalar = bool | int | float | Val


class IRTypeError(TypeError):
    """A value used where its type cannot go (the frontend reports it as a CaptureError)."""


def bits(ty: str) -> int:
    return int(ty[1:])


def _literal(value: bool | int | float, ty: str) -> Attribute:
    if ty == "f64":
        return FloatAttr(float(value), f64)
    if ty == "i1":
        return IntegerAttr(int(bool(value)), i1)
    width = bits(ty)
    v = int(value) & ((1 << width) - 1)
    if v >= 1 << (width - 1):  # wrapped to the width, in signed form
        v -= 1 << width
    return IntegerAttr(v, TYPES[ty])


def _is_terminator(op: Operation | None) -> bool:
    return isinstance(op, llvm.BrOp | llvm.CondBrOp | llvm.ReturnOp)


class FunctionWriter:
    """Writes ``llvm.func @name(params) -> i32`` block by block, into xDSL blocks."""

    def __init__(self, name: str, params: list[tuple[str, str]]) -> None:
        self.name = name
        self.entry = Block(arg_types=[TYPES[ty] for _, ty in params])
        for arg, (pname, _) in zip(self.entry.args, params, strict=True):
            arg.name_hint = pname
        self.params = [Val(arg, ty) for arg, (_, ty) in zip(self.entry.args, params, strict=True)]
        self.body = Region(self.entry)
        self.current = self.entry
        self._last_alloca: Operation | None = None
        self.globals: dict[bytes, str] = {}
        self.declarations: dict[str, llvm.LLVMFunctionType] = {}

    # ops ----------------------------------------------------------------------------
    def add(self, op: Operation) -> Operation:
        """Append ``op`` to the current block; returns it."""
        if _is_terminator(self.current.last_op):
            raise AssertionError(f"emitting {op.name} into a terminated block")
        self.current.add_op(op)
        return op

    def result(self, op: Operation, ty: str | None = None) -> Val:
        """Append ``op`` (one result) and return its result (of type name ``ty``, by default its own)."""
        self.add(op)
        value = op.results[0]
        return Val(value, ty if ty is not None else _NAMES[value.type])

    def const(self, value: bool | int | float, ty: str) -> Val:
        return self.result(llvm.ConstantOp(_literal(value, ty), TYPES[ty]), ty)

    def val(self, x: Scalar, ty: str) -> Val:
        """``x`` as an SSA value of type ``ty`` (converting an SSA value if its type differs)."""
        if not isinstance(x, Val):
            return self.const(x, ty)
        return self.convert(x, ty)

    def arith(self, cls: type[Operation], a: Val, b: Val) -> Val:
        """``cls(a, b)``: an llvm integer or float binary op (``llvm.AddOp``, ``llvm.FMulOp``, ...)."""
        return self.result(cls(a.value, b.value), a.ty)

    def icmp(self, predicate: str, a: Val, b: Val) -> Val:
        """``llvm.icmp`` with ``predicate`` ("eq", "slt", "uge", ...)."""
        flag = IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)
        return self.result(llvm.ICmpOp(a.value, b.value, flag), "i1")

    def fcmp(self, predicate: str, a: Val, b: Val) -> Val:
        """``llvm.fcmp`` with ``predicate`` ("oeq", "une", ...)."""
        return self.result(llvm.FCmpOp(a.value, b.value, predicate), "i1")

    def select(self, cond: Val, a: Val, b: Val) -> Val:
        """``cond ? a : b``."""
        return self.result(llvm.SelectOp(cond.value, a.value, b.value), a.ty)

    def convert(self, x: Val, ty: str, *, signed: bool = True) -> Val:
        """``x`` as ``ty``: integers are sign- (``signed``) or zero-extended or truncated; an integer
        becomes a float exactly as C converts it. A float becomes an integer only through
        :meth:`float_to_int` (this raises :class:`IRTypeError`: an implicit conversion would
        silently drop the fraction)."""
        if x.ty == ty:
            return x
        if x.ty == "ptr" or ty == "ptr":
            raise IRTypeError(f"cannot use a pointer as {ty}" if x.ty == "ptr" else f"cannot use {x.ty} as a pointer")
        if ty == "i1":
            if x.ty == "f64":
                return self.fcmp("une", x, self.const(0.0, "f64"))
            return self.icmp("ne", x, self.const(0, x.ty))
        if ty == "f64":
            if x.ty == "i1" or (not signed and bits(x.ty) < 64):
                # zero-extend first: sitofp reads its operand as signed (there is no uitofp here)
                x = self.result(llvm.ZExtOp(x.value, i64), "i64")
            return self.result(llvm.SIToFPOp(x.value, f64), "f64")
        if x.ty == "f64":
            raise IRTypeError("a float value is used where an integer is needed; convert it explicitly "
                              "(e.g. jnp.int32(x) or x.astype(int)) first")
        if bits(x.ty) < bits(ty):
            cls = llvm.ZExtOp if (x.ty == "i1" or not signed) else llvm.SExtOp
            return self.result(cls(x.value, TYPES[ty]), ty)
        return self.result(llvm.TruncOp(x.value, TYPES[ty]), ty)

    def bitcast(self, x: Val, ty: str) -> Val:
        """``x`` reinterpreted as ``ty`` (of the same width)."""
        return self.result(llvm.BitcastOp(x.value, TYPES[ty]), ty)

    def intrinsic(self, name: str, args: list[Val], ty: str) -> Val:
        """A call of the LLVM intrinsic ``llvm.<name>`` returning ``ty``."""
        return self.result(llvm.CallIntrinsicOp("llvm." + name, [a.value for a in args], [TYPES[ty]]), ty)

    def float_to_int(self, x: Val, ty: str, *, signed: bool = True) -> Val:
        """``f64`` -> integer ``ty`` as jax converts: toward zero, saturating, NaN -> 0 (``i1``: x != 0)."""
        if x.ty != "f64":
            raise IRTypeError(f"float_to_int of a {x.ty}")
        if ty == "i1":
            return self.convert(x, "i1")
        kind = "fptosi" if signed else "fptoui"
        return self.intrinsic(f"{kind}.sat.{ty}.f64", [x], ty)

    # memory -------------------------------------------------------------------------
    def alloca(self, ty: str, count: int) -> Val:
        """A stack buffer of ``count`` elements, allocated in the entry block."""
        n = llvm.ConstantOp(IntegerAttr(count, i64), i64)
        buf = llvm.AllocaOp.create(operands=[n.result], result_types=[PTR], properties={"elem_type": TYPES[ty]})
        if self._last_alloca is not None:
            self.entry.insert_op_after(n, self._last_alloca)
        elif self.entry.first_op is not None:
            self.entry.insert_op_before(n, self.entry.first_op)
        else:
            self.entry.add_op(n)
        self.entry.insert_op_after(buf, n)
        self._last_alloca = buf
        return Val(buf.res, "ptr")

    def element(self, base: Val, index: Scalar, ty: str) -> Val:
        """The address of element ``index`` of the ``ty`` array at ``base``."""
        i = self.val(index, "i64")
        return self.result(llvm.GEPOp(base.value, [llvm.GEP_USE_SSA_VAL], TYPES[ty], [i.value]), "ptr")

    def load(self, ptr: Val, ty: str) -> Val:
        return self.result(llvm.LoadOp(ptr.value, TYPES[ty]), ty)

    def store(self, value: Scalar, ptr: Val, ty: str) -> None:
        v = self.val(value, ty)
        self.add(llvm.StoreOp(v.value, ptr.value))

    def null(self) -> Val:
        """A NULL pointer."""
        return self.result(llvm.ZeroOp.create(result_types=[PTR]), "ptr")

    def cstring(self, text: str | bytes) -> Val:
        """Address of a NUL-terminated constant string."""
        data = (text.encode() if isinstance(text, str) else bytes(text)) + b"\0"
        name = self.globals.get(data)
        if name is None:
            name = self.globals[data] = f"__bl_frontend_str_{len(self.globals)}"
        return self.result(llvm.AddressOfOp(name, PTR), "ptr")

    def declare(self, symbol: str, params: list[str], result: str) -> None:
        """Declare an external function (once per symbol)."""
        ty = llvm.LLVMFunctionType([TYPES[p] for p in params], None if result == "void" else TYPES[result])
        if self.declarations.setdefault(symbol, ty) != ty:
            raise ValueError(f"symbol {symbol!r} is declared twice with different signatures")

    def call(self, symbol: str, args: list[Val], result: str) -> Val | None:
        op = llvm.CallOp(symbol, *(a.value for a in args), return_type=None if result == "void" else TYPES[result])
        if result == "void":
            self.add(op)
            return None
        return self.result(op, result)

    # control flow -------------------------------------------------------------------
    def new_block(self, arg_types: Sequence[str] = ()) -> Block:
        """A new block (after the others) with arguments of ``arg_types``."""
        block = Block(arg_types=[TYPES[ty] for ty in arg_types])
        self.body.add_block(block)
        return block

    def set_block(self, block: Block) -> None:
        self.current = block

    @staticmethod
    def args(block: Block) -> list[Val]:
        """The arguments of ``block``."""
        return [Val(a, _NAMES[a.type]) for a in block.args]

    @staticmethod
    def add_args(block: Block, types: Sequence[str]) -> None:
        """Append arguments of ``types`` to ``block``."""
        for ty in types:
            block.insert_arg(TYPES[ty], len(block.args))

    def br(self, target: Block, args: Sequence[Val] = ()) -> None:
        self.add(llvm.BrOp(target, *(a.value for a in args)))

    def cond_br(self, cond: Val, then: Block, other: Block) -> None:
        self.add(llvm.CondBrOp(cond.value, then, [], other, []))

    def ret(self, value: Val) -> None:
        self.add(llvm.ReturnOp(value.value))

    # output -------------------------------------------------------------------------
    def module(self) -> ModuleOp:
        """A module of the string globals, the declarations and the function (unverified)."""
        items: list[Operation] = []
        for data, name in self.globals.items():
            value: Attribute = (StringAttr(data.decode("ascii")) if data.isascii() else
                                DenseIntOrFPElementsAttr.from_list(TensorType(i8, [len(data)]),
                                                                   [b - 256 if b > 127 else b for b in data]))
            items.append(llvm.GlobalOp(llvm.LLVMArrayType(len(data), i8), name, "internal", constant=True,
                                       value=value))
        for symbol, ty in self.declarations.items():
            items.append(llvm.FuncOp(symbol, ty, linkage=llvm.LinkageAttr("external")))
        func_type = llvm.LLVMFunctionType([p.value.type for p in self.params], i32)
        items.append(llvm.FuncOp(self.name, func_type, linkage=llvm.LinkageAttr("external"), body=self.body))
        return ModuleOp(items)
