"""The pytest plugin of :mod:`backline_core.testing` (the ``pytest11`` entry point ``backline``).

Its fixtures are named ``backline_*``; nothing here runs unless a test asks for one, so a run
that does not is unchanged (``-p no:backline`` leaves it out altogether).

* ``backline_free_port`` -- a TCP port free on 127.0.0.1.
* ``backline_serve`` -- ``backline_serve(transport, port, *fns, **kw)``: a started
  :class:`~backline_core.testing.ServeProcess`, stopped and reaped after the test.
* ``backline_cli`` -- ``backline_cli(*args)``: ``python -m backline_core ARGS`` run to its end,
  a :class:`~backline_core.testing.CliResult` (rc, stdout, stderr).
* ``backline_usage_error`` -- ``backline_usage_error(result, *words)``: exit status 2 and one line
  holding ``words`` (:func:`~backline_core.testing.usage_error`); returns the line.
* ``backline_children`` -- ``backline_children(*needles)``: this process's live children (those
  whose command line holds one of ``needles``), as "PID: command".
* ``backline_transport`` -- the transport the conformance suite runs: a transport's conftest.py
  overrides it (:class:`~backline_core.testing.TransportUnderTest`).
* ``backline_case`` -- one conformance test's state: the transport, a session key of its own,
  what it started (stopped afterwards); after the test no child process and no shared-memory
  segment it made may be left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The suite's asserts say what differed (the modules of an editable install are not marked by pytest).
pytest.register_assert_rewrite("backline_core.testing.conformance")


@pytest.fixture
def backline_free_port() -> int:
    """A TCP port free on 127.0.0.1."""
    from . import free_port

    return free_port("127.0.0.1")


@pytest.fixture
def backline_serve() -> Iterator[Callable[..., Any]]:
    """``backline_serve(transport, port, *fns, **kw)``: a started ServeProcess, stopped after the test."""
    from . import ServeProcess

    started: list[Any] = []

    def serve(transport: str, port: int | None, *fns: str, **kw: Any) -> Any:
        proc = ServeProcess(transport, port, *fns, **kw)
        started.append(proc.__enter__())
        return proc

    yield serve
    for proc in reversed(started):
        proc.__exit__(None, None, None)


@pytest.fixture
def backline_cli() -> Callable[..., Any]:
    """``backline_cli(*args, timeout=300, env=None, cwd=None)``: ``python -m backline_core ARGS``'s result."""
    from . import run_cli

    return run_cli


@pytest.fixture
def backline_usage_error() -> Callable[..., str]:
    """``backline_usage_error(result, *words)``: the one line of a refused command (exit status 2)."""
    from . import usage_error

    return usage_error


@pytest.fixture
def backline_children() -> Callable[..., list[str]]:
    """``backline_children(*needles)``: this process's live children, as "PID: command"."""
    from . import children_running

    return children_running


@pytest.fixture
def backline_transport() -> Any:
    """The transport the conformance suite runs; a transport's conftest.py overrides this."""
    pytest.fail("the conformance suite needs a `backline_transport` fixture in this directory's conftest.py that "
                "returns a backline_core.testing.TransportUnderTest (docs/plugins.md, \"Testing a transport with "
                "the conformance suite\")", pytrace=False)


@pytest.fixture
def backline_case(backline_transport: Any) -> Iterator[Any]:
    """One conformance test: its transport, own key and clean-up; nothing may be left after it."""
    from .conformance import Case

    case = Case(backline_transport)
    try:
        yield case
    finally:
        case.close()
    case.check_nothing_left()
