"""Shared fixture of the decoder-bpod tests: ``numbers``, where tests record what they measured.

Agreement rates and logical error rates go into the closing note of a change, so tests
record them (``numbers.record(section, key, value)``) and the session writes them all,
as JSON, to ``$BPOSD_NUMBERS`` (default ``/tmp/bposd_numbers.json``) at its end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest


class Numbers:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def record(self, section: str, key: str, value: Any) -> None:
        self.data.setdefault(section, {})[key] = value


@pytest.fixture(scope="session")
def numbers() -> Iterator[Numbers]:
    rec = Numbers()
    yield rec
    if rec.data:
        path = os.environ.get("BPOSD_NUMBERS", "/tmp/bposd_numbers.json")
        try:
            with open(path, "w") as fh:
                json.dump(rec.data, fh, indent=2, sort_keys=True, default=float)
        except OSError:  # a read-only /tmp must not fail the run
            pass
