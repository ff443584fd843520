"""Text emission of one ``llvm.func`` in the dialects the frontend targets.

The frontend writes IR as text and parses it back through :func:`backline_compiler.pipeline.parse`,
which verifies every op; the textual form is also what ``qjit(..., keep_intermediate=)`` saves.

Values are :class:`Val` (an SSA name and its type) or Python constants; constants become
``llvm.mlir.constant`` only where an op needs an SSA value. Stack buffers are allocated in
the entry block (so loops do not grow the stack), whatever block asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: IR scalar types the frontend uses; "ptr" is ``!llvm.ptr``.
INT_TYPES = ("i1", "i8", "i16", "i32", "i64")
TYPES = (*INT_TYPES, "f64", "ptr")


@dataclass(frozen=True)
class Val:
    """An SSA value of the function being written."""

    name: str
    ty: str

    def __str__(self) -> str:
        return self.name


Scalar = bool | int | float | Val


class IRTypeError(TypeError):
    """A value used where its type cannot go (the frontend reports it as a CaptureError)."""


def ir_type(ty: str) -> str:
    return "!llvm.ptr" if ty == "ptr" else ty


def bits(ty: str) -> int:
    return int(ty[1:])


def _literal(value: bool | int | float, ty: str) -> str:
    if ty == "f64":
        return f"{float(value)!r} : f64"
    if ty == "i1":
        return f"{int(bool(value))} : i1"
    width = bits(ty)
    v = int(value) & ((1 << width) - 1)
    if v >= 1 << (width - 1):  # print signed, as the parser expects
        v -= 1 << width
    return f"{v} : {ty}"


def _escape(data: bytes) -> str:
    out = []
    for b in data:
        c = chr(b)
        out.append(c if 32 <= b < 127 and c not in '"\\' else f"\\{b:02X}")
    return "".join(out)


@dataclass
class Block:
    label: str
    args: list[Val] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    terminated: bool = False


class FunctionWriter:
    """Writes ``llvm.func @name(params) -> i32`` block by block."""

    def __init__(self, name: str, params: list[tuple[str, str]]) -> None:
        self.name = name
        self._n = 0
        self.params = [Val(f"%{p}", ty) for p, ty in params]
        self.entry = Block("entry")
        self.blocks: list[Block] = [self.entry]
        self.current = self.entry
        self._allocas: list[str] = []
        self.globals: dict[bytes, str] = {}
        self.declarations: dict[str, str] = {}

    # values -------------------------------------------------------------------------
    def fresh(self, ty: str) -> Val:
        self._n += 1
        return Val(f"%v{self._n}", ty)

    def emit(self, line: str) -> None:
        if self.current.terminated:
            raise AssertionError(f"emitting into terminated block {self.current.label}: {line}")
        self.current.lines.append(line)

    def op(self, ty: str, text: str) -> Val:
        """Emit ``%v = text`` and return ``%v`` of type ``ty``."""
        v = self.fresh(ty)
        self.emit(f"{v} = {text}")
        return v

    def const(self, value: bool | int | float, ty: str) -> Val:
        return self.op(ty, f"llvm.mlir.constant({_literal(value, ty)}) : {ty}")

    def val(self, x: Scalar, ty: str) -> Val:
        """``x`` as an SSA value of type ``ty`` (converting an SSA value if its type differs)."""
        if not isinstance(x, Val):
            return self.const(x, ty)
        return self.convert(x, ty)

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
                zero = self.const(0.0, "f64")
                return self.op("i1", f'llvm.fcmp "une" {x}, {zero} : f64')
            zero = self.const(0, x.ty)
            return self.op("i1", f'llvm.icmp "ne" {x}, {zero} : {x.ty}')
        if ty == "f64":
            if x.ty == "i1" or (not signed and bits(x.ty) < 64):
                # zero-extend first: sitofp reads its operand as signed (there is no uitofp here)
                x = self.op("i64", f"llvm.zext {x} : {x.ty} to i64")
            return self.op("f64", f"llvm.sitofp {x} : {x.ty} to f64")
        if x.ty == "f64":
            raise IRTypeError("a float value is used where an integer is needed; convert it explicitly "
                              "(e.g. jnp.int32(x) or x.astype(int)) first")
        if bits(x.ty) < bits(ty):
            kind = "zext" if (x.ty == "i1" or not signed) else "sext"
            return self.op(ty, f"llvm.{kind} {x} : {x.ty} to {ty}")
        return self.op(ty, f"llvm.trunc {x} : {x.ty} to {ty}")

    def intrinsic(self, name: str, args: list[Val], ty: str) -> Val:
        """``llvm.call_intrinsic "name"(args)`` returning ``ty``."""
        types = ", ".join(ir_type(a.ty) for a in args)
        argv = ", ".join(str(a) for a in args)
        return self.op(ty, f'llvm.call_intrinsic "{name}"({argv}) : ({types}) -> {ir_type(ty)}')

    def float_to_int(self, x: Val, ty: str, *, signed: bool = True) -> Val:
        """``f64`` -> integer ``ty`` as jax converts: toward zero, saturating, NaN -> 0 (``i1``: x != 0)."""
        if x.ty != "f64":
            raise IRTypeError(f"float_to_int of a {x.ty}")
        if ty == "i1":
            return self.convert(x, "i1")
        kind = "fptosi" if signed else "fptoui"
        return self.intrinsic(f"llvm.{kind}.sat.{ty}.f64", [x], ty)

    # memory -------------------------------------------------------------------------
    def alloca(self, ty: str, count: int) -> Val:
        """A stack buffer of ``count`` elements, allocated in the entry block."""
        self._n += 1
        n, p = f"%n{self._n}", f"%buf{self._n}"
        self._allocas.append(f"{n} = llvm.mlir.constant({count} : i64) : i64")
        self._allocas.append(f"{p} = llvm.alloca {n} x {ir_type(ty)} : (i64) -> !llvm.ptr")
        return Val(p, "ptr")

    def element(self, base: Val, index: Scalar, ty: str) -> Val:
        i = self.val(index, "i64")
        return self.op("ptr", f"llvm.getelementptr {base}[{i}] : (!llvm.ptr, i64) -> !llvm.ptr, {ir_type(ty)}")

    def load(self, ptr: Val, ty: str) -> Val:
        return self.op(ty, f"llvm.load {ptr} : !llvm.ptr -> {ir_type(ty)}")

    def store(self, value: Scalar, ptr: Val, ty: str) -> None:
        v = self.val(value, ty)
        self.emit(f"llvm.store {v}, {ptr} : {ir_type(ty)}, !llvm.ptr")

    def cstring(self, text: str | bytes) -> Val:
        """Address of a NUL-terminated constant string."""
        data = (text.encode() if isinstance(text, str) else bytes(text)) + b"\0"
        name = self.globals.get(data)
        if name is None:
            name = self.globals[data] = f"__bl_frontend_str_{len(self.globals)}"
        return self.op("ptr", f"llvm.mlir.addressof @{name} : !llvm.ptr")

    def declare(self, symbol: str, params: list[str], result: str) -> None:
        """Declare an external function (once per symbol)."""
        signature = ", ".join(ir_type(p) for p in params)
        ret = "" if result == "void" else f" -> {ir_type(result)}"
        line = f"llvm.func @{symbol}({signature}){ret}"
        if self.declarations.setdefault(symbol, line) != line:
            raise ValueError(f"symbol {symbol!r} is declared twice with different signatures")

    def call(self, symbol: str, args: list[Val], result: str) -> Val | None:
        types = ", ".join(ir_type(a.ty) for a in args)
        argv = ", ".join(str(a) for a in args)
        if result == "void":
            self.emit(f"llvm.call @{symbol}({argv}) : ({types}) -> ()")
            return None
        return self.op(result, f"llvm.call @{symbol}({argv}) : ({types}) -> {ir_type(result)}")

    # control flow -------------------------------------------------------------------
    def new_block(self, arg_types: tuple[str, ...] = ()) -> Block:
        self._n += 1
        label = f"bb{self._n}"
        block = Block(label, [Val(f"%{label}_a{i}", ty) for i, ty in enumerate(arg_types)])
        self.blocks.append(block)
        return block

    def set_block(self, block: Block) -> None:
        self.current = block

    def br(self, target: Block, args: list[Val] = ()) -> None:
        if args:
            operands = ", ".join(str(a) for a in args)
            types = ", ".join(ir_type(a.ty) for a in args)
            self.emit(f"llvm.br ^{target.label}({operands} : {types})")
        else:
            self.emit(f"llvm.br ^{target.label}")
        self.current.terminated = True

    def cond_br(self, cond: Val, then: Block, other: Block) -> None:
        self.emit(f"llvm.cond_br {cond}, ^{then.label}, ^{other.label}")
        self.current.terminated = True

    def ret(self, value: Val) -> None:
        self.emit(f"llvm.return {value} : {ir_type(value.ty)}")
        self.current.terminated = True

    # output -------------------------------------------------------------------------
    def text(self) -> str:
        """The function, its string globals and declarations (module-level items)."""
        params = ", ".join(f"{p.name}: {ir_type(p.ty)}" for p in self.params)
        out = [f"llvm.func @{self.name}({params}) -> i32 {{"]
        for i, block in enumerate(self.blocks):
            if i:
                args = ", ".join(f"{a.name}: {ir_type(a.ty)}" for a in block.args)
                out.append(f"^{block.label}({args}):" if args else f"^{block.label}:")
            lines = (self._allocas + block.lines) if i == 0 else block.lines
            out.extend("  " + line for line in lines)
        out.append("}")
        items = [f'llvm.mlir.global internal constant @{name}("{_escape(data)}")'
                 f" {{addr_space = 0 : i32}} : !llvm.array<{len(data)} x i8>"
                 for data, name in self.globals.items()]
        return "\n".join([*items, *self.declarations.values(), *out])
