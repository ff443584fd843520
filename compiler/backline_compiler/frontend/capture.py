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
* integer, boolean and float scalar arithmetic, comparisons and ``select``, and 1-D arrays of
  them (``jnp.array``, indexing, slicing, ``concatenate``, sums and reductions); whatever has
  only constant inputs is evaluated by JAX at compile time;
* :func:`~backline_compiler.frontend.decode.decode` (an explicit ``bqec.decode``) and
  :func:`~backline_compiler.frontend.runtime_call.runtime_call` (an ``llvm.call``);
* measurements: ``qml.sample``, ``qml.expval``, ``qml.var`` and ``qml.probs`` of wires, of
  Pauli-product observables (rotated into the Z basis) or of classical values. They are
  measured where they appear (at the end of the circuit) and reduced in Python
  (:mod:`~backline_compiler.frontend.results`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from .ir_writer import FunctionWriter, Scalar, Val

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


@dataclass
class MeasurementRecord:
    """One measurement process of the QNode: its kind and the output columns it reads."""

    kind: str           # sample | expval | var | probs
    columns: list[int]  # indices into the per-shot record
    eigen: str          # "bits" (0/1 outcomes), "parity" (a Pauli product's +-1) or "values" (classical)
    aval: Any = None    # PennyLane's AbstractMeasurement: abstract_eval(wires, shots) -> (shape, dtype)


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
    return not isinstance(x, (Val, Observable, MeasurementRecord))


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
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            if isinstance(v, jcore.Literal):
                return to_python(v.val)
            return env[v]

        for var, value in zip(jaxpr.constvars, consts, strict=True):
            env[var] = value
        for var, value in zip(jaxpr.invars, args, strict=True):
            env[var] = value
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            out = self.equation(eqn, invals)
            if not eqn.primitive.multiple_results:
                out = [out]
            for var, value in zip(eqn.outvars, out, strict=True):
                if not isinstance(var, jax.core.DropVar):
                    env[var] = value
        return [read(v) for v in jaxpr.outvars]

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
        handler = getattr(self, f"p_{name}", None)
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
        raise CaptureError(
            f"'{name}' is not supported in a compiled Backline QNode (with run-time operands); "
            "see docs/frontend.md for what is"
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
        if isinstance(x, (Observable, MeasurementRecord)):
            raise CaptureError(f"{what}: expected a number, got an operator or a measurement")
        return x

    def binary(self, name: str, a: Scalar, b: Scalar, in_ty: str, out_ty: str) -> Scalar:
        if not isinstance(a, Val) and not isinstance(b, Val):
            return self._fold_scalar(name, a, b, in_ty)
        if isinstance(a, Val) and a.ty == "ptr" or isinstance(b, Val) and b.ty == "ptr":
            raise CaptureError(f"'{name}' on a pointer: a pointer from runtime_call can only be passed to another "
                               "runtime_call")
        x, y = self.w.val(a, in_ty), self.w.val(b, in_ty)
        if name in _ICMP:
            if in_ty == "f64":
                return self.w.op("i1", f'llvm.fcmp "{_FCMP[name]}" {x}, {y} : f64')
            return self.w.op("i1", f'llvm.icmp "{_ICMP[name]}" {x}, {y} : {in_ty}')
        if name in ("max", "min"):
            pred = ("ogt" if name == "max" else "olt") if in_ty == "f64" else ("sgt" if name == "max" else "slt")
            cmp = "fcmp" if in_ty == "f64" else "icmp"
            c = self.w.op("i1", f'llvm.{cmp} "{pred}" {x}, {y} : {in_ty}')
            return self.w.op(in_ty, f"llvm.select {c}, {x}, {y} : i1, {in_ty}")
        if in_ty == "f64":
            if name not in _FLOAT_BINARY:
                raise CaptureError(f"'{name}' on floats is not supported in compiled programs")
            return self.w.op("f64", f"llvm.{_FLOAT_BINARY[name]} {x}, {y} : f64")
        return self.w.op(in_ty, f"llvm.{_INT_BINARY[name]} {x}, {y} : {in_ty}")

    @staticmethod
    def _fold_scalar(name: str, a: Any, b: Any, in_ty: str) -> Any:
        import operator as o
        ops = {"add": o.add, "sub": o.sub, "mul": o.mul, "and": o.and_, "or": o.or_, "xor": o.xor,
               "eq": o.eq, "ne": o.ne, "lt": o.lt, "le": o.le, "gt": o.gt, "ge": o.ge, "max": max, "min": min,
               "shift_left": o.lshift, "shift_right_arithmetic": o.rshift, "shift_right_logical": o.rshift}
        if name == "div":
            return a / b if in_ty == "f64" else int(a / b)
        if name == "rem":
            return float(np.fmod(a, b)) if in_ty == "f64" else int(np.fmod(a, b))
        return ops[name](a, b)

    def elementwise(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        in_ty = dtype_type(eqn.invars[0].aval.dtype)
        out_ty = dtype_type(eqn.outvars[0].aval.dtype)
        a, b = invals
        if isinstance(a, Arr) or isinstance(b, Arr):
            ea = a.elems if isinstance(a, Arr) else None
            eb = b.elems if isinstance(b, Arr) else None
            n = len(ea if ea is not None else eb)
            shape = a.shape if isinstance(a, Arr) else b.shape
            return Arr(shape, [self.binary(name, ea[i] if ea is not None else a, eb[i] if eb is not None else b,
                                           in_ty, out_ty) for i in range(n)])
        return self.binary(name, a, b, in_ty, out_ty)

    def reduce(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        (x,) = invals
        if not isinstance(x, Arr) or len(x.shape) != 1:
            raise CaptureError(f"'{eqn.primitive.name}' is supported on 1-D arrays only")
        op = _REDUCE[eqn.primitive.name]
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        acc = x.elems[0]
        for e in x.elems[1:]:
            acc = self.binary(op, acc, e, ty, ty)
        return acc

    def p_convert_element_type(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        ty = dtype_type(eqn.params["new_dtype"])
        src = dtype_type(eqn.invars[0].aval.dtype)
        signed = np.dtype(eqn.invars[0].aval.dtype).kind != "u"
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return bool(e) if ty == "i1" else (float(e) if ty == "f64" else int(e))
            if e.ty == "ptr":
                return e  # a runtime_call pointer passes through jax's casts untouched
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

    def p_neg(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        (x,) = invals
        if ty == "f64":
            return self.w.op("f64", f"llvm.fneg {self.w.val(x, 'f64')} : f64")
        return self.binary("sub", 0, x, ty, ty)

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
        out = []
        for j in range(size):
            # element j of the window: x[clamp(index) + j], chosen with a chain of selects
            result: Scalar = x.elems[j]
            for k in range(1, n - size + 1):
                hit = self.binary("eq", index, k, index.ty, "i1")
                a, b = self.w.val(x.elems[k + j], ty), self.w.val(result, ty)
                result = self.w.op(ty, f"llvm.select {hit}, {a}, {b} : i1, {ty}")
            out.append(result)
        return Arr((size,), out)

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
        if isinstance(w, float) or isinstance(w, bool) or not 0 <= int(w) < self.num_wires:
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
                if not isinstance(x, Observable):
                    raise CaptureError("an observable product may only contain Pauli observables")
                factors.extend(x.factors)
            return Observable(tuple(factors))
        n_wires = eqn.params.get("n_wires")
        if n_wires is None:
            raise CaptureError(f"operator {name!r} is not supported in a compiled Backline QNode")
        params, wires = invals[: len(invals) - n_wires], invals[len(invals) - n_wires:]
        if not isinstance(eqn.outvars[0], jax.core.DropVar):
            # an operator that is used, not applied: an observable of a measurement
            if name not in PAULI_OBSERVABLES:
                raise CaptureError(f"observable {name!r}: only Pauli products (X, Y, Z, I) can be measured")
            return Observable(((PAULI_OBSERVABLES[name], self.wire(wires[0], name)),))
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
        return None

    def p_measure(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if eqn.params.get("postselect") is not None:
            raise CaptureError("qml.measure(postselect=...) is not supported: compiled shots are not discarded")
        w = self.wire_val(self.wire(invals[0], "qml.measure"))
        m = self.w.op("i1", f"bquantum.measure {self.device}, {w} : !bquantum.device -> i1")
        if eqn.params.get("reset"):
            self.w.emit(f"bquantum.reset {self.device}, {w}")
        return self.w.convert(m, dtype_type(eqn.outvars[0].aval.dtype))

    def carried(self, values: list[Any], avals: Sequence[Any]) -> tuple[list[Val], Callable[[list[Val]], list[Any]]]:
        """Flatten loop/branch values into SSA values, and a function to rebuild them."""
        flat: list[Val] = []
        layout: list[tuple[int, ...] | None] = []
        for value, aval in zip(values, avals, strict=True):
            ty = dtype_type(aval.dtype)
            if isinstance(value, Arr):
                flat.extend(e if isinstance(e, Val) and e.ty == "ptr" else self.w.val(e, ty) for e in value.elems)
                layout.append(value.shape)
            else:
                if isinstance(value, (Observable, MeasurementRecord)):
                    raise CaptureError("operators and measurements cannot cross a loop or a branch")
                flat.append(value if isinstance(value, Val) and value.ty == "ptr" else self.w.val(value, ty))
                layout.append(None)

        def rebuild(vals: list[Val]) -> list[Any]:
            out, k = [], 0
            for shape in layout:
                if shape is None:
                    out.append(vals[k])
                    k += 1
                else:
                    n = int(np.prod(shape))
                    out.append(Arr(shape, list(vals[k:k + n])))
                    k += n
            return out

        return flat, rebuild

    def p_cond(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
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
        if not live:
            return [None] * len(eqn.outvars) if not out_avals else self._defaults(out_avals)
        if live[0][0] is True:
            return self._run_branch(live[0][1], live[0][2], args)

        merge_types = tuple(dtype_type(a.dtype) for a in out_avals for _ in range(int(np.prod(a.shape or (1,)))))
        merge = self.w.new_block(merge_types)
        rebuild = None
        for c, branch, consts in live:
            if c is True:
                outs = self._run_branch(branch, consts, args)
                flat, rebuild = self.carried(outs, out_avals)
                self.w.br(merge, flat)
                break
            then, other = self.w.new_block(), self.w.new_block()
            self.w.cond_br(self.w.convert(c, "i1"), then, other)
            self.w.set_block(then)
            outs = self._run_branch(branch, consts, args)
            flat, rebuild = self.carried(outs, out_avals)
            self.w.br(merge, flat)
            self.w.set_block(other)
        else:
            # no branch taken: jax's cond has no false branch only when there are no outputs
            if out_avals:
                raise CaptureError("qml.cond with results needs a false_fn")
            self.w.br(merge, [])
        self.w.set_block(merge)
        if rebuild is None:
            return []
        return rebuild(list(merge.args))

    def _defaults(self, avals: Sequence[Any]) -> list[Any]:
        raise CaptureError("qml.cond with results needs a branch that is always taken (a false_fn)")

    def _run_branch(self, branch: Any, consts: list[Any], args: list[Any]) -> list[Any]:
        jaxpr = branch.jaxpr if hasattr(branch, "jaxpr") else branch
        return self.eval(jaxpr, consts, args)

    def p_for_loop(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        start, stop, step = (self.scalar(x, "qml.for_loop bounds") for x in invals[:3])
        body = eqn.params["jaxpr_body_fn"]
        consts = invals[slice(*eqn.params["consts_slice"])]
        args = invals[slice(*eqn.params["args_slice"])]
        if eqn.params.get("abstract_shapes_slice") and eqn.params["abstract_shapes_slice"][1]:
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
    def record(self, value: Scalar) -> int:
        """Store ``value`` in the shot's output record; returns its column."""
        if isinstance(value, Val) and value.ty == "ptr":
            raise CaptureError("a pointer from runtime_call cannot be returned")
        self.records.append(self.w.val(value, "i32"))
        return len(self.records) - 1

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
            (obs,) = invals
            if not isinstance(obs, Observable):
                raise CaptureError(f"qml.{kind} needs an observable")
            if kind == "probs":
                raise CaptureError("qml.probs of an observable is not supported; give wires")
            columns = [self.record(self.final_outcome(w, p, f"qml.{kind}")) for p, w in obs.factors if p != "I"]
            return MeasurementRecord(kind, columns, "parity", aval)
        if source == "mcm":
            values = [self.scalar(x, f"qml.{kind}") for x in invals]
            columns = [self.record(v) for v in values]
            eigen = "bits" if kind == "probs" else "values"
            return MeasurementRecord(kind, columns, eigen, aval)
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
    results = interp.eval(jaxpr, list(consts), args)
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
