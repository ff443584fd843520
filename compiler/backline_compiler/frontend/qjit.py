"""``qjit``: capture a function of QNodes on Backline devices and run them compiled.

The function is traced with PennyLane program capture (plxpr, on the jax version PennyLane
pins); every QNode in it is translated to Backline IR with the device's placement, run
through the pass pipeline and JIT-compiled (once per argument shapes), and the classical
code around the QNodes is evaluated by jax.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import pennylane as qml
from jax.extend import core as jcore
from pennylane.capture.primitives import qnode_prim

from .capture import walk
from .decode import tracing
from .device import Backline
from .values import CaptureError


@contextlib.contextmanager
def _capture_enabled() -> Iterator[None]:
    was = qml.capture.enabled()
    if not was:
        qml.capture.enable()
    try:
        yield
    finally:
        if not was:
            qml.capture.disable()


class QJIT:
    """A function compiled by :func:`qjit`; call it like the original."""

    def __init__(self, fn: Callable[..., Any], *, keep_intermediate: str | None = None) -> None:
        self.fn = fn
        self.keep_intermediate = keep_intermediate
        self._traces: dict[Any, tuple[Any, Any]] = {}
        self.programs: list[Any] = []   # CompiledQNode per QNode, in the order they were compiled
        self.timings: dict[str, float] = {}
        functools.update_wrapper(self, fn)

    @property
    def device(self) -> Backline | None:
        dev = getattr(self.fn, "device", None)
        return dev if isinstance(dev, Backline) else None

    def trace(self, *args: Any) -> Any:
        """The closed jaxpr of the function for ``args`` (cached per shapes and dtypes)."""
        flat, tree = jax.tree_util.tree_flatten(args)
        key = (tree, tuple((jax.numpy.shape(a), jax.numpy.result_type(a)) for a in flat))
        hit = self._traces.get(key)
        if hit is None:
            t0 = time.perf_counter()
            with _capture_enabled(), tracing(self.device):
                closed, shape = jax.make_jaxpr(self.fn, return_shape=True)(*args)
            self.timings["trace_s"] = time.perf_counter() - t0
            hit = self._traces[key] = (closed, jax.tree_util.tree_structure(shape))
        return hit

    @property
    def mlir(self) -> str:
        """The frontend's IR of the (first) compiled QNode, before any pass."""
        if not self.programs:
            raise RuntimeError("nothing is compiled yet: call the function (or .compile(*args)) first")
        return self.programs[0].mlir

    @property
    def last_run(self) -> Any:
        """The :class:`~backline_compiler.frontend.program.RunStats` of the last QNode run."""
        return self.programs[-1].last_run if self.programs else None

    def compile(self, *args: Any) -> QJIT:
        """Trace and compile for ``args`` without running (for timing)."""
        closed, _ = self.trace(*args)
        env = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        for eqn in closed.jaxpr.eqns:
            if eqn.primitive is qnode_prim:
                self._program(eqn, env)
        return self

    def _program(self, eqn: jcore.JaxprEqn, env: dict[Any, Any]) -> Any:
        device = eqn.params["device"]
        if not isinstance(device, Backline):
            raise CaptureError(f"qjit compiles QNodes on a Backline device; this QNode runs on {device!r}")
        p = eqn.params
        n_shots, n_consts = p["shots_len"], p["n_consts"]
        jaxpr = p["qfunc_jaxpr"]
        avals = [v.aval for v in eqn.invars[n_shots + n_consts:]]
        consts_vars = eqn.invars[n_shots:n_shots + n_consts]
        if any(not isinstance(v, jcore.Literal) and v not in env for v in consts_vars):
            raise CaptureError("a QNode's closed-over values must be known before it runs")
        consts = [v.val if isinstance(v, jcore.Literal) else env[v] for v in consts_vars]
        program = device.compiled(jaxpr, consts, avals, keep_intermediate=self.keep_intermediate)
        if program not in self.programs:
            self.programs.append(program)
        return program

    def __call__(self, *args: Any) -> Any:
        closed, out_tree = self.trace(*args)
        flat_args = jax.tree_util.tree_leaves(args)
        outs = self._eval(closed.jaxpr, closed.consts, flat_args)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    def _eval(self, jaxpr: jcore.Jaxpr, consts: list[Any], args: list[Any]) -> list[Any]:
        def step(eqn: jcore.JaxprEqn, invals: list[Any], env: dict[Any, Any]) -> Any:
            if eqn.primitive is not qnode_prim:
                subfuns, params = eqn.primitive.get_bind_params(eqn.params)
                return eqn.primitive.bind(*subfuns, *invals, **params)
            shots = invals[: eqn.params["shots_len"]]
            if len(shots) != 1:
                raise CaptureError("a Backline QNode needs one shot count: qml.set_shots(N) (shot vectors are "
                                   "not supported)")
            program = self._program(eqn, env)
            return program.run(int(shots[0]), invals[eqn.params["shots_len"] + eqn.params["n_consts"]:])

        return walk(jaxpr, consts, args, step)


def qjit(fn: Callable[..., Any] | None = None, *, capture: bool = True,
         keep_intermediate: str | None = None) -> Any:
    """Compile ``fn`` (a QNode on a :class:`Backline` device, or a function calling such QNodes).

    ``capture`` must be True: programs are captured as plxpr, which carries loops and
    ``qml.cond`` on run-time values (tapes unroll loops and cannot condition on decode
    results). ``keep_intermediate`` names a folder for the IR after every stage.

    >>> import pennylane as qml
    >>> from backline_compiler import Backline, qjit
    >>> from backline_core import Controller
    >>> dev = Backline(controller=Controller(device=qml.device("null.qubit", wires=2)))
    >>> @qjit
    ... @qml.set_shots(4)
    ... @qml.qnode(dev)
    ... def bell():
    ...     qml.Hadamard(0)
    ...     qml.CNOT([0, 1])
    ...     return qml.sample(wires=[0, 1])
    >>> bell().shape
    (4, 2)
    """
    if fn is None:
        return functools.partial(qjit, capture=capture, keep_intermediate=keep_intermediate)
    if not capture:
        raise ValueError("qjit(capture=False): Backline compiles captured programs (plxpr) only; tapes cannot carry "
                         "qml.for_loop or qml.cond on decode results. Leave capture=True")
    return QJIT(fn, keep_intermediate=keep_intermediate)
