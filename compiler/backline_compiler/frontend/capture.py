"""PennyLane program capture (plxpr) to Backline IR: one QNode becomes one ``llvm.func``.

:func:`qnode_to_ir` walks the QNode's jaxpr and writes::

    llvm.func @qnode(%dev: !llvm.ptr, %shots: i64, %out: !llvm.ptr, %args: !llvm.ptr) -> i32

which runs ``%shots`` shots on the open device ``%dev`` (``bquantum.reset_all`` before each),
writes each shot's recorded values (measurement outcomes and classical values the QNode
returns) as ``i32`` to ``out[shot * width + k]``, and returns the runtime's first recorded
failure (``transport.take_status``), checked after every shot so a failing program stops.
QNode arguments arrive in ``%args``, one 8-byte slot per element (``int64`` or ``float64``).

What is translated:

* gates (:data:`GATES`) on integer wires, ``qml.measure`` (``reset=True`` too), ``qml.cond``
  (with ``elifs``), ``qml.for_loop``, ``qml.while_loop`` and Python loops (unrolled by the
  trace); ``for_loop`` with constant bounds is unrolled when ``unroll_loops`` is set (the
  Steane encoding needs constant wires);
* integer (signed and unsigned), boolean and float scalar arithmetic, comparisons, ``select``,
  conversions (float -> int as jax does: toward zero, saturating), ``floor``/``ceil``/``round``/
  ``abs``/``sign``, and 1-D arrays of them (``jnp.array``, indexing with constant or run-time
  indices, ``x.at[i].set/add(v)``, slicing, ``concatenate``, sums and reductions); integer
  division and remainder follow XLA (``x / 0 = -1``, ``x % 0 = x``); whatever has only constant
  inputs is evaluated by JAX at compile time;
* :func:`~backline_compiler.frontend.decode.decode` (an explicit ``bqec.decode``) and
  :func:`~backline_compiler.frontend.runtime_call.runtime_call` (an ``llvm.call``);
* measurements: ``qml.sample``, ``qml.expval``, ``qml.var`` and ``qml.probs`` of wires, of
  Pauli-product observables (rotated into the Z basis) or of classical values (integers in one
  ``i32`` column, 64-bit integers in two, floats as their ``f64`` bits in two). They are measured where they appear
  (at the end of the circuit) and reduced in Python (:mod:`~backline_compiler.frontend.results`).
* operators a ``qml.cond`` branch returns (``qml.cond(m, qml.X, false_fn=qml.Z)(1)``) are applied
  where the branch ends, as PennyLane's interpreters do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from .ir_writer import FunctionWriter, IRTypeError, Scalar, Val

#: PennyLane operator name -> bquantum gate name.
GATES: dict[str, str] = {
    "Identity": "I", "PauliX": "X", "PauliY": "Y", "PauliZ": "Z", "Hadamard": "H", "S": "S",
    "SX": "SX", "CNOT": "CNOT", "CZ": "CZ", "SWAP": "SWAP", "RX": "RX", "RY": "RY", "RZ": "RZ",
}
#: Observables a measurement may name (each is rotated into the Z basis first).
PAULI_OBSERVABLES = {"PauliX": "X", "PauliY": "Y", "PauliZ": "Z", "Identity": "I"}
#: Measurement primitives translated here, by the kind of result they reduce to.
MEASUREMENTS = {"sample", "expval", "var", "probs"}


class CaptureError(ValueError):
    """The QNode uses something the compiled path does not support (the message says what)."""


@dataclass
class Arr:
    """A 1-D (or 0-D) array whose elements are SSA values or constants."""

    shape: tuple[int, ...]
    elems: list[Scalar]


@dataclass(frozen=True)
class Observable:
    """A Pauli product on wires (factors are (pauli, wire) pairs)."""

    factors: tuple[tuple[str, Scalar], ...]


@dataclass(frozen=True)
class PendingOp:
    """An operator whose result is used: an observable (when a measurement or a product takes it)
    or a gate a branch returns (applied where the branch ends, as PennyLane does)."""

    name: str
    params: tuple[Any, ...]
    wires: tuple[Scalar, ...]


@dataclass
class MeasurementRecord:
    """One measurement process of the QNode: its kind and the output columns it reads."""

    kind: str           # sample | expval | var | probs
    columns: list[int]  # indices into the per-shot record
    eigen: str          # "bits" (0/1 outcomes), "parity" (a Pauli product's +-1) or "values" (classical)
    aval: Any = None    # PennyLane's AbstractMeasurement: abstract_eval(wires, shots) -> (shape, dtype)
    #: per recorded value (classical values only; empty: one ``i32`` column each): "int" (one
    #: column), "int64" (two columns, low word first) or "float" (its f64 bits in two columns)
    kinds: tuple[str, ...] = ()


@dataclass
class DecodeSite:
    """A decode the QNode performs (for message sizes and error messages)."""

    coprocessor: str | None
    decoder_id: int
    syndrome_bytes: int
    correction_bytes: int


@dataclass
class Translation:
    """The result of :func:`qnode_to_ir`."""

    text: str                                 # module body items (globals, declarations, the function)
    width: int                                # recorded i32 values per shot
    measurements: list[MeasurementRecord]
    num_args: int                             # 8-byte argument slots
    arg_kinds: list[str]                      # "i" or "f" per slot
    decodes: list[DecodeSite] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    wires_used: int = 0                       # the largest constant wire + 1


def bits_of(ty: str) -> int:
    """Width of an integer IR type (``i1`` is 1)."""
    return int(ty[1:])


def dtype_type(dtype: Any) -> str:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "i1"
    if dt.kind in "iu":
        return {1: "i8", 2: "i16", 4: "i32", 8: "i64"}[dt.itemsize]
    if dt.kind == "f":
        return "f64"
    raise CaptureError(f"values of dtype {dt} are not supported in compiled programs")


def _is_const(x: Any) -> bool:
    if isinstance(x, Arr):
        return all(not isinstance(e, Val) for e in x.elems)
    return not isinstance(x, (Val, Observable, MeasurementRecord, PendingOp))


def to_python(value: Any) -> Any:
    """A jax/numpy constant as a Python scalar or an :class:`Arr` of Python scalars."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        return arr.item()
    if arr.ndim > 1:
        return Arr(arr.shape, [x.item() for x in arr.ravel()])
    return Arr(arr.shape, [x.item() for x in arr])


def from_python(value: Any, aval: Any) -> Any:
    """A constant in the form jax's eager evaluation takes."""
    if isinstance(value, Arr):
        return np.asarray(value.elems, dtype=aval.dtype).reshape(value.shape)
    return np.asarray(value, dtype=aval.dtype)


_ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_INT_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "sdiv", "rem": "srem", "and": "and",
               "or": "or", "xor": "xor", "shift_left": "shl", "shift_right_logical": "lshr",
               "shift_right_arithmetic": "ashr"}
_FLOAT_BINARY = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "rem": "frem"}
_REDUCE = {"reduce_sum": "add", "reduce_or": "or", "reduce_and": "and", "reduce_xor": "xor",
           "reduce_max": "max", "reduce_min": "min"}
_IGNORED = {"copy", "copy_p", "optimization_barrier"}
#: primitives whose PennyLane / jax spelling differs from the name, for error messages
_KNOWN_NAMES = {"adjoint_transform": "qml.adjoint", "ctrl_transform": "qml.ctrl", "gather": "array[index array]",
                "dot_general": "jnp.dot / @", "argmax": "jnp.argmax", "argmin": "jnp.argmin", "cumsum": "jnp.cumsum",
                "while": "jax.lax.while_loop / fori_loop: use qml.while_loop or qml.for_loop",
                "scan": "jax.lax.scan / fori_loop: use qml.for_loop"}


def walk(jaxpr: jcore.Jaxpr, consts: Sequence[Any], args: Sequence[Any],
         step: Callable[[jcore.JaxprEqn, list[Any], dict[Any, Any]], Any],
         literal: Callable[[Any], Any] = lambda x: x) -> list[Any]:
    """Evaluate ``jaxpr`` equation by equation; ``step(eqn, invals, env)`` returns an equation's
    output (a list when its primitive has several); literals are read through ``literal``."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return literal(v.val) if isinstance(v, jcore.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        out = step(eqn, [read(v) for v in eqn.invars], env)
        if not eqn.primitive.multiple_results:
            out = [out]
        for var, value in zip(eqn.outvars, out, strict=True):
            if not isinstance(var, jax.core.DropVar):
                env[var] = value
    return [read(v) for v in jaxpr.outvars]


class Interpreter:
    """Walks a QNode's jaxpr, writing IR through a :class:`FunctionWriter`."""

    def __init__(self, writer: FunctionWriter, device: Val, *, num_wires: int, unroll_loops: bool,
                 extensions: dict[str, Callable[..., Any]]) -> None:
        self.w = writer
        self.device = device
        self.num_wires = num_wires
        self.unroll_loops = unroll_loops
        self.extensions = extensions    # primitive name -> handler(interp, eqn, invals) -> outvals
        self.records: list[Val] = []
        self.measurements: list[MeasurementRecord] = []
        self.measured: dict[int, tuple[str, Val]] = {}  # constant wire -> (basis, outcome) at the end
        self.wires_used = 0
        self.decodes: list[DecodeSite] = []
        self.libraries: list[str] = []

    # environment --------------------------------------------------------------------
    def eval(self, jaxpr: jcore.Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        out = walk(jaxpr, consts, args, lambda eqn, invals, env: self.equation(eqn, invals), literal=to_python)
        # operators a jaxpr returns (a branch's qml.X(0)) are applied where it ends, as PennyLane does
        for k, value in enumerate(out):
            if isinstance(value, PendingOp):
                self.apply(value.name, value.params, value.wires)
                out[k] = None
        return out

    def equation(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        prim = eqn.primitive
        name = prim.name
        kind = getattr(prim, "prim_type", "")
        if name in self.extensions:
            return self.extensions[name](self, eqn, invals)
        if kind == "operator":
            return self.operator(eqn, invals)
        if kind == "measurement":
            return self.measurement(eqn, invals)
        handler = getattr(self, f"p_{name.replace('-', '_')}", None)
        if handler is not None:
            return handler(eqn, invals)
        if name in _IGNORED:
            return invals[0] if not prim.multiple_results else invals
        if all(_is_const(x) for x in invals) and kind == "":
            return self.fold(eqn, invals)
        if name in _INT_BINARY or name in _ICMP or name in ("max", "min"):
            return self.elementwise(eqn, invals)
        if name in _REDUCE:
            return self.reduce(eqn, invals)
        known = _KNOWN_NAMES.get(name)
        raise CaptureError(
            f"'{name}'{f' ({known})' if known else ''} is not supported in a compiled Backline QNode (with run-time "
            "operands); see the backline_compiler.frontend.capture docstring (docs/frontend.md) for what is"
        )

    def fold(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """Evaluate an equation whose inputs are all constant with jax itself."""
        args = [from_python(x, v.aval) for x, v in zip(invals, eqn.invars, strict=True)]
        subfuns, params = eqn.primitive.get_bind_params(eqn.params)
        out = eqn.primitive.bind(*subfuns, *args, **params)
        if eqn.primitive.multiple_results:
            return [to_python(o) for o in out]
        return to_python(out)

    # scalars ------------------------------------------------------------------------
    def scalar(self, x: Any, what: str) -> Scalar:
        if isinstance(x, Arr):
            if x.shape not in ((), (1,)):
                raise CaptureError(f"{what}: expected a scalar, got an array of shape {x.shape}")
            return x.elems[0]
        if isinstance(x, (Observable, MeasurementRecord, PendingOp)):
            raise CaptureError(f"{what}: expected a number, got an operator or a measurement")
        return x

    def binary(self, name: str, a: Scalar, b: Scalar, in_ty: str, out_ty: str, *, unsigned: bool = False) -> Scalar:
        """``a <name> b`` on ``in_ty`` operands; ``unsigned`` picks unsigned division, remainder,
        comparisons and max/min (jax's unsigned and boolean dtypes)."""
        if not isinstance(a, Val) and not isinstance(b, Val):
            return self._fold_scalar(name, a, b, in_ty, unsigned)
        if isinstance(a, Val) and a.ty == "ptr" or isinstance(b, Val) and b.ty == "ptr":
            raise CaptureError(f"'{name}' on a pointer: a pointer from runtime_call can only be passed to another "
                               "runtime_call")
        x, y = self.w.val(a, in_ty), self.w.val(b, in_ty)
        if name in _ICMP:
            if in_ty == "f64":
                return self.w.op("i1", f'llvm.fcmp "{_FCMP[name]}" {x}, {y} : f64')
            pred = _ICMP[name].replace("s", "u", 1) if unsigned and _ICMP[name][0] == "s" else _ICMP[name]
            return self.w.op("i1", f'llvm.icmp "{pred}" {x}, {y} : {in_ty}')
        if name in ("max", "min"):
            if in_ty == "f64":
                pred = "ogt" if name == "max" else "olt"
            else:
                pred = ("u" if unsigned else "s") + ("gt" if name == "max" else "lt")
            cmp = "fcmp" if in_ty == "f64" else "icmp"
            c = self.w.op("i1", f'llvm.{cmp} "{pred}" {x}, {y} : {in_ty}')
            return self.w.op(in_ty, f"llvm.select {c}, {x}, {y} : i1, {in_ty}")
        if in_ty == "f64":
            if name not in _FLOAT_BINARY:
                raise CaptureError(f"'{name}' on floats is not supported in compiled programs")
            return self.w.op("f64", f"llvm.{_FLOAT_BINARY[name]} {x}, {y} : f64")
        if name not in _INT_BINARY:
            raise CaptureError(f"'{name}' on integers is not supported in compiled programs")
        op = _INT_BINARY[name]
        if name in ("div", "rem"):
            return self._divide(name, a, b, x, y, in_ty, unsigned)
        if name.startswith("shift_") and in_ty != "i1" and (isinstance(b, Val) or not 0 <= int(b) < bits_of(in_ty)):
            return self._shift(op, x, y, in_ty)
        return self.w.op(in_ty, f"llvm.{op} {x}, {y} : {in_ty}")

    def _shift(self, op: str, x: Val, y: Val, ty: str) -> Val:
        """A shift as XLA defines it for amounts LLVM leaves undefined (>= the width, or negative):
        0, or the sign for an arithmetic right shift."""
        width = bits_of(ty)
        big = self.binary("ge", y, width, ty, "i1", unsigned=True)
        safe = self.w.op(ty, f"llvm.select {big}, {self.w.const(0, ty)}, {y} : i1, {ty}")
        result = self.w.op(ty, f"llvm.{op} {x}, {safe} : {ty}")
        if op == "ashr":
            fallback = self.w.op(ty, f"llvm.ashr {x}, {self.w.const(width - 1, ty)} : {ty}")
        else:
            fallback = self.w.const(0, ty)
        return self.w.op(ty, f"llvm.select {big}, {fallback}, {result} : i1, {ty}")

    def _divide(self, name: str, a: Scalar, b: Scalar, x: Val, y: Val, ty: str, unsigned: bool) -> Val:
        """Integer ``div``/``rem`` as XLA defines them where LLVM's are undefined (and trap on x86):
        ``x / 0 = -1``, ``x % 0 = x``, ``MIN / -1 = MIN``, ``MIN % -1 = 0``."""
        op = ("u" if unsigned else "s") + ("div" if name == "div" else "rem")
        if not isinstance(b, Val) and int(b) != 0 and (unsigned or int(b) != -1):
            return self.w.op(ty, f"llvm.{op} {x}, {y} : {ty}")
        width = bits_of(ty)
        zero = self.binary("eq", y, 0, ty, "i1")
        bad = zero
        if not unsigned and ty != "i1":
            overflow = self.binary("and", self.binary("eq", x, -(1 << (width - 1)), ty, "i1"),
                                   self.binary("eq", y, -1, ty, "i1"), "i1", "i1")
            bad = self.binary("or", zero, overflow, "i1", "i1")
        safe = self.w.op(ty, f"llvm.select {bad}, {self.w.const(1, ty)}, {y} : i1, {ty}")
        result = self.w.op(ty, f"llvm.{op} {x}, {safe} : {ty}")
        fallback = self.w.const(-1, ty) if name == "div" else x
        return self.w.op(ty, f"llvm.select {zero}, {fallback}, {result} : i1, {ty}")

    @staticmethod
    def _fold_scalar(name: str, a: Any, b: Any, in_ty: str, unsigned: bool = False) -> Any:
        """``a <name> b`` on constants, with the wrap-around of ``in_ty``."""
        import operator as o
        if in_ty == "f64":
            fops = {"add": o.add, "sub": o.sub, "mul": o.mul, "div": o.truediv, "eq": o.eq, "ne": o.ne,
                    "lt": o.lt, "le": o.le, "gt": o.gt, "ge": o.ge, "max": max, "min": min,
                    "rem": lambda x, y: float(np.fmod(x, y))}
            if name not in fops:
                raise CaptureError(f"'{name}' on floats is not supported in compiled programs")
            return fops[name](float(a), float(b))
        width = 1 if in_ty == "i1" else int(in_ty[1:])
        mask = (1 << width) - 1

        def wrap(v: int) -> int:
            v &= mask
            return v - (1 << width) if not unsigned and in_ty != "i1" and v >> (width - 1) else v

        a, b = wrap(int(a)), wrap(int(b))
        if name in ("div", "rem"):
            if b == 0:  # as XLA: x / 0 = -1, x % 0 = x
                return wrap(-1) if name == "div" else a
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C: toward zero
            return wrap(q if name == "div" else a - q * b)
        if name.startswith("shift_") and not 0 <= b < width:  # as XLA: 0, or the sign
            return wrap(-1 if name == "shift_right_arithmetic" and a < 0 else 0)
        ops = {"add": o.add, "sub": o.sub, "mul": o.mul, "and": o.and_, "or": o.or_, "xor": o.xor,
               "eq": o.eq, "ne": o.ne, "lt": o.lt, "le": o.le, "gt": o.gt, "ge": o.ge, "max": max, "min": min,
               "shift_left": o.lshift, "shift_right_arithmetic": o.rshift,
               "shift_right_logical": lambda x, y: (x & mask) >> y}
        out = ops[name](a, b)
        if isinstance(out, bool):
            return out
        out = wrap(out)
        return bool(out) if in_ty == "i1" else out

    @staticmethod
    def _unsigned(dtype: Any) -> bool:
        return np.dtype(dtype).kind in "ub"

    def elementwise(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        in_ty = dtype_type(eqn.invars[0].aval.dtype)
        out_ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.invars[0].aval.dtype)
        a, b = invals
        if isinstance(a, Arr) or isinstance(b, Arr):
            ea = a.elems if isinstance(a, Arr) else None
            eb = b.elems if isinstance(b, Arr) else None
            n = len(ea if ea is not None else eb)
            shape = a.shape if isinstance(a, Arr) else b.shape
            return Arr(shape, [self.binary(name, ea[i] if ea is not None else a, eb[i] if eb is not None else b,
                                           in_ty, out_ty, unsigned=unsigned) for i in range(n)])
        return self.binary(name, a, b, in_ty, out_ty, unsigned=unsigned)

    def reduce(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        (x,) = invals
        if not isinstance(x, Arr) or len(x.shape) != 1:
            raise CaptureError(f"'{eqn.primitive.name}' is supported on 1-D arrays only")
        if eqn.params.get("axes") not in (None, (0,)):
            raise CaptureError(f"'{eqn.primitive.name}' over axes {eqn.params['axes']} is not supported")
        op = _REDUCE[eqn.primitive.name]
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.outvars[0].aval.dtype)
        if not x.elems:
            raise CaptureError(f"'{eqn.primitive.name}' of an empty array is not supported")
        acc = x.elems[0]
        for e in x.elems[1:]:
            acc = self.binary(op, acc, e, ty, ty, unsigned=unsigned)
        return acc

    def p_convert_element_type(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        new_dtype = np.dtype(eqn.params["new_dtype"])
        ty = dtype_type(new_dtype)
        src_dtype = np.dtype(eqn.invars[0].aval.dtype)
        src = dtype_type(src_dtype)
        signed = src_dtype.kind != "u"
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                # as jax converts (float -> int saturates, NaN -> 0)
                return to_python(jax.numpy.asarray(e, dtype=src_dtype).astype(new_dtype))
            if e.ty == "ptr":
                return e  # a runtime_call pointer passes through jax's casts untouched
            if e.ty == "f64" and ty != "f64":
                return self.w.float_to_int(e, ty, signed=new_dtype.kind != "u")
            return self.w.convert(self.w.val(e, src), ty, signed=signed)

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_not(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        ones = 1 if ty == "i1" else -1
        (x,) = invals
        if isinstance(x, Arr):
            return Arr(x.shape, [self.binary("xor", e, ones, ty, ty) if isinstance(e, Val) else
                                 (not e if ty == "i1" else ~e) for e in x.elems])
        if not isinstance(x, Val):
            return (not x) if ty == "i1" else ~x
        return self.binary("xor", x, ones, ty, ty)

    def _float_unary(self, eqn: jcore.JaxprEqn, invals: list[Any], intrinsic: str) -> Any:
        """A float function of one operand: ``llvm.call_intrinsic "llvm.<intrinsic>.f64"``."""
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        if dtype_type(eqn.outvars[0].aval.dtype) != "f64":
            raise CaptureError(f"'{eqn.primitive.name}' is supported on floats only")
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return to_python(np.asarray(self.fold(eqn, [e])))
            return self.w.intrinsic(f"llvm.{intrinsic}.f64", [self.w.val(e, "f64")], "f64")

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_clamp(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``clamp(lo, x, hi)`` = ``min(max(x, lo), hi)``."""
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.outvars[0].aval.dtype)
        lo, x, hi = (self.scalar(v, "clamp") if i != 1 else v for i, v in enumerate(invals))

        def one(e: Scalar) -> Scalar:
            return self.binary("min", self.binary("max", e, lo, ty, ty, unsigned=unsigned), hi, ty, ty,
                               unsigned=unsigned)

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_sqrt(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self._float_unary(eqn, invals, "sqrt")

    def p_integer_pow(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``x ** y`` for a constant integer ``y`` (square and multiply)."""
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        y = int(eqn.params["y"])
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.outvars[0].aval.dtype)
        if y < 0 and ty != "f64":
            raise CaptureError("integer ** negative power is not supported")
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return to_python(np.asarray(self.fold(eqn, [e])))
            result: Scalar = 1.0 if ty == "f64" else 1
            base: Scalar = e
            k = abs(y)
            while k:
                if k & 1:
                    result = self.binary("mul", result, base, ty, ty, unsigned=unsigned)
                k >>= 1
                if k:
                    base = self.binary("mul", base, base, ty, ty, unsigned=unsigned)
            if y < 0:
                result = self.binary("div", 1.0, result, ty, ty)
            return self.w.val(result, ty)

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_ceil(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self._float_unary(eqn, invals, "ceil")

    def p_floor(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self._float_unary(eqn, invals, "floor")

    def p_round(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        # rounding_method 0: half away from zero (llvm.round); 1: half to even (jnp.round)
        method = int(eqn.params.get("rounding_method", 0))
        return self._float_unary(eqn, invals, "roundeven" if method == 1 else "round")

    def p_abs(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        if ty == "f64" or all(_is_const(x) for x in invals):
            return self._float_unary(eqn, invals, "fabs")
        (x,) = invals
        if self._unsigned(eqn.outvars[0].aval.dtype):
            return x

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return abs(e)
            negative = self.binary("lt", e, 0, ty, "i1")
            return self.w.op(ty, f"llvm.select {negative}, {self.binary('sub', 0, e, ty, ty)}, {e} : i1, {ty}")

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_sign(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.outvars[0].aval.dtype)
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return to_python(np.asarray(self.fold(eqn, [e])))
            if unsigned:
                return self.w.convert(self.binary("ne", e, 0, ty, "i1"), ty, signed=False)
            pos = self.binary("gt", e, 0, ty, "i1")
            neg = self.binary("lt", e, 0, ty, "i1")
            zero_or_neg = self.w.op(ty, f"llvm.select {neg}, {self.w.val(-1, ty)}, {self.w.val(0, ty)} : i1, {ty}")
            out = self.w.op(ty, f"llvm.select {pos}, {self.w.val(1, ty)}, {zero_or_neg} : i1, {ty}")
            if ty == "f64":  # sign(NaN) = NaN, sign(-0.0) = -0.0: keep x where it is neither > 0 nor < 0
                either = self.binary("or", pos, neg, "i1", "i1")
                out = self.w.op(ty, f"llvm.select {either}, {out}, {e} : i1, {ty}")
            return out

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_scatter(self, eqn: jcore.JaxprEqn, invals: list[Any], combine: str | None = None) -> Any:
        """``x.at[i].set(v)`` (and ``.add``/``.mul``/``.min``/``.max``) on a 1-D array, one scalar index."""
        operand, indices, updates = invals
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        dn = eqn.params["dimension_numbers"]
        what = "x.at[i].set(v)" if combine is None else f"x.at[i].{combine}(v)"
        if (not isinstance(operand, Arr) or len(operand.shape) != 1 or tuple(dn.update_window_dims) != ()
                or tuple(dn.inserted_window_dims) != (0,) or tuple(dn.scatter_dims_to_operand_dims) != (0,)
                or np.prod(getattr(indices, "shape", ())) != 1 or np.prod(getattr(updates, "shape", ())) != 1):
            raise CaptureError(f"{what} is supported on 1-D arrays with one scalar index and one value only")
        index = self.scalar(indices, what)
        value = self.scalar(updates, what)
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.outvars[0].aval.dtype)
        index_unsigned = self._unsigned(eqn.invars[1].aval.dtype)
        n = len(operand.elems)
        clip = "CLIP" in str(eqn.params.get("mode"))

        def combined(old: Scalar) -> Scalar:
            if combine is None:
                return value
            return self.binary(combine, old, value, ty, ty, unsigned=unsigned)

        elems = list(operand.elems)
        if not isinstance(index, Val):
            k = int(index)
            if clip:
                k = min(max(k, 0), n - 1)
            if 0 <= k < n:  # out of bounds: dropped (FILL_OR_DROP)
                elems[k] = combined(elems[k])
            return Arr(operand.shape, elems)
        if clip:
            index = self.binary("max", index, 0, index.ty, index.ty, unsigned=index_unsigned)
            index = self.binary("min", index, n - 1, index.ty, index.ty, unsigned=index_unsigned)
        for k in range(n):
            hit = self.binary("eq", index, k, index.ty, "i1")
            new, old = self.w.val(combined(elems[k]), ty), self.w.val(elems[k], ty)
            elems[k] = self.w.op(ty, f"llvm.select {hit}, {new}, {old} : i1, {ty}")
        return Arr(operand.shape, elems)

    def p_scatter_add(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self.p_scatter(eqn, invals, "add")

    def p_scatter_mul(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self.p_scatter(eqn, invals, "mul")

    def p_scatter_min(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self.p_scatter(eqn, invals, "min")

    def p_scatter_max(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return self.p_scatter(eqn, invals, "max")

    def p_neg(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return -e
            if ty == "f64":
                return self.w.op("f64", f"llvm.fneg {self.w.val(e, 'f64')} : f64")
            return self.binary("sub", 0, e, ty, ty)

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_select_n(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        which, *cases = invals
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        n = len(cases[0].elems) if isinstance(cases[0], Arr) else None

        def pick(w: Scalar, options: list[Scalar]) -> Scalar:
            if not isinstance(w, Val):
                return options[int(w)]
            result = options[0]
            for k, option in enumerate(options[1:], start=1):
                if w.ty == "i1":
                    cond = w
                else:
                    cond = self.binary("eq", w, k, w.ty, "i1")
                a, b = self.w.val(option, ty), self.w.val(result, ty)
                result = self.w.op(ty, f"llvm.select {cond}, {a}, {b} : i1, {ty}")
            return result

        if n is None:
            return pick(self.scalar(which, "select"), cases)
        ws = which.elems if isinstance(which, Arr) else [which] * n
        return Arr(cases[0].shape, [pick(ws[i], [c.elems[i] for c in cases]) for i in range(n)])

    # arrays -------------------------------------------------------------------------
    def p_broadcast_in_dim(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        x = invals[0]
        shape = tuple(eqn.params["shape"])
        size = int(np.prod(shape))
        if isinstance(x, Arr):
            if len(x.elems) == size:
                return Arr(shape, list(x.elems))
            if len(x.elems) != 1:
                raise CaptureError(f"broadcasting shape {x.shape} to {shape} is not supported")
            x = x.elems[0]
        return Arr(shape, [x] * size)

    def p_reshape(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        x = invals[0]
        shape = tuple(eqn.params["new_sizes"])
        elems = x.elems if isinstance(x, Arr) else [x]
        return elems[0] if shape == () else Arr(shape, list(elems))

    def p_squeeze(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        x = invals[0]
        shape = tuple(eqn.outvars[0].aval.shape)
        return x.elems[0] if shape == () else Arr(shape, list(x.elems))

    def p_expand_dims(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        x = invals[0]
        elems = x.elems if isinstance(x, Arr) else [x]
        return Arr(tuple(eqn.outvars[0].aval.shape), list(elems))

    def p_concatenate(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if len(eqn.outvars[0].aval.shape) != 1:
            raise CaptureError("concatenate is supported for 1-D arrays only")
        elems = [e for x in invals for e in x.elems]
        return Arr((len(elems),), elems)

    def p_slice(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        (x,) = invals
        if len(x.shape) != 1:
            raise CaptureError("slicing is supported for 1-D arrays only")
        (start,), (limit,) = eqn.params["start_indices"], eqn.params["limit_indices"]
        strides = eqn.params.get("strides") or (1,)
        elems = x.elems[start:limit:strides[0]]
        return Arr((len(elems),), elems)

    def p_dynamic_slice(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        x, index = invals
        if len(x.shape) != 1:
            raise CaptureError("indexing with a run-time index is supported for 1-D arrays only")
        (size,) = eqn.params["slice_sizes"]
        n = len(x.elems)
        if not isinstance(index, Val):
            start = min(max(int(index), 0), n - size)  # jax clamps
            return Arr((size,), x.elems[start:start + size])
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        unsigned = self._unsigned(eqn.invars[1].aval.dtype)
        out = []
        for j in range(size):
            # element j of the window: x[clamp(index, 0, n - size) + j], chosen with a chain of selects
            result: Scalar = x.elems[j]
            for k in range(1, n - size + 1):
                hit = self.binary("ge", index, k, index.ty, "i1", unsigned=unsigned)
                a, b = self.w.val(x.elems[k + j], ty), self.w.val(result, ty)
                result = self.w.op(ty, f"llvm.select {hit}, {a}, {b} : i1, {ty}")
            out.append(result)
        return Arr((size,), out)

    def p_gather(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``x[indices]`` of a 1-D array (strided slices ``x[::2]`` and index arrays lower to it)."""
        if all(_is_const(x) for x in invals):
            return self.fold(eqn, invals)
        x, indices = invals
        dn = eqn.params["dimension_numbers"]
        if (not isinstance(x, Arr) or len(x.shape) != 1 or tuple(dn.offset_dims) != ()
                or tuple(dn.collapsed_slice_dims) != (0,) or tuple(dn.start_index_map) != (0,)
                or tuple(eqn.params["slice_sizes"]) != (1,)):
            raise CaptureError("indexing with an array of indices is supported on 1-D arrays only")
        idx = indices.elems if isinstance(indices, Arr) else [indices]
        out_aval = eqn.outvars[0].aval
        ty = dtype_type(out_aval.dtype)
        n = len(x.elems)
        fill = "FILL_OR_DROP" in str(eqn.params.get("mode"))
        unsigned = self._unsigned(eqn.invars[1].aval.dtype)
        fill_value: Any = None
        if fill:
            fv = eqn.params.get("fill_value")
            if fv is None:  # jax's defaults
                dt = np.dtype(out_aval.dtype)
                fv = (np.nan if dt.kind == "f" else True if dt.kind == "b" else
                      np.iinfo(dt).max if dt.kind == "u" else np.iinfo(dt).min)
            fill_value = to_python(np.asarray(fv, dtype=out_aval.dtype))

        def one(k: Scalar) -> Scalar:
            if not isinstance(k, Val):
                k = int(k)
                if 0 <= k < n:
                    return x.elems[k]
                return fill_value if fill else x.elems[min(max(k, 0), n - 1)]
            result: Scalar = x.elems[0]
            for j in range(1, n):  # clamp(k, 0, n - 1), as XLA does
                hit = self.binary("ge", k, j, k.ty, "i1", unsigned=unsigned)
                a, b = self.w.val(x.elems[j], ty), self.w.val(result, ty)
                result = self.w.op(ty, f"llvm.select {hit}, {a}, {b} : i1, {ty}")
            if fill:
                inside = self.binary("and", self.binary("ge", k, 0, k.ty, "i1", unsigned=unsigned),
                                     self.binary("lt", k, n, k.ty, "i1", unsigned=unsigned), "i1", "i1")
                a, b = self.w.val(result, ty), self.w.val(fill_value, ty)
                result = self.w.op(ty, f"llvm.select {inside}, {a}, {b} : i1, {ty}")
            return result

        elems = [one(k) for k in idx]
        shape = tuple(out_aval.shape)
        if int(np.prod(shape)) != len(elems):
            raise CaptureError("indexing with an array of indices is supported on 1-D arrays only")
        return elems[0] if shape == () else Arr(shape, elems)

    def p_iota(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        return to_python(np.arange(eqn.params["shape"][0]))

    def inline(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        closed = eqn.params["jaxpr"]
        jaxpr, consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, [])
        out = self.eval(jaxpr, [to_python(c) for c in consts], invals)
        return out if eqn.primitive.multiple_results else out[0]

    p_pjit = p_jit = p_closed_call = p_quantum_subroutine = inline

    def p_custom_jvp_call(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        closed = eqn.params["call_jaxpr"]
        return self.eval(closed.jaxpr, [to_python(c) for c in closed.consts], invals)

    # quantum ------------------------------------------------------------------------
    def wire(self, x: Any, what: str) -> Scalar:
        w = self.scalar(x, what)
        if isinstance(w, Val):
            return w
        if isinstance(w, (float, bool)) or not 0 <= int(w) < self.num_wires:
            raise CaptureError(f"{what}: wire {w!r} is not one of the device's wires 0..{self.num_wires - 1}")
        self.wires_used = max(self.wires_used, int(w) + 1)
        return int(w)

    def wire_val(self, w: Scalar) -> Val:
        return self.w.val(w, "i32")

    def operator(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        if name == "Prod":
            factors = []
            for x in invals:
                factors.extend(self.observable(x, "an observable product").factors)
            return Observable(tuple(factors))
        n_wires = eqn.params.get("n_wires")
        if n_wires is None:
            raise CaptureError(f"operator {name!r} is not supported in a compiled Backline QNode")
        params, wires = invals[: len(invals) - n_wires], invals[len(invals) - n_wires:]
        if not isinstance(eqn.outvars[0], jax.core.DropVar):
            # used, not applied: an observable, or a gate a branch returns (applied when it ends)
            return PendingOp(name, tuple(params), tuple(self.wire(x, name) for x in wires))
        self.apply(name, params, wires)
        return None

    def observable(self, x: Any, what: str) -> Observable:
        """``x`` (an operator result) as a Pauli product to measure."""
        if isinstance(x, Observable):
            return x
        if not isinstance(x, PendingOp):
            raise CaptureError(f"{what} needs an observable")
        if x.name not in PAULI_OBSERVABLES:
            raise CaptureError(f"observable {x.name!r}: only Pauli products (X, Y, Z, I) can be measured")
        return Observable(((PAULI_OBSERVABLES[x.name], x.wires[0]),))

    def apply(self, name: str, params: Sequence[Any], wires: Sequence[Any]) -> None:
        """Emit gate ``name`` on ``wires`` with ``params`` (angles)."""
        gate = GATES.get(name)
        if gate is None:
            raise CaptureError(f"gate {name!r} is not supported; supported gates: {', '.join(GATES)}")
        ws = [self.wire_val(self.wire(x, name)) for x in wires]
        if params:
            angles = [self.w.val(self.scalar(p, name), "f64") for p in params]
            self.w.emit(f'bquantum.gate "{gate}" {self.device}, {", ".join(map(str, ws))} '
                        f'({", ".join(map(str, angles))}) : !bquantum.device')
        else:
            self.w.emit(f'bquantum.gate "{gate}" {self.device}, {", ".join(map(str, ws))} : !bquantum.device')

    def p_measure(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if eqn.params.get("postselect") is not None:
            raise CaptureError("qml.measure(postselect=...) is not supported: compiled shots are not discarded")
        w = self.wire_val(self.wire(invals[0], "qml.measure"))
        m = self.w.op("i1", f"bquantum.measure {self.device}, {w} : !bquantum.device -> i1")
        if eqn.params.get("reset"):
            self.w.emit(f"bquantum.reset {self.device}, {w}")
        return self.w.convert(m, dtype_type(eqn.outvars[0].aval.dtype))

    def carried(self, values: list[Any], avals: Sequence[Any]) -> tuple[list[Val], Callable[[list[Val]], list[Any]]]:
        """Flatten loop/branch values into SSA values, and a function to rebuild them (by their
        avals: a scalar, or an :class:`Arr` of the aval's shape). Operator results (a branch's
        ``qml.X(0)``) carry nothing and come back as ``None``."""
        flat: list[Val] = []
        layout: list[tuple[int, ...] | None | bool] = []
        for value, aval in zip(values, avals, strict=True):
            if not hasattr(aval, "dtype"):  # an AbstractOperator or AbstractMeasurement
                if isinstance(value, MeasurementRecord):
                    raise CaptureError("measurements (qml.sample, qml.expval, ...) cannot cross a loop or a branch")
                if isinstance(value, Observable):
                    raise CaptureError("observables cannot cross a loop or a branch")
                layout.append(False)
                continue
            ty = dtype_type(aval.dtype)
            shape = tuple(aval.shape)
            if isinstance(value, (Observable, MeasurementRecord)):
                raise CaptureError("operators and measurements cannot cross a loop or a branch")
            elems = value.elems if isinstance(value, Arr) else [value] * max(int(np.prod(shape)), 1)
            if len(elems) != int(np.prod(shape)):
                raise CaptureError(f"a value of shape {getattr(value, 'shape', ())} where {shape} is expected")
            flat.extend(e if isinstance(e, Val) and e.ty == "ptr" else self.w.val(e, ty) for e in elems)
            layout.append(shape if shape else None)

        def rebuild(vals: list[Val]) -> list[Any]:
            out: list[Any] = []
            k = 0
            for shape in layout:
                if shape is False:
                    out.append(None)
                elif shape is None:
                    out.append(vals[k])
                    k += 1
                else:
                    n = int(np.prod(shape))
                    out.append(Arr(shape, list(vals[k:k + n])))
                    k += n
            return out

        return flat, rebuild

    def p_cond(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if "branches" in eqn.params:  # jax.lax.cond / jax.lax.switch (the same primitive name as qml.cond)
            return self._lax_cond(eqn, invals)
        branches = eqn.params["jaxpr_branches"]
        consts_slices = eqn.params["consts_slices"]
        args_slice = slice(*eqn.params["args_slice"])
        conditions = invals[: len(branches)]
        args = invals[args_slice]
        out_avals = [v.aval for v in eqn.outvars]

        # Constant conditions pick their branch now.
        live: list[tuple[Scalar, Any, list[Any]]] = []
        for cond, branch, cs in zip(conditions, branches, consts_slices, strict=True):
            c = self.scalar(cond, "qml.cond condition")
            if branch is None:
                continue
            consts = invals[slice(*cs)]
            if not isinstance(c, Val):
                if c:
                    live.append((True, branch, consts))
                    break
                continue
            live.append((c, branch, consts))
        return self._branches(live, args, out_avals)

    def _lax_cond(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``jax.lax.cond``/``switch``: branch ``clamp(index, 0, n - 1)`` of ``branches`` on the operands."""
        index, *args = invals
        index = self.scalar(index, "jax.lax.cond index")
        branches = eqn.params["branches"]
        n = len(branches)
        out_avals = [v.aval for v in eqn.outvars]
        live: list[tuple[Scalar, Any, list[Any]]] = []
        for k, closed in enumerate(branches):
            consts = [to_python(c) for c in closed.consts]
            if k == n - 1:
                live.append((True, closed.jaxpr, consts))
                break
            if not isinstance(index, Val):
                if int(index) <= k:
                    live.append((True, closed.jaxpr, consts))
                    break
                continue
            live.append((self.binary("le", index, k, index.ty, "i1"), closed.jaxpr, consts))
        return self._branches(live, args, out_avals)

    def _branches(self, live: list[tuple[Scalar, Any, list[Any]]], args: list[Any], out_avals: list[Any]) -> Any:
        """Run the first branch whose condition holds (conditions in order; ``True``: always)."""
        if not live:
            if any(hasattr(a, "dtype") for a in out_avals):
                return self._defaults(out_avals)
            return [None] * len(out_avals)
        if live[0][0] is True:
            return self._run_branch(live[0][1], live[0][2], args)

        merge = self.w.new_block()
        rebuild = None

        def close(outs: list[Any]) -> None:
            nonlocal rebuild
            flat, rebuild = self.carried(outs, out_avals)
            types = [v.ty for v in flat]
            if not merge.args:
                merge.args = [Val(f"%{merge.label}_a{i}", ty) for i, ty in enumerate(types)]
            elif [a.ty for a in merge.args] != types:
                raise CaptureError("qml.cond: the branches return values of different kinds (a pointer from "
                                   "runtime_call in one branch, a number in another)")
            self.w.br(merge, flat)

        for c, branch, consts in live:
            if c is True:
                close(self._run_branch(branch, consts, args))
                break
            then, other = self.w.new_block(), self.w.new_block()
            self.w.cond_br(self.w.convert(c, "i1"), then, other)
            self.w.set_block(then)
            close(self._run_branch(branch, consts, args))
            self.w.set_block(other)
        else:
            # no branch taken: jax's cond has no false branch only when there are no outputs
            if any(hasattr(a, "dtype") for a in out_avals):
                raise CaptureError("qml.cond with results needs a false_fn")
            close([None] * len(out_avals))
        self.w.set_block(merge)
        if rebuild is None:
            return [None] * len(out_avals)
        return rebuild(list(merge.args))

    def _defaults(self, avals: Sequence[Any]) -> list[Any]:
        raise CaptureError("qml.cond with results needs a branch that is always taken (a false_fn)")

    def _run_branch(self, branch: Any, consts: list[Any], args: list[Any]) -> list[Any]:
        jaxpr = branch.jaxpr if hasattr(branch, "jaxpr") else branch
        return self.eval(jaxpr, consts, args)

    def p_for_loop(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        start, stop, step = (self.scalar(x, "qml.for_loop bounds") for x in invals[:3])
        body = eqn.params["jaxpr_body_fn"]
        # the slices index the operands after the three bounds
        rest = invals[3:]
        consts = rest[slice(*eqn.params["consts_slice"])]
        args = rest[slice(*eqn.params["args_slice"])]
        shapes = eqn.params.get("abstract_shapes_slice")
        if shapes is not None and rest[slice(*shapes)]:
            raise CaptureError("qml.for_loop over dynamically shaped arrays is not supported")
        const_bounds = not any(isinstance(x, Val) for x in (start, stop, step))
        if const_bounds and step == 0:
            raise CaptureError("qml.for_loop: step must not be 0")
        if const_bounds and self.unroll_loops:
            for i in range(start, stop, step):
                args = self.eval(body, consts, [i, *args])
            return args
        avals = [v.aval for v in eqn.outvars]
        i0 = self.w.val(start, "i32")
        flat, rebuild = self.carried(args, avals)
        head = self.w.new_block(("i32", *(v.ty for v in flat)))
        self.w.br(head, [i0, *flat])
        self.w.set_block(head)
        i, *carried = head.args
        stop_v, step_v = self.w.val(stop, "i32"), self.w.val(step, "i32")
        if not isinstance(step, Val):
            go = self.binary("lt" if step > 0 else "gt", i, stop_v, "i32", "i1")
        else:
            up = self.binary("gt", step_v, 0, "i32", "i1")
            a, b = self.binary("lt", i, stop_v, "i32", "i1"), self.binary("gt", i, stop_v, "i32", "i1")
            go = self.w.op("i1", f"llvm.select {up}, {a}, {b} : i1, i1")
            # a run-time step of 0 runs no iteration (instead of looping forever)
            go = self.binary("and", go, self.binary("ne", step_v, 0, "i32", "i1"), "i1", "i1")
        body_block, exit_block = self.w.new_block(), self.w.new_block()
        self.w.cond_br(go, body_block, exit_block)
        self.w.set_block(body_block)
        new = self.eval(body, consts, [i, *rebuild(list(carried))])
        new_flat, _ = self.carried(new, avals)
        nxt = self.binary("add", i, step_v, "i32", "i32")
        self.w.br(head, [nxt, *new_flat])
        self.w.set_block(exit_block)
        return rebuild(list(carried))

    def p_while_loop(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        body, cond = eqn.params["jaxpr_body_fn"], eqn.params["jaxpr_cond_fn"]
        body_consts = invals[slice(*eqn.params["body_slice"])]
        cond_consts = invals[slice(*eqn.params["cond_slice"])]
        args = invals[slice(*eqn.params["args_slice"])]
        avals = [v.aval for v in eqn.outvars]
        flat, rebuild = self.carried(args, avals)
        head = self.w.new_block(tuple(v.ty for v in flat))
        self.w.br(head, flat)
        self.w.set_block(head)
        current = rebuild(list(head.args))
        (go,) = self.eval(cond, cond_consts, current)
        go = self.scalar(go, "qml.while_loop condition")
        body_block, exit_block = self.w.new_block(), self.w.new_block()
        if not isinstance(go, Val):
            if go:
                raise CaptureError("qml.while_loop: the condition is always true, so the loop never ends")
            self.w.br(exit_block)
        else:
            self.w.cond_br(self.w.convert(go, "i1"), body_block, exit_block)
            self.w.set_block(body_block)
            new = self.eval(body, body_consts, current)
            new_flat, _ = self.carried(new, avals)
            self.w.br(head, new_flat)
        self.w.set_block(exit_block)
        return current

    # measurements -------------------------------------------------------------------
    def record(self, value: Scalar, *, unsigned: bool = False) -> int:
        """Store ``value`` (an integer or a boolean) in the shot's output record; returns its column."""
        if isinstance(value, Val) and value.ty == "ptr":
            raise CaptureError("a pointer from runtime_call cannot be returned in a measurement; pass it to "
                               "another runtime_call")
        if isinstance(value, Val):
            self.records.append(self.w.convert(value, "i32", signed=not unsigned))
        else:
            self.records.append(self.w.val(value, "i32"))
        return len(self.records) - 1

    def record_value(self, value: Scalar, *, unsigned: bool = False) -> tuple[list[int], str]:
        """Store a classical value: an integer in one column (a 64-bit one in two), a float as
        its f64 bits in two; returns the columns and the kind (see :class:`MeasurementRecord`)."""
        if isinstance(value, Val) and value.ty == "ptr":
            raise CaptureError("a pointer from runtime_call cannot be returned in a measurement; pass it to "
                               "another runtime_call")
        if isinstance(value, float) or isinstance(value, Val) and value.ty == "f64":
            if isinstance(value, Val):
                word: Scalar = self.w.op("i64", f"llvm.bitcast {value} : f64 to i64")
            else:
                word = int(np.float64(value).view(np.int64))
            kind = "float"
        elif isinstance(value, Val) and value.ty == "i64" or (not isinstance(value, Val)
                                                                and not -2**31 <= int(value) < 2**31):
            word, kind = value, "int64"
        elif isinstance(value, Val) and value.ty == "i32" and unsigned:  # a uint32 may not fit an i32 column
            word, kind = self.w.convert(value, "i64", signed=False), "int64"
        else:
            return [self.record(value, unsigned=unsigned)], "int"
        if isinstance(word, Val):
            high = self.w.op("i64", f"llvm.lshr {word}, {self.w.const(32, 'i64')} : i64")
            low, high = self.w.convert(word, "i32"), self.w.convert(high, "i32")
        else:
            low, high = int(word) & 0xFFFFFFFF, (int(word) >> 32) & 0xFFFFFFFF
        return [self.record(low), self.record(high)], kind

    def final_outcome(self, wire: Scalar, basis: str, what: str) -> Val:
        """The end-of-circuit outcome of ``wire`` in ``basis`` (measured once per wire)."""
        if isinstance(wire, Val):
            raise CaptureError(f"{what}: terminal measurements need constant wires")
        seen = self.measured.get(wire)
        if seen is not None:
            if seen[0] != basis and basis != "I":
                raise CaptureError(f"{what}: wire {wire} is measured in the {seen[0]} basis and in the {basis} basis; "
                                   "measurements of one wire must commute")
            return seen[1]
        w = self.wire_val(wire)
        if basis == "X":
            self.w.emit(f'bquantum.gate "H" {self.device}, {w} : !bquantum.device')
        elif basis == "Y":
            self.w.emit(f'bquantum.gate "SDG" {self.device}, {w} : !bquantum.device')
            self.w.emit(f'bquantum.gate "H" {self.device}, {w} : !bquantum.device')
        m = self.w.op("i1", f"bquantum.measure {self.device}, {w} : !bquantum.device -> i1")
        self.measured[wire] = ("Z" if basis == "I" else basis, m)
        return m

    def measurement(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        kind, _, source = name.partition("_")
        if kind not in MEASUREMENTS:
            raise CaptureError(f"measurement {name!r} is not supported; use qml.sample, qml.expval, qml.var or "
                               "qml.probs")
        aval = eqn.outvars[0].aval
        if source == "wires":
            wires = [self.wire(x, f"qml.{kind}") for x in invals]
            if not wires:
                wires = list(range(self.num_wires))
                self.wires_used = self.num_wires
            columns = [self.record(self.final_outcome(w, "Z", f"qml.{kind}")) for w in wires]
            return MeasurementRecord(kind, columns, "bits", aval)
        if source == "obs":
            obs = self.observable(invals[0], f"qml.{kind}")
            if kind == "probs":
                raise CaptureError("qml.probs of an observable is not supported; give wires")
            columns = [self.record(self.final_outcome(w, p, f"qml.{kind}")) for p, w in obs.factors if p != "I"]
            return MeasurementRecord(kind, columns, "parity", aval)
        if source == "mcm":
            for x in invals:
                if isinstance(x, Arr) and x.shape not in ((), (1,)):
                    raise CaptureError(
                        f"qml.{kind} of an array of shape {x.shape}: PennyLane measures one classical value per "
                        f"operand; pass the elements as a list, e.g. qml.{kind}([a[0], a[1], ...])")
            values = [self.scalar(x, f"qml.{kind}") for x in invals]
            columns: list[int] = []
            kinds: list[str] = []
            for v, var in zip(values, eqn.invars, strict=True):
                cols, value_kind = self.record_value(v, unsigned=self._unsigned(var.aval.dtype))
                columns.extend(cols)
                kinds.append(value_kind)
            eigen = "bits" if kind == "probs" else "values"
            return MeasurementRecord(kind, columns, eigen, aval, tuple(kinds))
        raise CaptureError(f"measurement {name!r} is not supported")


def qnode_to_ir(jaxpr: jcore.Jaxpr, consts: Sequence[Any], arg_avals: Sequence[Any], *, num_wires: int,
                unroll_loops: bool, extensions: dict[str, Callable[..., Any]], name: str = "qnode") -> Translation:
    """Translate a QNode's ``qfunc_jaxpr`` (see the module docstring)."""
    w = FunctionWriter(name, [("dev", "ptr"), ("shots", "i64"), ("out", "ptr"), ("args", "ptr")])
    dev_ptr, shots, out, argbuf = w.params
    device = w.op("!bquantum.device", f"bquantum.device_from_ptr {dev_ptr} : !llvm.ptr -> !bquantum.device")
    interp = Interpreter(w, device, num_wires=num_wires, unroll_loops=unroll_loops, extensions=extensions)

    # Arguments: one 8-byte slot per element, loaded once before the shot loop.
    args: list[Any] = []
    kinds: list[str] = []
    slot = 0
    for aval in arg_avals:
        ty = dtype_type(aval.dtype)
        n = int(np.prod(aval.shape))
        if len(aval.shape) > 1:
            raise CaptureError("QNode arguments may be scalars or 1-D arrays")
        elems = []
        for _ in range(n):
            p = w.element(argbuf, slot, "i64")
            if ty == "f64":
                elems.append(w.load(p, "f64"))
                kinds.append("f")
            else:
                elems.append(w.convert(w.load(p, "i64"), ty))
                kinds.append("i")
            slot += 1
        args.append(Arr(tuple(aval.shape), elems) if aval.shape else elems[0])

    shot_head = w.new_block(("i64",))
    w.br(shot_head, [w.const(0, "i64")])
    w.set_block(shot_head)
    (i,) = shot_head.args
    done = w.op("i1", f'llvm.icmp "sge" {i}, {shots} : i64')
    body, exit_block = w.new_block(), w.new_block()
    w.cond_br(done, exit_block, body)
    w.set_block(body)
    w.emit(f"bquantum.reset_all {device}")
    interp.measured.clear()
    try:
        results = interp.eval(jaxpr, list(consts), args)
    except IRTypeError as e:
        raise CaptureError(f"{e} (in a compiled Backline QNode)") from e
    for r in results:
        if not isinstance(r, MeasurementRecord):
            raise CaptureError("a compiled QNode must return measurements (qml.sample, qml.expval, qml.var, "
                               "qml.probs)")
    width = len(interp.records)
    base = w.op("i64", f"llvm.mul {i}, {w.const(max(width, 1), 'i64')} : i64")
    for k, value in enumerate(interp.records):
        idx = w.op("i64", f"llvm.add {base}, {w.const(k, 'i64')} : i64")
        w.store(value, w.element(out, idx, "i32"), "i32")
    status = w.op("i32", "transport.take_status : i32")
    failed = w.op("i1", f'llvm.icmp "ne" {status}, {w.const(0, "i32")} : i32')
    fail_block, next_block = w.new_block(), w.new_block()
    w.cond_br(failed, fail_block, next_block)
    w.set_block(fail_block)
    w.ret(status)
    w.set_block(next_block)
    w.br(shot_head, [w.op("i64", f"llvm.add {i}, {w.const(1, 'i64')} : i64")])
    w.set_block(exit_block)
    w.ret(w.op("i32", "transport.take_status : i32"))
    return Translation(text=w.text(), width=width, measurements=list(results), num_args=slot, arg_kinds=kinds,
                       decodes=interp.decodes, libraries=interp.libraries, wires_used=interp.wires_used)
