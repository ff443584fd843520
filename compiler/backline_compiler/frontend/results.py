"""Reduce the per-shot records of a compiled QNode to PennyLane's measurement results."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .values import MeasurementRecord


def columns(record: MeasurementRecord, raw: np.ndarray) -> np.ndarray:
    """The record's values per shot (shots x values): ``int64``, or ``float64`` if one is a float.
    A 64-bit integer or a float takes two columns (the low and the high word of its bits)."""
    cols = raw[:, record.columns]
    if all(kind == "int" for kind in record.kinds):
        return cols.astype(np.int64)
    dtype = np.float64 if "float" in record.kinds else np.int64
    out = np.empty((len(raw), len(record.kinds)), dtype=dtype)
    k = 0
    for j, kind in enumerate(record.kinds):
        if kind == "int":
            out[:, j] = cols[:, k]
            k += 1
            continue
        words = cols[:, k:k + 2].astype(np.uint32).astype(np.uint64)
        bits = words[:, 0] | (words[:, 1] << np.uint64(32))
        out[:, j] = bits.view(np.float64) if kind == "float" else bits.view(np.int64)
        k += 2
    return out


def reduce(record: MeasurementRecord, raw: np.ndarray, num_wires: int) -> jnp.ndarray:
    """The result of one measurement process from ``raw`` (shots x width, int32)."""
    shots = len(raw)
    cols = columns(record, raw)
    if record.eigen == "parity":
        values = np.prod(1 - 2 * cols.astype(np.int64), axis=1) if cols.shape[1] else np.ones(shots)
    elif record.eigen == "bits" and record.kind in ("expval", "var"):
        values = 1 - 2 * cols[:, 0].astype(np.int64)
    else:
        values = cols if cols.shape[1] != 1 else cols[:, 0]
    if record.kind == "sample":
        out = values
    elif record.kind == "expval":
        out = np.mean(values)
    elif record.kind == "var":
        out = np.var(values)
    elif record.kind == "probs":
        bits = (cols != 0).astype(np.int64)
        n = bits.shape[1]
        index = bits @ (1 << np.arange(n - 1, -1, -1)) if n else np.zeros(shots, dtype=np.int64)
        out = np.bincount(index, minlength=1 << n) / max(shots, 1)
    else:  # pragma: no cover - capture only produces the kinds above
        raise ValueError(f"unknown measurement kind {record.kind!r}")
    shape, dtype = record.aval.abstract_eval(num_device_wires=num_wires, shots=shots)
    return jnp.asarray(np.asarray(out).reshape(shape), dtype=dtype)


def reduce_all(records: Sequence[MeasurementRecord], raw: np.ndarray, num_wires: int) -> list[jnp.ndarray]:
    return [reduce(r, raw, num_wires) for r in records]
