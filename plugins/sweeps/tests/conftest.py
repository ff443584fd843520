"""The sweep tests' fixtures (the helpers are backline_sweeps.testing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backline_sweeps.testing import write_circuits


@pytest.fixture
def circuits(tmp_path: Path) -> Path:
    """Two tiny repetition-code circuits, named d=3,p=P.stim, in a folder of their own."""
    write_circuits(tmp_path)
    return tmp_path
