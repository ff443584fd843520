"""``runtime_declare`` / ``runtime_call``: call a C symbol at an exact point of a compiled QNode.

The lowest-level route of the paper (``qp.runtime_call``): the call becomes an ``llvm.call``
in the program; the symbol resolves at JIT time against ``library`` (loaded into the
process), the core runtime (``libbackline``) or the process itself.

Signatures are C-like: ``"(ptr, u32) -> u64"``. Parameter types:

========== ======================================================================
``i8`` .. ``i64``, ``u8`` .. ``u64``  integers (jax ints/bools or Python ints)
``f64``    a float (``double``)
``bool``   an ``i1``
``ptr``    a pointer another ``runtime_call`` returned, or ``None`` (NULL)
``str``    a Python string, passed as a NUL-terminated constant
``buf``    a 1-D array of bytes, copied to a stack buffer whose address is passed
``out``    the address of a zeroed buffer of ``out_bytes`` bytes, returned after the call
========== ======================================================================

Results: ``void``, an integer type, ``f64``, ``bool`` or ``ptr``. 64-bit integer results need
``jax_enable_x64``; a ``ptr`` result is only good as an argument of another ``runtime_call``.

>>> from backline_compiler import runtime_declare
>>> runtime_declare("bl_post", "(ptr) -> i32").params
('ptr',)
>>> runtime_declare("bl_post", "(ptr, u33) -> i32")
Traceback (most recent call last):
...
backline_compiler.frontend.runtime_call.SignatureError: runtime_declare('bl_post', '(ptr, u33) -> i32'): unknown parameter type 'u33' (parameter 2); known: i8, i16, i32, i64, u8, u16, u32, u64, f64, bool, ptr, str, buf, out
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from .capture import Interpreter
from .ir_writer import Val
from .values import Arr, CaptureError, dtype_type

#: type -> IR type; u* share the i* representation (LLVM integers are signless).
_IR = {"i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u8": "i8", "u16": "i16", "u32": "i32",
       "u64": "i64", "f64": "f64", "bool": "i1", "ptr": "ptr", "str": "ptr", "buf": "ptr", "out": "ptr"}
PARAM_TYPES = tuple(_IR)
RESULT_TYPES = ("void", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f64", "bool", "ptr")
_SIGNATURE = re.compile(r"^\s*\((?P<params>[^()]*)\)\s*->\s*(?P<result>\w+)\s*$")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SignatureError(ValueError):
    """A bad runtime_declare signature or a runtime_call that does not match it."""


@dataclass(frozen=True)
class RuntimeFunction:
    """A C function declared with :func:`runtime_declare`."""

    symbol: str
    params: tuple[str, ...]
    result: str
    library: str | None = None

    @property
    def signature(self) -> str:
        return f"({', '.join(self.params)}) -> {self.result}"


def runtime_declare(symbol: str, signature: str, *, library: str | os.PathLike[str] | None = None
                    ) -> RuntimeFunction:
    """Declare the C function ``symbol`` with ``signature`` (see the module docstring)."""
    where = f"runtime_declare({symbol!r}, {signature!r})"
    if not isinstance(symbol, str) or not _SYMBOL.match(symbol):
        raise SignatureError(f"{where}: {symbol!r} is not a C identifier")
    m = _SIGNATURE.match(signature) if isinstance(signature, str) else None
    if m is None:
        raise SignatureError(f"{where}: write the signature as '(type, ...) -> type', e.g. '(ptr, u32) -> i32'")
    text = m.group("params").strip()
    params = tuple(p.strip() for p in text.split(",")) if text else ()
    for i, p in enumerate(params, start=1):
        if not p:
            raise SignatureError(f"{where}: parameter {i} is empty; separate the parameter types with single commas")
        if p not in _IR:
            raise SignatureError(f"{where}: unknown parameter type {p!r} (parameter {i}); known: "
                                 f"{', '.join(PARAM_TYPES)}")
    if params.count("out") > 1:
        raise SignatureError(f"{where}: at most one 'out' parameter")
    result = m.group("result")
    if result not in RESULT_TYPES:
        raise SignatureError(f"{where}: unknown result type {result!r}; known: {', '.join(RESULT_TYPES)}")
    if library is not None:
        library = os.fspath(library)
        if not os.path.exists(library):
            raise SignatureError(f"{where}: library {library!r} does not exist")
    return RuntimeFunction(symbol, params, result, library)


runtime_call_p = Primitive("backline_runtime_call")
runtime_call_p.multiple_results = True


@runtime_call_p.def_impl
def _impl(*args: Any, **params: Any) -> Any:
    raise CaptureError("runtime_call() was called outside a compiled QNode: call it inside a QNode on a "
                       "Backline device, compiled with backline_compiler.qjit")


def _jax_dtype(t: str) -> Any:
    if t in ("i64", "u64"):
        if not jax.config.jax_enable_x64:
            raise SignatureError(f"an {t} result needs 64-bit jax values: jax.config.update('jax_enable_x64', True), "
                                 "or declare the result as i32/u32")
        return jnp.int64
    return {"i8": jnp.int8, "u8": jnp.uint8, "i16": jnp.int16, "u16": jnp.uint16, "i32": jnp.int32,
            "u32": jnp.uint32, "f64": jnp.float32 if not jax.config.jax_enable_x64 else jnp.float64,
            "bool": jnp.bool_, "ptr": jnp.int32}[t]


@runtime_call_p.def_abstract_eval
def _abstract(*args: Any, function: RuntimeFunction, static: tuple[Any, ...], out_bytes: int | None) -> Any:
    outs = []
    if function.result != "void":
        outs.append(jax.core.ShapedArray((), _jax_dtype(function.result)))
    if out_bytes is not None:
        outs.append(jax.core.ShapedArray((out_bytes,), jnp.uint8))
    return outs


def runtime_call(function: RuntimeFunction, *args: Any, out_bytes: int | None = None) -> Any:
    """Call ``function`` with ``args`` at this point of the compiled QNode.

    Returns the result, the ``out`` buffer (``uint8[out_bytes]``), both as a tuple, or
    ``None`` for a ``void`` function without ``out``.
    """
    if not isinstance(function, RuntimeFunction):
        raise SignatureError(f"runtime_call: the first argument must come from runtime_declare(...), "
                             f"not {function!r}")
    where = f"runtime_call({function.symbol}: {function.signature})"
    visible = [p for p in function.params if p != "out"]
    if len(args) != len(visible):
        raise SignatureError(f"{where}: {len(args)} arguments given, {len(visible)} expected")
    if ("out" in function.params) != (out_bytes is not None):
        raise SignatureError(f"{where}: " + ("give out_bytes=<size> for its 'out' parameter" if out_bytes is None
                                             else "out_bytes= needs an 'out' parameter in the signature"))
    if out_bytes is not None and (not isinstance(out_bytes, int) or isinstance(out_bytes, bool) or out_bytes <= 0):
        raise SignatureError(f"{where}: out_bytes must be a positive int, not {out_bytes!r}")
    static: list[Any] = []
    dynamic: list[Any] = []
    for i, (p, a) in enumerate(zip(visible, args, strict=True), start=1):
        if p == "str":
            if not isinstance(a, str):
                raise SignatureError(f"{where}: argument {i} is 'str' and needs a Python string, not {a!r}")
            static.append(a)
        elif p == "ptr" and a is None:
            static.append(None)
        elif isinstance(a, str):
            raise SignatureError(f"{where}: argument {i} is {p!r}; a string only goes to a 'str' parameter")
        elif p == "buf":
            arr = jnp.ravel(jnp.asarray(a))
            if arr.shape[0] == 0:
                raise SignatureError(f"{where}: argument {i} ('buf') is empty")
            if jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.complexfloating):
                raise SignatureError(f"{where}: argument {i} ('buf') holds bytes, not {arr.dtype} values; convert "
                                     "it first, e.g. x.astype(jnp.uint8)")
            static.append(("dynamic", len(dynamic)))
            dynamic.append(arr)
        else:
            if np.ndim(a) != 0:
                raise SignatureError(f"{where}: argument {i} ({p!r}) must be a scalar, got shape {np.shape(a)}")
            value = jnp.asarray(a)
            if p == "ptr" and not isinstance(a, jax.core.Tracer):
                raise SignatureError(f"{where}: argument {i} is 'ptr' and takes a pointer another runtime_call "
                                     f"returned, or None, not {a!r}")
            if p != "f64" and not jnp.issubdtype(value.dtype, jnp.integer) and value.dtype != jnp.bool_:
                raise SignatureError(f"{where}: argument {i} is {p!r} but a {value.dtype} value was given; convert it "
                                     "explicitly first, e.g. jnp.int32(x)")
            static.append(("dynamic", len(dynamic)))
            dynamic.append(value)
    out = runtime_call_p.bind(*dynamic, function=function, static=tuple(static), out_bytes=out_bytes)
    if not out:
        return None
    return out[0] if len(out) == 1 else tuple(out)


def check_symbol(fn: RuntimeFunction) -> None:
    """Raise :class:`SignatureError` unless ``fn.symbol`` resolves where the JIT will look for it:
    ``fn.library``, the core runtime (libbackline) or the process (an unresolved symbol would be
    called at address 0)."""
    import ctypes

    from backline_core._abi import get_library

    where = f"runtime_call({fn.symbol}: {fn.signature})"
    if fn.library is not None:
        try:
            ctypes.CDLL(fn.library)
        except OSError as e:
            raise SignatureError(f"{where}: library {fn.library!r} cannot be loaded: {e}") from None
    for lib in ([fn.library] if fn.library else []) + [get_library(), None]:  # None: the process
        try:
            getattr(ctypes.CDLL(lib), fn.symbol)
            return
        except (OSError, AttributeError):
            continue
    places = (f"library {fn.library!r}, " if fn.library else "") + "libbackline or this process"
    hint = "" if fn.library else "; if it lives in a shared library, pass runtime_declare(..., library=PATH)"
    raise SignatureError(f"{where}: symbol {fn.symbol!r} is not defined in {places} (check its name, e.g. with "
                         f"nm -D{hint})")


def lower_runtime_call(interp: Interpreter, eqn: Any, invals: list[Any]) -> list[Any]:
    """The interpreter's handler for ``runtime_call_p``: an ``llvm.call``."""
    fn: RuntimeFunction = eqn.params["function"]
    static = eqn.params["static"]
    out_bytes = eqn.params["out_bytes"]
    w = interp.w
    where = f"runtime_call({fn.symbol})"
    check_symbol(fn)
    args: list[Val] = []
    out_buf = None
    visible = iter(static)
    for p in fn.params:
        if p == "out":
            out_buf = w.alloca("i8", out_bytes)
            for b in range(out_bytes):
                w.store(0, w.element(out_buf, b, "i8"), "i8")
            args.append(out_buf)
            continue
        s = next(visible)
        if p == "str":
            args.append(w.cstring(s))
        elif s is None:
            args.append(w.null())
        else:
            value = invals[s[1]]
            if p == "buf":
                elems = value.elems if isinstance(value, Arr) else [value]
                buf = w.alloca("i8", len(elems))
                for k, e in enumerate(elems):
                    v = w.convert(e, "i8") if isinstance(e, Val) else int(e) & 0xFF
                    w.store(v, w.element(buf, k, "i8"), "i8")
                args.append(buf)
            elif p == "ptr":
                if not (isinstance(value, Val) and value.ty == "ptr"):
                    raise SignatureError(f"{where}: a 'ptr' parameter takes a pointer another runtime_call "
                                         "returned, or None")
                args.append(value)
            else:
                scalar = interp.scalar(value, where)
                if isinstance(scalar, Val) and scalar.ty == "ptr":
                    raise SignatureError(f"{where}: a pointer passed where {p!r} is expected")
                # extend as C converts: by the signedness of the argument's own type
                signed = not Interpreter._unsigned(eqn.invars[s[1]].aval.dtype)
                args.append(w.convert(scalar, _IR[p], signed=signed) if isinstance(scalar, Val)
                            else w.const(scalar, _IR[p]))
    result = "void" if fn.result == "void" else _IR[fn.result]
    w.declare(fn.symbol, [a.ty for a in args], result)
    if fn.library and fn.library not in interp.libraries:
        interp.libraries.append(fn.library)
    ret = w.call(fn.symbol, args, result)
    outs: list[Any] = []
    if ret is not None:
        aval = eqn.outvars[0].aval
        outs.append(ret if ret.ty == "ptr" else w.convert(ret, dtype_type(aval.dtype), signed=not fn.result.startswith("u")))
    if out_buf is not None:
        outs.append(Arr((out_bytes,), [w.load(w.element(out_buf, b, "i8"), "i8") for b in range(out_bytes)]))
    return outs


