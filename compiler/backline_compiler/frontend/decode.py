"""``decode``: one explicit decode round from inside a QNode on a :class:`~.device.Backline` device.

>>> import pennylane as qml
>>> from backline_compiler import decode
>>> decode([0, 1, 1])
Traceback (most recent call last):
...
backline_compiler.frontend.decode.DecodeError: decode() was called outside a Backline QNode: ...
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive

from backline_core._native import lib
from backline_core._placement import Placement
from backline_core._resolution import resolve

from ..dialects import bqec
from .capture import Interpreter
from .values import Arr, CaptureError, DecodeSite

#: Bytes of every frame the transport adds in front of a payload (``BL_FRAME_HEADER_BYTES``).
FRAME_HEADER_BYTES: int = lib.BL_FRAME_HEADER_BYTES
#: ``slot_bytes`` when a node's init_args do not set it (``BL_DEFAULT_SLOT_BYTES``).
DEFAULT_SLOT_BYTES: int = lib.BL_DEFAULT_SLOT_BYTES


class DecodeError(CaptureError):
    """A decode() call that cannot work: the message says what was wrong and what to do."""


_OUTSIDE = ("decode() was called outside a Backline QNode: call it inside a QNode whose device is "
            "backline_compiler.Backline(...), compiled with backline_compiler.qjit")

# The Backline device whose QNode is being traced (set by qjit), for the reply width.
_tracing: contextvars.ContextVar[Any] = contextvars.ContextVar("backline_tracing_device", default=None)


@contextlib.contextmanager
def tracing(device: Any) -> Iterator[None]:
    """Mark ``device`` as the Backline device of the QNode being traced."""
    token = _tracing.set(device)
    try:
        yield
    finally:
        _tracing.reset(token)


decode_p = Primitive("backline_decode")


@decode_p.def_impl
def _impl(*args: Any, **params: Any) -> Any:
    raise DecodeError(_OUTSIDE)


@decode_p.def_abstract_eval
def _abstract(syndrome: Any, *, coprocessor: str | None, decoder_id: int, correction_bits: int) -> Any:
    return jax.core.ShapedArray((correction_bits,), jnp.int32)


def choose_coprocessor(placement: Placement, coprocessor: str | None) -> str:
    """The coprocessor a decode runs on: the one named, or the placement's only one."""
    names = [node.name for node in placement.coprocessors]
    if not names:
        raise DecodeError("decode(): this Backline device has no coprocessor; add one to coprocessors=[...]")
    if coprocessor is None:
        if len(names) > 1:
            raise DecodeError(f"decode(): this Backline device has several coprocessors ({', '.join(names)}) "
                              "and none was chosen; pass coprocessor=<name>")
        return names[0]
    if coprocessor not in names:
        raise DecodeError(f"decode(coprocessor={coprocessor!r}): no such coprocessor; pass one of this Backline "
                          f"device's coprocessors: {', '.join(map(repr, names))}")
    return coprocessor


def max_payload(placement: Placement, key: str) -> int:
    """The largest message the session with coprocessor ``key`` carries (bytes)."""
    sizes = []
    for node in (placement.controller, placement.coprocessor(key)):
        sizes.append(int(node.init_args.get("slot_bytes", DEFAULT_SLOT_BYTES)))
    return min(sizes) - FRAME_HEADER_BYTES


def reply_bits(placement: Placement, key: str, decoder_id: int) -> int:
    """The correction width the coprocessor's function declares (``reply_bits``)."""
    fn = resolve(placement).coprocessor(key).function
    if decoder_id not in fn.decoder_ids:
        raise DecodeError(f"decode(decoder_id={decoder_id}): coprocessor {key!r} runs {fn.name!r}, which is bound "
                          f"to decoder_ids {list(fn.decoder_ids)}; pass one of those")
    bits = getattr(fn, "reply_bits", None)
    if bits is None:
        raise DecodeError(f"decode(): the function {fn.name!r} of coprocessor {key!r} does not say how wide its "
                          "reply is; pass correction_bits=<number of bits>")
    return int(bits)


def decode(syndrome: Any, *, coprocessor: str | None = None, decoder_id: int = 0,
           correction_bits: int | None = None) -> jax.Array:
    """Send ``syndrome`` (bits: mid-circuit measurements or values) to a coprocessor and wait for
    the correction; returns it as an ``int32`` array of 0/1 of ``correction_bits`` bits, each
    usable as a ``qml.cond`` condition.

    The syndrome is bit-packed (bit ``i`` in byte ``i // 8`` at bit ``i % 8``) and sent with
    ``decoder_id``; the reply is unpacked the same way. ``coprocessor`` names the placement's
    coprocessor (needed when it has several). ``correction_bits`` defaults to the width its
    function declares (``CoprocessorFunction.reply_bits``).
    """
    if not isinstance(decoder_id, int) or isinstance(decoder_id, bool) or not 0 <= decoder_id < lib.BL_MAX_DECODERS:
        raise DecodeError(f"decode(decoder_id={decoder_id!r}): decoder_id must be an int in "
                          f"[0, {lib.BL_MAX_DECODERS})")
    if coprocessor is not None and (not isinstance(coprocessor, str) or not coprocessor):
        raise DecodeError(f"decode(coprocessor={coprocessor!r}): give the coprocessor's name")
    if correction_bits is not None and (not isinstance(correction_bits, int) or isinstance(correction_bits, bool)
                                        or correction_bits <= 0):
        raise DecodeError(f"decode(correction_bits={correction_bits!r}): must be a positive int")
    device = _tracing.get()
    leaves = jax.tree_util.tree_leaves(syndrome)
    traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
    if device is None and not traced:
        raise DecodeError(_OUTSIDE)
    if device is not None:
        key = choose_coprocessor(device.placement, coprocessor)
        if correction_bits is None:
            correction_bits = reply_bits(device.placement, key, decoder_id)
    if correction_bits is None:
        raise DecodeError("decode(): no Backline device is being compiled here (the QNode's device is not a "
                          "Backline device, or the QNode is traced outside backline_compiler.qjit), so the correction "
                          "width is unknown. decode() runs only in a QNode on a backline_compiler.Backline device: "
                          "compile that QNode with backline_compiler.qjit (or, under plain program capture, pass "
                          "correction_bits=<number of bits>)")
    if not isinstance(correction_bits, int) or isinstance(correction_bits, bool) or correction_bits <= 0:
        raise DecodeError(f"decode(correction_bits={correction_bits!r}): must be a positive int")
    bits = jnp.ravel(jnp.asarray(syndrome)).astype(jnp.int32)
    if bits.shape[0] == 0:
        raise DecodeError("decode(): the syndrome is empty")
    return decode_p.bind(bits, coprocessor=coprocessor, decoder_id=decoder_id, correction_bits=correction_bits)


def lower_decode(placement: Placement | None) -> Any:
    """The interpreter's handler for ``decode_p``, for programs compiled with ``placement``."""

    def handler(interp: Interpreter, eqn: Any, invals: list[Any]) -> Any:
        (syndrome,) = invals
        params = eqn.params
        if placement is None:
            raise DecodeError(_OUTSIDE)
        key = choose_coprocessor(placement, params["coprocessor"])
        elems = syndrome.elems if isinstance(syndrome, Arr) else [syndrome]
        n_bytes = (len(elems) + 7) // 8
        c_bits = params["correction_bits"]
        c_bytes = (c_bits + 7) // 8
        limit = max_payload(placement, key)
        if n_bytes > limit or c_bytes > limit:
            raise DecodeError(
                f"decode(): a {len(elems)}-bit syndrome ({n_bytes} bytes) with a {c_bits}-bit correction "
                f"({c_bytes} bytes) is wider than the session with {key!r} allows ({limit} bytes per message); "
                f"raise slot_bytes in the nodes' init_args (a multiple of {lib.BL_SLOT_ALIGN}, payload = slot_bytes - "
                f"{FRAME_HEADER_BYTES})")
        w = interp.w
        syn = w.alloca("i8", n_bytes)
        corr = w.alloca("i8", c_bytes)
        for byte in range(n_bytes):
            acc: Any = 0
            for bit in range(8 * byte, min(8 * byte + 8, len(elems))):
                e = elems[bit]
                one = interp.binary("and", e if not hasattr(e, "ty") else w.convert(e, "i32"), 1, "i32", "i32")
                acc = interp.binary("or", acc, interp.binary("shift_left", one, bit % 8, "i32", "i32"), "i32", "i32")
            w.store(w.convert(w.val(acc, "i32"), "i8"), w.element(syn, byte, "i8"), "i8")
            # the reply may be shorter than the buffer; clear what a stale byte would poison
        for byte in range(c_bytes):
            w.store(0, w.element(corr, byte, "i8"), "i8")
        w.add(bqec.DecodeOp.explicit(syn.value, corr.value, decoder_id=params["decoder_id"], syndrome_bytes=n_bytes,
                                     correction_bytes=c_bytes, coprocessor=key))
        interp.decodes.append(DecodeSite(key, params["decoder_id"], n_bytes, c_bytes))
        loaded = [w.load(w.element(corr, b, "i8"), "i8") for b in range(c_bytes)]
        out = []
        for j in range(c_bits):
            byte = w.convert(loaded[j // 8], "i32", signed=False)
            out.append(interp.binary("and", interp.binary("shift_right_logical", byte, j % 8, "i32", "i32"), 1,
                                     "i32", "i32"))
        return Arr((c_bits,), out)

    return handler


