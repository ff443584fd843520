"""The conformance suite every transport runs (backline_core.testing.conformance), over memcpy with
its coprocessor in the controller's thread, in a thread and in a process (conftest.py)."""

from backline_core.testing.conformance import *  # noqa: F403
