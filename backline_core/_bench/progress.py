"""A bench run's progress on a stream: a bar redrawn in place on a terminal; in a log (a file
or a pipe), a plain line at each quarter, never a stream of carriage returns."""

from __future__ import annotations

import time
from typing import TextIO

#: plain lines in a log: one each time another quarter of the run is done
LOG_STEPS = 4
BAR_WIDTH = 30


class Progress:
    """``update(done)`` as rounds complete, ``note(text)`` for a line of its own, ``close()``
    at the end (idempotent). With ``stream=None`` it writes nothing."""

    def __init__(self, stream: TextIO | None, total: int, what: str = "rounds") -> None:
        self.stream, self.total, self.what = stream, max(int(total), 1), what
        self.terminal = bool(stream is not None and _isatty(stream))
        self._start = time.monotonic()
        self._logged = 0  # quarters written to a log
        self._drawn = False  # a bar is on the terminal's current line

    def update(self, done: int) -> None:
        """``done`` of ``total`` are complete."""
        if self.stream is None:
            return
        frac = min(max(done / self.total, 0.0), 1.0)
        if self.terminal:
            bar = "#" * int(BAR_WIDTH * frac)
            eta = (time.monotonic() - self._start) * (1 - frac) / frac if frac else 0.0
            self._write(f"\r[{bar:<{BAR_WIDTH}}] {100 * frac:5.1f}%  {done:,}/{self.total:,} {self.what}  "
                        f"eta {eta:4.0f} s")
            self._drawn = True
            return
        step = int(LOG_STEPS * frac)
        if step > self._logged:
            self._logged = step
            self._write(f"{done:,}/{self.total:,} {self.what} ({100 * frac:.0f}%)\n")

    def note(self, text: str) -> None:
        """One line of its own (on a terminal, below the bar drawn so far)."""
        if self.stream is None:
            return
        self._end_bar()
        self._write(text.rstrip("\n") + "\n")

    def close(self) -> None:
        """End the bar's line (a log's lines are complete already)."""
        if self.stream is not None:
            self._end_bar()

    def _end_bar(self) -> None:
        if self._drawn:
            self._drawn = False
            self._write("\n")

    def _write(self, text: str) -> None:
        assert self.stream is not None
        self.stream.write(text)
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
