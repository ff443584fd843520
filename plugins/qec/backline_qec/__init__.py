"""Backline's QEC workloads: the rounds of a stim circuit's detectors, and sliding windows over
them decoded by any decoder that builds from a detector error model.

>>> import stim
>>> from backline_qec import SlidingWindowDecoder
>>> circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=6,
...                                  after_clifford_depolarization=0.002)
>>> sw = SlidingWindowDecoder(circuit, "lut", window=4, commit=2)
>>> [(w.start, w.end, w.commit_end) for w in sw.windows]
[(0, 4, 2), (2, 6, 4), (4, 7, 7)]
"""

from .rounds import RoundError, detector_rounds
from .windows import (ParallelWindowDecoder, SlidingWindowDecoder, Window, WindowModel, plan_parallel_windows,
                      plan_windows, window_model)

__all__ = ["ParallelWindowDecoder", "RoundError", "SlidingWindowDecoder", "Window", "WindowModel", "detector_rounds", "plan_parallel_windows", "plan_windows",
           "window_model"]
