"""Which round each detector of a circuit belongs to.

stim's generated circuits (and most hand-written memory experiments) give each detector
coordinates whose last entry is the round (``DETECTOR(x, y, t)``); the rounds are the
distinct values of that entry, in increasing order, numbered from 0. A circuit where a
detector has no coordinates, or where the last coordinates are not whole numbers, does not
say its rounds: it is refused, saying which detector and why.
"""

from __future__ import annotations

import numpy as np
import stim

from backline_core import InvalidArgumentError


class RoundError(InvalidArgumentError):
    """The rounds of a circuit's detectors cannot be determined."""


def detector_rounds(circuit: stim.Circuit) -> np.ndarray:
    """The round (0, 1, ...) of each detector of ``circuit``, as an int array of ``num_detectors``."""
    if not isinstance(circuit, stim.Circuit):
        raise InvalidArgumentError(f"expected a stim.Circuit, not {type(circuit).__name__}")
    n = circuit.num_detectors
    if n == 0:
        raise RoundError("the circuit has no detectors (no DETECTOR instructions): there is nothing to decode")
    coords = circuit.get_detector_coordinates()
    times = np.empty(n, dtype=np.float64)
    for d in range(n):
        c = coords.get(d) or []
        if not c:
            raise RoundError(f"detector {d} has no coordinates, so its round is unknown: give every DETECTOR "
                             "coordinates whose last entry is its round, e.g. DETECTOR(x, y, t)")
        times[d] = c[-1]
    if not np.isfinite(times).all() or (times != np.round(times)).any():
        d = int(np.flatnonzero(~np.isfinite(times) | (times != np.round(times)))[0])
        raise RoundError(f"detector {d}'s last coordinate is {times[d]}, not a whole round number: the last "
                         "coordinate of a DETECTOR must be its round")
    _, rounds = np.unique(times, return_inverse=True)
    return rounds.astype(np.int64)
