"""Tests that need a verbs device: they skip without one, and fail instead under BACKLINE_REQUIRE_RDMA=1.

The Soft-RoCE guest (``plugins/transport-rdma/guest/run-in-guest``) has one; CI runs this
directory there with BACKLINE_REQUIRE_RDMA=1, so a guest that lost its device fails the run.
"""

from __future__ import annotations

import pytest
from backline_transport_rdma.testing import require_device

from backline_core.testing import TransportUnderTest


@pytest.fixture(scope="session")
def rdma_device() -> str:
    """The first verbs device's name; skips (or, under BACKLINE_REQUIRE_RDMA=1, fails) without one."""
    return require_device("plugins/transport-rdma/tests/guest")


@pytest.fixture
def backline_transport(rdma_device: str) -> TransportUnderTest:
    """rdma for the conformance suite (test_conformance.py), over the guest's Soft-RoCE device."""
    return TransportUnderTest(
        "rdma",
        # Soft-RoCE does its work in the guest's kernel, whose softirqs compete with the two spinning
        # threads for the guest's two emulated CPUs (on a host that may be busy): a round there can
        # stall for longer than the default 1 s
        timeout_ms=10000,
        peer_gone=("closed", "RDMA WRITE"),  # the connection's closing, or the QP's error
        bad_values=[({"device": "mlx5_9"}, ["no RDMA device named 'mlx5_9'", "rxe0"]),
                    ({"ib_port": 2}, ["no RDMA device has an active port 2", "rxe0 (port 1 ACTIVE)"]),
                    ({"gid_index": 1000}, ["GID index 1000", "::ffff:127.0.0.1 (RoCE v2)"])])
