"""The classical half of the QNode interpreter: jax's arithmetic, comparison, conversion and
1-D array primitives on run-time values, written as ``llvm`` dialect ops.

:class:`ClassicalOps` is a base of :class:`~backline_compiler.frontend.capture.Interpreter`; a
handler ``p_<primitive>`` takes the equation and its input values and returns its outputs.
Integer division, remainder and shifts follow XLA's definitions, so a compiled program
computes what jax computes.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore
from xdsl.dialects import llvm
from xdsl.ir import Operation

from .ir_writer import FunctionWriter, Scalar, Val
from .values import Arr, CaptureError, bits_of, dtype_type, is_const, to_python

ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
INT_BINARY = {"add": llvm.AddOp, "sub": llvm.SubOp, "mul": llvm.MulOp, "div": llvm.SDivOp, "rem": llvm.SRemOp,
              "and": llvm.AndOp, "or": llvm.OrOp, "xor": llvm.XOrOp, "shift_left": llvm.ShlOp,
              "shift_right_logical": llvm.LShrOp, "shift_right_arithmetic": llvm.AShrOp}
FLOAT_BINARY = {"add": llvm.FAddOp, "sub": llvm.FSubOp, "mul": llvm.FMulOp, "div": llvm.FDivOp, "rem": llvm.FRemOp}
#: (unsigned, "div" or "rem") -> the llvm op
DIVIDE = {(False, "div"): llvm.SDivOp, (False, "rem"): llvm.SRemOp, (True, "div"): llvm.UDivOp,
          (True, "rem"): llvm.URemOp}
REDUCE = {"reduce_sum": "add", "reduce_or": "or", "reduce_and": "and", "reduce_xor": "xor",
           "reduce_max": "max", "reduce_min": "min"}
IGNORED = {"copy", "copy_p", "optimization_barrier"}
#: primitives whose PennyLane / jax spelling differs from the name, for error messages
KNOWN_NAMES = {"adjoint_transform": "qml.adjoint", "ctrl_transform": "qml.ctrl", "gather": "array[index array]",
                "dot_general": "jnp.dot / @", "argmax": "jnp.argmax", "argmin": "jnp.argmin", "cumsum": "jnp.cumsum",
                "while": "jax.lax.while_loop / fori_loop: use qml.while_loop or qml.for_loop",
                "scan": "jax.lax.scan / fori_loop: use qml.for_loop"}


class ClassicalOps:
    """Handlers of jax primitives on run-time values (see the module docstring)."""

    w: FunctionWriter

    def binary(self, name: str, a: Scalar, b: Scalar, in_ty: str, out_ty: str, *, unsigned: bool = False) -> Scalar:
        """``a <name> b`` on ``in_ty`` operands; ``unsigned`` picks unsigned division, remainder,
        comparisons and max/min (jax's unsigned and boolean dtypes)."""
        if not isinstance(a, Val) and not isinstance(b, Val):
            return self._fold_scalar(name, a, b, in_ty, unsigned)
        if isinstance(a, Val) and a.ty == "ptr" or isinstance(b, Val) and b.ty == "ptr":
            raise CaptureError(f"'{name}' on a pointer: a pointer from runtime_call can only be passed to another "
                               "runtime_call")
        x, y = self.w.val(a, in_ty), self.w.val(b, in_ty)
        if name in ICMP:
            if in_ty == "f64":
                return self.w.fcmp(FCMP[name], x, y)
            pred = ICMP[name].replace("s", "u", 1) if unsigned and ICMP[name][0] == "s" else ICMP[name]
            return self.w.icmp(pred, x, y)
        if name in ("max", "min"):
            if in_ty == "f64":
                c = self.w.fcmp("ogt" if name == "max" else "olt", x, y)
            else:
                c = self.w.icmp(("u" if unsigned else "s") + ("gt" if name == "max" else "lt"), x, y)
            return self.w.select(c, x, y)
        if in_ty == "f64":
            if name not in FLOAT_BINARY:
                raise CaptureError(f"'{name}' on floats is not supported in compiled programs")
            return self.w.arith(FLOAT_BINARY[name], x, y)
        if name not in INT_BINARY:
            raise CaptureError(f"'{name}' on integers is not supported in compiled programs")
        op = INT_BINARY[name]
        if name in ("div", "rem"):
            return self._divide(name, a, b, x, y, in_ty, unsigned)
        if name.startswith("shift_") and in_ty != "i1" and (isinstance(b, Val) or not 0 <= int(b) < bits_of(in_ty)):
            return self._shift(op, x, y, in_ty)
        return self.w.arith(op, x, y)

    def _shift(self, op: type[Operation], x: Val, y: Val, ty: str) -> Val:
        """A shift as XLA defines it for amounts LLVM leaves undefined (>= the width, or negative):
        0, or the sign for an arithmetic right shift."""
        width = bits_of(ty)
        big = self.binary("ge", y, width, ty, "i1", unsigned=True)
        safe = self.w.select(big, self.w.const(0, ty), y)
        result = self.w.arith(op, x, safe)
        if op is llvm.AShrOp:
            fallback = self.w.arith(llvm.AShrOp, x, self.w.const(width - 1, ty))
        else:
            fallback = self.w.const(0, ty)
        return self.w.select(big, fallback, result)

    def _divide(self, name: str, a: Scalar, b: Scalar, x: Val, y: Val, ty: str, unsigned: bool) -> Val:
        """Integer ``div``/``rem`` as XLA defines them where LLVM's are undefined (and trap on x86):
        ``x / 0 = -1``, ``x % 0 = x``, ``MIN / -1 = MIN``, ``MIN % -1 = 0``."""
        op = DIVIDE[unsigned, name]
        if not isinstance(b, Val) and int(b) != 0 and (unsigned or int(b) != -1):
            return self.w.arith(op, x, y)
        width = bits_of(ty)
        zero = self.binary("eq", y, 0, ty, "i1")
        bad = zero
        if not unsigned and ty != "i1":
            overflow = self.binary("and", self.binary("eq", x, -(1 << (width - 1)), ty, "i1"),
                                   self.binary("eq", y, -1, ty, "i1"), "i1", "i1")
            bad = self.binary("or", zero, overflow, "i1", "i1")
        safe = self.w.select(bad, self.w.const(1, ty), y)
        result = self.w.arith(op, x, safe)
        fallback = self.w.const(-1, ty) if name == "div" else x
        return self.w.select(zero, fallback, result)

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
        op = REDUCE[eqn.primitive.name]
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
        """A float function of one operand: the intrinsic ``llvm.<intrinsic>.f64``."""
        if all(is_const(x) for x in invals):
            return self.fold(eqn, invals)
        if dtype_type(eqn.outvars[0].aval.dtype) != "f64":
            raise CaptureError(f"'{eqn.primitive.name}' is supported on floats only")
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return to_python(np.asarray(self.fold(eqn, [e])))
            return self.w.intrinsic(f"{intrinsic}.f64", [self.w.val(e, "f64")], "f64")

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_clamp(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``clamp(lo, x, hi)`` = ``min(max(x, lo), hi)``."""
        if all(is_const(x) for x in invals):
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
        if all(is_const(x) for x in invals):
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
        if ty == "f64" or all(is_const(x) for x in invals):
            return self._float_unary(eqn, invals, "fabs")
        (x,) = invals
        if self._unsigned(eqn.outvars[0].aval.dtype):
            return x

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return abs(e)
            negative = self.binary("lt", e, 0, ty, "i1")
            return self.w.select(negative, self.binary("sub", 0, e, ty, ty), e)

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_sign(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if all(is_const(x) for x in invals):
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
            zero_or_neg = self.w.select(neg, self.w.val(-1, ty), self.w.val(0, ty))
            out = self.w.select(pos, self.w.val(1, ty), zero_or_neg)
            if ty == "f64":  # sign(NaN) = NaN, sign(-0.0) = -0.0: keep x where it is neither > 0 nor < 0
                either = self.binary("or", pos, neg, "i1", "i1")
                out = self.w.select(either, out, e)
            return out

        return Arr(x.shape, [one(e) for e in x.elems]) if isinstance(x, Arr) else one(x)

    def p_scatter(self, eqn: jcore.JaxprEqn, invals: list[Any], combine: str | None = None) -> Any:
        """``x.at[i].set(v)`` (and ``.add``/``.mul``/``.min``/``.max``) on a 1-D array, one scalar index."""
        operand, indices, updates = invals
        if all(is_const(x) for x in invals):
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
            elems[k] = self.w.select(hit, new, old)
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
        if all(is_const(x) for x in invals):
            return self.fold(eqn, invals)
        ty = dtype_type(eqn.outvars[0].aval.dtype)
        (x,) = invals

        def one(e: Scalar) -> Scalar:
            if not isinstance(e, Val):
                return -e
            if ty == "f64":
                return self.w.result(llvm.FNegOp(self.w.val(e, "f64").value), "f64")
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
                result = self.w.select(cond, a, b)
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
                result = self.w.select(hit, a, b)
            out.append(result)
        return Arr((size,), out)

    def p_gather(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        """``x[indices]`` of a 1-D array (strided slices ``x[::2]`` and index arrays lower to it)."""
        if all(is_const(x) for x in invals):
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
                result = self.w.select(hit, a, b)
            if fill:
                inside = self.binary("and", self.binary("ge", k, 0, k.ty, "i1", unsigned=unsigned),
                                     self.binary("lt", k, n, k.ty, "i1", unsigned=unsigned), "i1", "i1")
                a, b = self.w.val(result, ty), self.w.val(fill_value, ty)
                result = self.w.select(inside, a, b)
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
