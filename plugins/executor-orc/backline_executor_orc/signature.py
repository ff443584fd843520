"""Signatures of launched/called functions: LLVM function types as text, marshalling, wrappers.

Grammar (the brief's): ``ret (params)``; ret = ``void`` | type; type = ``iN`` (N 1..64
or 128) | ``half`` | ``float`` | ``double`` | ``ptr`` | ``[N x type]`` | ``{type, ...}``;
``ptr`` only as a top-level parameter (a buffer). Layout is LP64 little-endian: iN rounds
up to 1, 2, 4, 8 bytes (i128: 16, align 16), arrays are n x elem, literal structs are
naturally aligned and padded to their alignment.

>>> from backline_executor_orc import signature
>>> sig = signature.parse("{i64, i32} (i64, ptr)")
>>> sig.text, sig.nargs, sig.nresults, [signature.size_of(t) for t in sig.results]
('{i64, i32} (i64, ptr)', 2, 2, [8, 4])
>>> blob = signature.pack_args(sig, [(5).to_bytes(8, "little"), b"abc"])
>>> signature.unpack_args(sig, blob)
[b'\\x05\\x00\\x00\\x00\\x00\\x00\\x00\\x00', b'abc']
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from backline_core.sdk import lib

_U64 = struct.Struct(">Q")
_MAX_DEPTH = 16  # nesting of arrays/structs; deeper is surely not a kernel's signature
_I64 = ir.IntType(64)
_PTR = ir.PointerType()
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_.]*)|(\d+)|([\[\]{}(),])|(\S))")


class SignatureError(ValueError):
    """The signature text, or the values given for it, are not acceptable (BL_EINVAL)."""


@dataclass(frozen=True)
class Signature:
    """A parsed signature: ``params`` in order, ``results`` the result slots (struct fields)."""

    text: str
    ret: ir.Type
    params: tuple[ir.Type, ...]
    results: tuple[ir.Type, ...]

    @property
    def nargs(self) -> int:
        return len(self.params)

    @property
    def nresults(self) -> int:
        return len(self.results)

    @property
    def buffer_params(self) -> tuple[int, ...]:
        """Indices of the ``ptr`` parameters (buffers)."""
        return tuple(i for i, t in enumerate(self.params) if isinstance(t, ir.PointerType))

    @property
    def function_type(self) -> ir.FunctionType:
        return ir.FunctionType(self.ret, self.params)


def size_of(t: ir.Type) -> int:
    """ABI size in bytes (the brief's LP64 rules)."""
    return _layout(t)[0]


def align_of(t: ir.Type) -> int:
    """ABI alignment in bytes."""
    return _layout(t)[1]


def _layout(t: ir.Type) -> tuple[int, int]:
    if isinstance(t, ir.IntType):
        n = t.width
        size = 16 if n > 64 else 8 if n > 32 else 4 if n > 16 else 2 if n > 8 else 1
        return size, size
    if isinstance(t, ir.HalfType):
        return 2, 2
    if isinstance(t, ir.FloatType):
        return 4, 4
    if isinstance(t, ir.DoubleType):
        return 8, 8
    if isinstance(t, ir.PointerType):
        return 8, 8
    if isinstance(t, ir.ArrayType):
        size, align = _layout(t.element)
        return size * t.count, align
    if isinstance(t, ir.LiteralStructType):
        offset, align = 0, 1
        for field in t.elements:
            fsize, falign = _layout(field)
            offset = (offset + falign - 1) // falign * falign + fsize
            align = max(align, falign)
        return (offset + align - 1) // align * align, align
    raise SignatureError(f"type {t} has no layout here")  # pragma: no cover - parse() never builds one


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, value, offset)
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:  # only trailing whitespace is left
                break
            kind = "word" if m.group(1) else "num" if m.group(2) else "punct" if m.group(3) else "other"
            self.tokens.append((kind, m.group(m.lastindex), m.start(m.lastindex)))
            pos = m.end()
        self.i = 0

    def fail(self, message: str) -> SignatureError:
        return SignatureError(f"signature {self.text!r}: {message}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self, what: str) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise self.fail(f"ends where {what} was expected")
        self.i += 1
        return tok

    def expect(self, value: str, what: str) -> None:
        kind, got, _ = self.next(what)
        if got != value:
            raise self.fail(f"expected {what}, found {got!r}")

    def unsupported(self, offset: int) -> SignatureError:
        """Name the unsupported type starting at ``offset`` (up to its closing bracket or comma)."""
        rest = self.text[offset:]
        if rest.startswith("<"):
            end = rest.find(">")
            name = rest[: end + 1] if end >= 0 else rest
        else:
            name = re.split(r"[\s,()\]}]", rest, maxsplit=1)[0] or rest[:1]
        return self.fail(
            f"unsupported type {name!r} (supported: iN with N in 1..64 or 128, half, float, double, "
            "ptr as a parameter, [N x type], {type, ...})"
        )

    def type(self, depth: int, where: str) -> ir.Type:
        if depth > _MAX_DEPTH:
            raise self.fail(f"types nest deeper than {_MAX_DEPTH} levels")
        kind, value, offset = self.next("a type")
        if kind == "word":
            m = re.fullmatch(r"i(\d+)", value)
            if m:
                width = int(m.group(1))
                if not (1 <= width <= 64 or width == 128):
                    raise self.fail(f"unsupported type {value!r} (iN needs N in 1..64, or 128)")
                return ir.IntType(width)
            simple = {"half": ir.HalfType, "float": ir.FloatType, "double": ir.DoubleType}
            if value in simple:
                return simple[value]()
            if value == "ptr":
                if where != "as a parameter":
                    raise self.fail(f"ptr is only allowed as a top-level parameter (a buffer), not {where}")
                return _PTR
            if value == "void":
                raise self.fail(f"void is only allowed as the return type, not {where}")
            raise self.unsupported(offset)
        if value == "[":
            _, count, _ = self.next("an array length")
            if not count.isdigit():
                raise self.fail(f"expected an array length after '[', found {count!r}")
            _, x, _ = self.next("'x'")
            if x != "x":
                raise self.fail(f"expected 'x' in an array type, found {x!r}")
            elem = self.type(depth + 1, "in an array")
            self.expect("]", "']'")
            t = ir.ArrayType(elem, int(count))
        elif value == "{":
            fields = [self.type(depth + 1, "in a struct")]
            while True:
                kind, sep, _ = self.next("',' or '}'")
                if sep == "}":
                    break
                if sep != ",":
                    raise self.fail(f"expected ',' or '}}' in a struct type, found {sep!r}")
                fields.append(self.type(depth + 1, "in a struct"))
            t = ir.LiteralStructType(fields)
        elif kind == "punct":
            raise self.fail(f"expected a type, found {value!r}")
        else:
            raise self.unsupported(offset)
        if size_of(t) > lib.BL_EXECUTOR_MAX_ARGS_BYTES:
            raise self.fail(f"type {t} is {size_of(t)} bytes, over the {lib.BL_EXECUTOR_MAX_ARGS_BYTES}-byte limit")
        return t

    def signature(self) -> Signature:
        tok = self.peek()
        if tok is None:
            raise self.fail("is empty; expected 'ret (params)', e.g. 'i64 (i64)'")
        if tok[1] == "void":
            self.i += 1
            ret: ir.Type = ir.VoidType()
        else:
            ret = self.type(0, "in a result")
        self.expect("(", "'(' after the return type")
        params: list[ir.Type] = []
        if self.peek() is not None and self.peek()[1] == ")":
            self.i += 1
        else:
            while True:
                params.append(self.type(0, "as a parameter"))
                kind, sep, _ = self.next("',' or ')'")
                if sep == ")":
                    break
                if sep != ",":
                    raise self.fail(f"expected ',' or ')' in the parameter list, found {sep!r}")
        extra = self.peek()
        if extra is not None:
            raise self.fail(f"unexpected {self.text[extra[2]:]!r} after the parameter list")
        if isinstance(ret, ir.VoidType):
            results: tuple[ir.Type, ...] = ()
        elif isinstance(ret, ir.LiteralStructType):
            results = tuple(ret.elements)
        else:
            results = (ret,)
        return Signature(text=str(ir.FunctionType(ret, params)), ret=ret, params=tuple(params), results=results)


def parse(text: str) -> Signature:
    """Parse ``ret (params)``; SignatureError (a ValueError) naming what is not supported."""
    return _Parser(text).signature()


def pack_args(sig: Signature, values: Sequence[bytes]) -> bytes:
    """The args blob: each non-ptr value's bytes (exactly its size), each buffer as u64 count + bytes."""
    if len(values) != sig.nargs:
        raise SignatureError(f"signature {sig.text!r} takes {sig.nargs} arguments, got {len(values)}")
    out = []
    for i, (t, v) in enumerate(zip(sig.params, values)):
        v = bytes(v)
        if isinstance(t, ir.PointerType):
            out += [_U64.pack(len(v)), v]
        elif len(v) != size_of(t):
            raise SignatureError(f"argument {i} ({t}) needs {size_of(t)} bytes, got {len(v)}")
        else:
            out.append(v)
    return b"".join(out)


def _split(blob: bytes, what: str, types: Sequence[ir.Type], sig: Signature) -> list[bytes]:
    """Cut a blob into values of ``types`` (a ptr: u64 count + bytes); SignatureError if it does not fit."""
    view = memoryview(blob)
    pos = 0
    out: list[bytes] = []
    for i, t in enumerate(types):
        if isinstance(t, ir.PointerType):
            if pos + 8 > len(view):
                raise SignatureError(f"{what} for {sig.text!r} ends inside the byte count of buffer {i}")
            (n,) = _U64.unpack(view[pos : pos + 8])
            pos += 8
        else:
            n = size_of(t)
        if pos + n > len(view):
            raise SignatureError(f"{what} for {sig.text!r} ends inside value {i} ({t}: {n} bytes)")
        out.append(bytes(view[pos : pos + n]))
        pos += n
    if pos != len(view):
        raise SignatureError(f"{what} for {sig.text!r} has {len(view) - pos} bytes after its last value")
    return out


def unpack_args(sig: Signature, blob: bytes) -> list[bytes]:
    """Inverse of :func:`pack_args`: one bytes per parameter (a buffer's contents for a ptr)."""
    return _split(blob, "the args blob", sig.params, sig)


def pack_results(sig: Signature, results: Sequence[bytes], buffers: Sequence[bytes]) -> bytes:
    """The results blob: each result slot's bytes, then each buffer as u64 count + bytes."""
    out = [bytes(r) for r in results]
    for b in buffers:
        out += [_U64.pack(len(b)), bytes(b)]
    return b"".join(out)


def unpack_results(sig: Signature, blob: bytes) -> tuple[list[bytes], list[bytes]]:
    """Inverse of :func:`pack_results`: (result slot bytes, buffer contents)."""
    types = sig.results + (_PTR,) * len(sig.buffer_params)
    parts = _split(blob, "the results blob", types, sig)
    return parts[: sig.nresults], parts[sig.nresults :]


def build_wrapper(sig: Signature, triple: str = "", data_layout: str = "") -> ir.Module:
    """IR of ``void wrap(ptr fn, ptr argv, ptr resv)`` for ``sig``.

    ``argv[i]`` points to parameter i's value (for a ptr parameter: to a slot holding the
    buffer's address); ``resv[j]`` points to where result slot j is stored (a struct
    return's fields are scattered, one slot each). Values are loaded and stored with
    alignment 1, so the caller's slots need no particular alignment.
    """
    module = ir.Module(name="backline-executor-wrap")
    if triple:
        module.triple = triple
    if data_layout:
        module.data_layout = data_layout
    fnty = sig.function_type
    wrap = ir.Function(module, ir.FunctionType(ir.VoidType(), [fnty.as_pointer(), _PTR, _PTR]), "wrap")
    fn, argv, resv = wrap.args
    b = ir.IRBuilder(wrap.append_basic_block("entry"))

    def slot(array: ir.Value, index: int) -> ir.Value:
        at = b.gep(array, [ir.Constant(_I64, index)], source_etype=_PTR)
        return b.load(at, typ=_PTR, align=8)

    values = [b.load(slot(argv, i), typ=t, align=1) for i, t in enumerate(sig.params)]
    ret = b.call(fn, values)
    if isinstance(sig.ret, ir.LiteralStructType):
        for j in range(sig.nresults):
            b.store(b.extract_value(ret, j), slot(resv, j), align=1)
    elif not isinstance(sig.ret, ir.VoidType):
        b.store(ret, slot(resv, 0), align=1)
    b.ret_void()
    return module
