"""What the QNode interpreter computes with: values, arrays, observables, measurement records.

Scalars are :class:`~backline_compiler.frontend.ir_writer.Val` (an SSA value) or Python
constants; arrays are :class:`Arr` of scalars. ``to_python``/``from_python`` move constants
between jax/numpy and this form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from .ir_writer import Scalar, Val


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

    module: ModuleOp                          # string globals, declarations, the function (lowered in place later)
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


def is_const(x: Any) -> bool:
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
