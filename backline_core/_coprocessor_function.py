"""CoprocessorFunction: what a coprocessor runs on every message it receives.

Every function has one native signature (``bl_coprocessor_fn`` in ``backline.h``)::

    int32_t fn(void *ctx, uint32_t decoder_id,
               const uint8_t *in, uint32_t in_len,
               uint8_t *out, uint32_t out_cap, uint32_t *out_len);

A function is either a symbol in a shared library (the fast path), optionally with
an ``init_symbol`` that builds ``ctx`` from ``context`` bytes once, or a plain
Python callable ``fn(decoder_id: int, payload: bytes) -> bytes`` (the slow path: every
message takes the GIL). A function with state another process must rebuild is a
module-level ``python_init(context: bytes)``, called once where the function is bound, as a
native ``init_symbol`` is: it returns the Python callable, or a :class:`NativeFunction` (a
native ``bl_coprocessor_fn`` and its context that Python put together, e.g. a native function
that calls other bound functions), which then runs without the GIL.

>>> from backline_core import CoprocessorFunction
>>> f = CoprocessorFunction(name="double", python=lambda d, p: bytes(2 * b % 256 for b in p))
>>> f.is_python, f.decoder_ids
(True, (0,))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._native import lib
from ._errors import PlacementError

#: decoder_id must be below this (the size of a session's dispatch table; BL_MAX_DECODERS).
MAX_DECODERS: int = lib.BL_MAX_DECODERS


@dataclass(frozen=True, eq=False)
class NativeFunction:
    """What a ``python_init`` may return instead of a callable: a native function and its context.

    ``fn`` and ``ctx`` are addresses (ints) of a ``bl_coprocessor_fn`` and of its context;
    ``keep`` holds whatever they need alive; ``close()`` (if given) frees them once the
    function is unbound."""

    fn: int
    ctx: int
    keep: Any = None
    close: Callable[[], None] | None = None


@dataclass(frozen=True, kw_only=True)
class CoprocessorFunction:
    """A per-message function bound to one or more decoder_ids of a coprocessor."""

    name: str
    library: str | None = None
    symbol: str | None = None
    decoder_ids: tuple[int, ...] = (0,)
    context: bytes = b""
    init_symbol: str | None = None
    fini_symbol: str | None = None
    python: Callable[[int, bytes], bytes] | None = None
    #: builds the Python callable from ``context`` where the function is bound (instead of ``python``)
    python_init: Callable[[bytes], Callable[[int, bytes], bytes]] | None = None
    #: Width in bits of the reply, when the function knows it (a decoder's correction mask
    #: of n qubits: n). Lets callers size and unpack replies without knowing the code.
    reply_bits: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlacementError("CoprocessorFunction needs a non-empty name")
        try:  # an int would be 5 ids or none: only an iterable of ids is one
            ids = tuple(self.decoder_ids)
        except TypeError:
            raise PlacementError(f"CoprocessorFunction {self.name!r}: decoder_ids={self.decoder_ids!r} must be a "
                                 "tuple of ints, e.g. (0,) or (0, 1)") from None
        object.__setattr__(self, "decoder_ids", ids)
        if not isinstance(self.context, (bytes, bytearray, memoryview)):  # bytes(5) is five zero bytes
            raise PlacementError(f"CoprocessorFunction {self.name!r}: context must be bytes, not "
                                 f"{type(self.context).__name__}")
        object.__setattr__(self, "context", bytes(self.context))
        if not ids:
            raise PlacementError(f"CoprocessorFunction {self.name!r}: decoder_ids is empty; bind at least one id")
        for i in ids:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < MAX_DECODERS:
                raise PlacementError(
                    f"CoprocessorFunction {self.name!r}: decoder_id {i if not isinstance(i, int) or abs(i) < 10**9 else '(too large)'!r} must be an int in [0, {MAX_DECODERS})"
                )
        if len(set(ids)) != len(ids):
            raise PlacementError(f"CoprocessorFunction {self.name!r}: decoder_ids {ids} repeat an id")
        native = self.library is not None or self.symbol is not None
        if self.python is not None and self.python_init is not None:
            raise PlacementError(f"CoprocessorFunction {self.name!r}: give python= (the callable) or python_init= "
                                 "(what builds it from context), not both")
        if self.python is not None or self.python_init is not None:
            if native or self.init_symbol or self.fini_symbol or (self.context and self.python is not None):
                raise PlacementError(
                    f"CoprocessorFunction {self.name!r}: give either python=/python_init= or library=/symbol=, "
                    "not both (context= goes with python_init=)"
                )
            given = self.python if self.python is not None else self.python_init
            if not callable(given):
                which = "python" if self.python is not None else "python_init"
                raise PlacementError(f"CoprocessorFunction {self.name!r}: {which}={given!r} is not callable")
        elif not (self.library and self.symbol):
            raise PlacementError(
                f"CoprocessorFunction {self.name!r}: a native function needs both library= (path of a shared "
                "library) and symbol= (the exported bl_coprocessor_fn); for prototyping pass python=callable"
            )
        if (self.init_symbol is None) != (self.fini_symbol is None) and self.fini_symbol is not None:
            raise PlacementError(f"CoprocessorFunction {self.name!r}: fini_symbol given without init_symbol")
        if self.reply_bits is not None and (
            not isinstance(self.reply_bits, int) or isinstance(self.reply_bits, bool) or self.reply_bits < 1
            or self.reply_bits > 8 * lib.BL_MAX_SLOT_BYTES
        ):
            raise PlacementError(
                f"CoprocessorFunction {self.name!r}: reply_bits={self.reply_bits if not isinstance(self.reply_bits, int) or self.reply_bits < 10**9 else '(too large)'!r} must be a positive int "
                "(the width of the reply in bits, e.g. n for a correction mask of n qubits) or None when unknown"
            )

    @property
    def is_python(self) -> bool:
        """True for the Python-callable slow path."""
        return self.python is not None or self.python_init is not None

    def python_callable(self) -> Callable[[int, bytes], bytes] | NativeFunction:
        """The per-message Python callable (``python``, or what ``python_init`` builds from ``context``:
        a callable or a :class:`NativeFunction`)."""
        if self.python is not None:
            return self.python
        if self.python_init is None:
            raise PlacementError(f"CoprocessorFunction {self.name!r} is native, not Python")
        fn = self.python_init(self.context)
        if isinstance(fn, NativeFunction):
            return fn
        if not callable(fn):
            raise PlacementError(f"CoprocessorFunction {self.name!r}: python_init returned {type(fn).__name__}, "
                                 "not a callable fn(decoder_id, payload) -> bytes")
        return fn

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; Python callables are stored as ``module:qualname``."""
        out: dict[str, Any] = {"name": self.name, "decoder_ids": list(self.decoder_ids)}
        if self.python is not None:
            out["python"] = _import_path(self.python, self.name)
        elif self.python_init is not None:
            out["python_init"] = _import_path(self.python_init, self.name)
            if self.context:
                out["context"] = self.context.hex()
        else:
            out["library"], out["symbol"] = self.library, self.symbol
            if self.init_symbol:
                out["init_symbol"] = self.init_symbol
            if self.fini_symbol:
                out["fini_symbol"] = self.fini_symbol
            if self.context:
                out["context"] = self.context.hex()
        if self.reply_bits is not None:
            out["reply_bits"] = self.reply_bits
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CoprocessorFunction:
        """Inverse of :meth:`to_dict`."""
        known = {"name", "decoder_ids", "python", "python_init", "library", "symbol", "init_symbol", "fini_symbol",
                 "context", "reply_bits"}
        unknown = set(data) - known
        if unknown:
            raise PlacementError(f"unknown CoprocessorFunction fields {sorted(unknown)}; known: {sorted(known)}")
        kwargs = dict(data)
        kwargs["decoder_ids"] = tuple(kwargs.get("decoder_ids", (0,)))
        if "context" in kwargs:
            kwargs["context"] = bytes.fromhex(kwargs["context"])
        for key in ("python", "python_init"):
            if key in kwargs:
                kwargs[key] = load_import_path(kwargs[key])
        return cls(**kwargs)


def _import_path(fn: Callable[..., Any], name: str) -> str:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname:
        raise PlacementError(
            f"CoprocessorFunction {name!r}: its Python callable {fn!r} cannot be serialized; "
            "use a module-level function so it can be named as module:qualname"
        )
    return f"{module}:{qualname}"


def load_import_path(path: str) -> Callable[..., Any]:
    """Import ``module:qualname`` and return the object."""
    module, sep, qualname = path.partition(":")
    if not sep or not module or not qualname:
        raise PlacementError(f"{path!r} is not an import path of the form module:qualname")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise PlacementError(f"cannot import coprocessor function {path!r}: {exc}") from exc
    return obj
