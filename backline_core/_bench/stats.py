"""The one summary of a series of measurements (round trips, decode times, engine cycles)
that every bench reports: `backline bench`, the FPGA controller's bench, the BP+OSD decoder's
bench and the compiler frontend's RTT summary.

>>> s = summary([1.0, 2.0, 3.0, 4.0], "us")
>>> s["rounds"], s["mean_us"], s["median_us"], s["min_us"], s["max_us"]
(4, 2.5, 2.5, 1.0, 4.0)
>>> sorted(summary([7], ""))[:4]
['max', 'mean', 'median', 'min']
>>> summary([], "ns")
{'rounds': 0}
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: the tail percentiles reported: (key, percentile)
PERCENTILES = (("p99", 99.0), ("p999", 99.9), ("p9999", 99.99), ("p99999", 99.999))


def summary(values: Any, unit: str = "ns") -> dict[str, float]:
    """``rounds`` (how many values) and the mean, standard deviation (``std``), min, median,
    max and :data:`PERCENTILES` of ``values``, each key suffixed ``_<unit>`` (none for
    ``unit=""``); only ``rounds`` when there are no values."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return {"rounds": 0}
    suffix = f"_{unit}" if unit else ""
    out: dict[str, float] = {"rounds": int(x.size)}
    figures = {"mean": x.mean(), "std": x.std(), "min": x.min(), "median": np.median(x), "max": x.max()}
    figures.update(zip((key for key, _ in PERCENTILES), np.percentile(x, [q for _, q in PERCENTILES])))
    out.update((f"{key}{suffix}", float(value)) for key, value in figures.items())
    return out


def wilson(errors: int | None, n: int) -> list[float] | None:
    """The 95 % Wilson interval of ``errors`` in ``n`` (None: not counted, or no shots).

    >>> wilson(0, 100)[0], round(wilson(0, 100)[1], 4)
    (0.0, 0.037)
    """
    if errors is None or n == 0:
        return None
    z, p = 1.959963984540054, errors / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 (or n) errors the bound is exactly 0 (or 1); the formula leaves rounding residue there
    return [0.0 if errors == 0 else max(0.0, centre - half), 1.0 if errors == n else min(1.0, centre + half)]

