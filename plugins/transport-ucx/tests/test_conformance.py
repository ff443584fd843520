"""The conformance suite every transport runs (backline_core.testing.conformance), over ucx with
tls=shm and tls=tcp (conftest.py)."""

from backline_core.testing.conformance import *  # noqa: F403
