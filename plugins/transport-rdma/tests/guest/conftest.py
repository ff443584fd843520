"""Tests that need a verbs device: they skip without one, and fail instead under BACKLINE_REQUIRE_RDMA=1.

The Soft-RoCE guest (``plugins/transport-rdma/guest/run-in-guest``) has one; CI runs this
directory there with BACKLINE_REQUIRE_RDMA=1, so a guest that lost its device fails the run.
"""

from __future__ import annotations

import pytest

from backline_transport_rdma.testing import require_device


@pytest.fixture(scope="session")
def rdma_device() -> str:
    """The first verbs device's name; skips (or, under BACKLINE_REQUIRE_RDMA=1, fails) without one."""
    return require_device("plugins/transport-rdma/tests/guest")
