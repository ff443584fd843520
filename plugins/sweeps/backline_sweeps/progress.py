"""What a user sees while a sweep runs: one status line redrawn on a terminal, plain lines in a log."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, TextIO

#: seconds between plain lines in a log (a file or a pipe), and between redraws on a terminal
LOG_PERIOD_S = 10.0
DRAW_PERIOD_S = 0.2


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{int(n)}"


def _duration(s: float) -> str:
    if s != s or s == float("inf"):
        return "?"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


class SweepProgress:
    """Tasks done, shots, errors, shots per second and an ETA, on ``stream`` (None: silent)."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        try:
            self.terminal = bool(stream is not None and stream.isatty())
        except (AttributeError, ValueError):
            self.terminal = False
        self._t0 = time.monotonic()
        self._last = 0.0
        self._drawn = False
        self._max_shots = self._max_errors = 0
        self._shots0 = 0

    def note(self, text: str) -> None:
        """A line of its own (below a status line already drawn)."""
        if self.stream is None:
            return
        self._end_line()
        self.stream.write(text + "\n")
        self.stream.flush()

    def start(self, states: Iterable[Any], max_shots: int, max_errors: int) -> None:
        self._t0 = self._last = time.monotonic()
        self._max_shots, self._max_errors = max_shots, max_errors
        states = list(states)
        self._shots0 = 0
        resumed = sum(s.shots_before for s in states)
        if resumed:
            self.note(f"resuming: {_count(resumed)} shots already in the file count toward the limits")

    def line(self, states: Iterable[Any]) -> str:
        states = list(states)
        done = sum(s.done(self._max_errors) for s in states)
        shots = sum(s.shots for s in states)
        errors = sum(s.errors for s in states)
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = shots / elapsed
        # each open task needs the shots left, or fewer if its error rate reaches max_errors first
        left = 0.0
        for s in states:
            if s.done(self._max_errors):
                continue
            need = self._max_shots - s.total_shots
            if s.total_errors > 0:
                need = min(need, (self._max_errors - s.total_errors) * s.total_shots / s.total_errors)
            left += max(need, 0)
        eta = left / rate if rate > 0 else float("inf")
        return (f"tasks {done}/{len(states)} done, {_count(shots)} shots, {_count(errors)} errors, "
                f"{_count(rate)} shots/s, eta {_duration(eta)}")

    def update(self, states: Iterable[Any]) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if now - self._last < (DRAW_PERIOD_S if self.terminal else LOG_PERIOD_S):
            return
        self._last = now
        if self.terminal:
            self.stream.write("\r\x1b[K" + self.line(states))
            self._drawn = True
        else:
            self.stream.write(self.line(states) + "\n")
        self.stream.flush()

    def close(self, states: Iterable[Any]) -> None:
        if self.stream is None:
            return
        self._end_line()
        elapsed = time.monotonic() - self._t0
        self.stream.write(self.line(states) + f" in {_duration(elapsed)}\n")
        self.stream.flush()

    def _end_line(self) -> None:
        if self._drawn:
            assert self.stream is not None
            self.stream.write("\n")
            self._drawn = False
