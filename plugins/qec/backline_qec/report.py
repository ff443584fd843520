"""What the streams' results report in common: latency quantiles and the logical error rate with its
95 % interval. Its own module so that stream.py, parallel.py and tiered.py can all import it
(stream.py imports the other two)."""

from __future__ import annotations

from typing import Any

import numpy as np

from backline_core.sdk import wilson

_QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9, "max": 100.0}


def quantiles(values: Any, *keys: str) -> dict[str, float]:
    """The named quantiles of ``values`` (``p50``, ``p90``, ``p99``, ``p999``, ``max``), in their unit."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return {k: float("nan") for k in keys}
    return {k: float(v) for k, v in zip(keys, np.percentile(x, [_QUANTILES[k] for k in keys]))}


class LogicalErrorRate:
    """For a result dataclass with ``shots`` and ``logical_errors`` (None: the predictions were not checked)."""

    shots: int
    logical_errors: int | None

    @property
    def ler(self) -> float | None:
        return None if self.logical_errors is None else self.logical_errors / self.shots

    def ler_json(self) -> dict[str, Any]:
        """The report's ``logical_errors``, ``ler`` and ``ler_ci95``."""
        return {"logical_errors": self.logical_errors, "ler": self.ler,
                "ler_ci95": wilson(self.logical_errors, self.shots)}
