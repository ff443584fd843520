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
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore
from xdsl.dialects import llvm

from ..dialects import bquantum, transport
from .classical import ICMP, IGNORED, INT_BINARY, KNOWN_NAMES, REDUCE, ClassicalOps
from .ir_writer import FunctionWriter, IRTypeError, Scalar, Val
from .values import (
    Arr,
    CaptureError,
    DecodeSite,
    MeasurementRecord,
    Observable,
    PendingOp,
    Translation,
    dtype_type,
    from_python,
    is_const,
    to_python,
)

#: PennyLane operator name -> bquantum gate name.
GATES: dict[str, str] = {
    "Identity": "I", "PauliX": "X", "PauliY": "Y", "PauliZ": "Z", "Hadamard": "H", "S": "S",
    "SX": "SX", "CNOT": "CNOT", "CZ": "CZ", "SWAP": "SWAP", "RX": "RX", "RY": "RY", "RZ": "RZ",
}
#: Observables a measurement may name (each is rotated into the Z basis first).
PAULI_OBSERVABLES = {"PauliX": "X", "PauliY": "Y", "PauliZ": "Z", "Identity": "I"}
#: Measurement primitives translated here, by the kind of result they reduce to.
MEASUREMENTS = {"sample", "expval", "var", "probs"}


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


class Interpreter(ClassicalOps):
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
        if name in IGNORED:
            return invals[0] if not prim.multiple_results else invals
        if all(is_const(x) for x in invals) and kind == "":
            return self.fold(eqn, invals)
        if name in INT_BINARY or name in ICMP or name in ("max", "min"):
            return self.elementwise(eqn, invals)
        if name in REDUCE:
            return self.reduce(eqn, invals)
        known = KNOWN_NAMES.get(name)
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
        angles = [self.w.val(self.scalar(p, name), "f64") for p in params]
        self.gate(gate, ws, angles)

    def gate(self, gate: str, wires: Sequence[Val], params: Sequence[Val] = ()) -> None:
        """Emit ``bquantum.gate`` ``gate`` on ``wires`` (``i32``) with angles ``params`` (``f64``)."""
        self.w.add(bquantum.GateOp(gate, self.device.value, [w.value for w in wires], [p.value for p in params]))

    def measure(self, wire: Val) -> Val:
        """Emit ``bquantum.measure`` of ``wire``; the ``i1`` outcome."""
        return self.w.result(bquantum.MeasureOp(self.device.value, wire.value), "i1")

    def p_measure(self, eqn: jcore.JaxprEqn, invals: list[Any]) -> Any:
        if eqn.params.get("postselect") is not None:
            raise CaptureError("qml.measure(postselect=...) is not supported: compiled shots are not discarded")
        w = self.wire_val(self.wire(invals[0], "qml.measure"))
        m = self.measure(w)
        if eqn.params.get("reset"):
            self.w.add(bquantum.ResetOp(self.device.value, w.value))
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
                self.w.add_args(merge, types)
            elif [a.ty for a in self.w.args(merge)] != types:
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
        return rebuild(self.w.args(merge))

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
        i, *carried = self.w.args(head)
        stop_v, step_v = self.w.val(stop, "i32"), self.w.val(step, "i32")
        if not isinstance(step, Val):
            go = self.binary("lt" if step > 0 else "gt", i, stop_v, "i32", "i1")
        else:
            up = self.binary("gt", step_v, 0, "i32", "i1")
            a, b = self.binary("lt", i, stop_v, "i32", "i1"), self.binary("gt", i, stop_v, "i32", "i1")
            go = self.w.select(up, a, b)
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
        current = rebuild(self.w.args(head))
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
                word: Scalar = self.w.bitcast(value, "i64")
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
            high = self.w.arith(llvm.LShrOp, word, self.w.const(32, "i64"))
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
            self.gate("H", [w])
        elif basis == "Y":
            self.gate("SDG", [w])
            self.gate("H", [w])
        m = self.measure(w)
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
    device = w.result(bquantum.DeviceFromPtrOp(dev_ptr.value))
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
    (i,) = w.args(shot_head)
    done = w.icmp("sge", i, shots)
    body, exit_block = w.new_block(), w.new_block()
    w.cond_br(done, exit_block, body)
    w.set_block(body)
    w.add(bquantum.ResetAllOp(device.value))
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
    base = w.arith(llvm.MulOp, i, w.const(max(width, 1), "i64"))
    for k, value in enumerate(interp.records):
        idx = w.arith(llvm.AddOp, base, w.const(k, "i64"))
        w.store(value, w.element(out, idx, "i32"), "i32")
    status = w.result(transport.TakeStatusOp(), "i32")
    failed = w.icmp("ne", status, w.const(0, "i32"))
    fail_block, next_block = w.new_block(), w.new_block()
    w.cond_br(failed, fail_block, next_block)
    w.set_block(fail_block)
    w.ret(status)
    w.set_block(next_block)
    w.br(shot_head, [w.arith(llvm.AddOp, i, w.const(1, "i64"))])
    w.set_block(exit_block)
    w.ret(w.result(transport.TakeStatusOp(), "i32"))
    return Translation(module=w.module(), width=width, measurements=list(results), num_args=slot, arg_kinds=kinds,
                       decodes=interp.decodes, libraries=interp.libraries, wires_used=interp.wires_used)
