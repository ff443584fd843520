"""backline_core.testing with the core alone: its helpers for networked transports' tests.

The core has no networked transport, so a ServeProcess here can only fail to start: that
it says why and leaves no process behind is what these check. (The ucx and rdma plugins'
tests run it serving.)
"""

from __future__ import annotations

import socket
import sys

import pytest

from backline_core.testing import ServeProcess, endpoint_config, free_port


def test_a_free_port_can_be_listened_on() -> None:
    port = free_port("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_endpoint_config_puts_the_endpoint_first_and_the_rest_in_order() -> None:
    assert endpoint_config("10.0.0.2", 5, tls="tcp", cpu=3) == "host=10.0.0.2;port=5;tls=tcp;cpu=3"


def test_the_command_is_backline_coprocessor_serve() -> None:
    serve = ServeProcess("rdma", 7, "steane", "echo", key="k", host="h", wrapper=["ip", "netns", "exec", "b"],
                         timeout_ms=9)
    assert serve.command == ["ip", "netns", "exec", "b", sys.executable, "-m", "backline_core", "coprocessor",
                             "serve", "--transport", "rdma", "--key", "k", "--config", "host=h;port=7;timeout_ms=9",
                             "--fn", "steane", "--fn", "echo"]
    assert ServeProcess("rdma", 7).command[-2:] == ["--fn", "echo"]


def test_a_coprocessor_that_cannot_start_is_an_error_with_what_it_said_and_is_reaped() -> None:
    serve = ServeProcess("no-such-transport", free_port("127.0.0.1"), start_timeout=60)
    with pytest.raises(AssertionError) as info:
        with serve:
            pass
    assert "did not start" in str(info.value) and "no-such-transport" in str(info.value), info.value
    assert serve.proc is not None and serve.proc.returncode is not None
    assert serve.proc.stdout.closed and serve.proc.stderr.closed


def test_leaving_kills_a_child_that_still_runs() -> None:
    # A stand-in for `serve`: says ready, then waits forever.
    serve = ServeProcess("x", 1, start_timeout=60)
    serve.command = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]
    with serve:
        assert serve.ready == "ready\n" and serve.proc.poll() is None
    assert serve.proc.returncode is not None and serve.proc.returncode < 0  # killed, and reaped
    assert serve.proc.stdout.closed and serve.proc.stderr.closed
