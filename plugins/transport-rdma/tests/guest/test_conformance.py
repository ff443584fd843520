"""The conformance suite every transport runs (backline_core.testing.conformance), over rdma on a
real verbs device (conftest.py: it skips without one, and fails under BACKLINE_REQUIRE_RDMA=1)."""

from backline_core.testing.conformance import *  # noqa: F403
