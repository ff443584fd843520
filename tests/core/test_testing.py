"""backline_core.testing with the core alone: its helpers for transports' tests, and its pytest plugin.

The core has no networked transport, so a ServeProcess here can only fail to start: that
it says why and leaves no process behind is what these check. (The ucx and rdma plugins'
tests run it serving.)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from backline_core.testing import (ServeProcess, TransportUnderTest, endpoint_config, free_port, run_cli, test_secret,
                                   two_namespaces, usage_error)


def test_a_free_port_can_be_listened_on() -> None:
    port = free_port("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_endpoint_config_puts_the_endpoint_first_and_the_rest_in_order() -> None:
    assert endpoint_config("10.0.0.2", 5, tls="tcp", cpu=3, secret_file=None) == "host=10.0.0.2;port=5;tls=tcp;cpu=3"
    assert endpoint_config("10.0.0.2", 5, tls="tcp") == f"host=10.0.0.2;port=5;tls=tcp;secret_file={test_secret()}"


def test_the_command_is_backline_coprocessor_serve() -> None:
    serve = ServeProcess("rdma", 7, "steane", "echo", key="k", host="h", wrapper=["ip", "netns", "exec", "b"],
                         timeout_ms=9, secret_file="/s")
    assert serve.command == ["ip", "netns", "exec", "b", sys.executable, "-m", "backline_core", "coprocessor",
                             "serve", "--transport", "rdma", "--key", "k", "--config", "host=h;port=7;timeout_ms=9;secret_file=/s",
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


def test_a_config_without_an_endpoint_is_only_its_keys() -> None:
    assert ServeProcess("memcpy", None, key="k", slots=8).command[-6:-2] == ["--key", "k", "--config", "slots=8"]
    t = TransportUnderTest("memcpy", runs_in="thread", init_args={"cpu": 1})
    assert (t.config(None), t.coprocessor_config(None, slots=8)) == ("timeout_ms=10000;cpu=1", "cpu=1;slots=8")


def test_leaving_stops_a_child_with_sigterm_first() -> None:
    serve = ServeProcess("x", 1, start_timeout=60)
    serve.command = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]
    with serve:
        pass
    assert serve.proc.returncode == -signal.SIGTERM


def test_a_cli_error_is_one_line_and_status_2() -> None:
    result = run_cli("bench", "--transport", "no-such-transport", "--rounds", "10", "--no-progress", timeout=120)
    line = usage_error(result, "no-such-transport")
    with pytest.raises(AssertionError, match="not in"):
        usage_error(result, "words it does not say")
    with pytest.raises(AssertionError, match="want exit status 2"):
        usage_error(run_cli("plugins", timeout=120))
    assert line.startswith("backline")


PLUGIN_TESTS = '''
import subprocess, sys

def test_fixtures(backline_free_port, backline_cli, backline_usage_error, backline_children, backline_serve):
    assert 0 < backline_free_port < 65536
    backline_usage_error(backline_cli("bench", "--rounds", "0", timeout=120), "--rounds")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert any(line.startswith(f"{child.pid}:") for line in backline_children())
        assert not backline_children(b"no-such-program")
    finally:
        child.kill()
        child.wait(30)

def test_the_suite_needs_a_transport(backline_case):
    pass
'''


def test_the_pytest_plugin_gives_its_fixtures_and_asks_for_a_transport(tmp_path: Path) -> None:
    """The installed core's pytest11 plugin, in a pytest of its own (nothing of this repo's config)."""
    (tmp_path / "test_plugin_fixtures.py").write_text(PLUGIN_TESTS)
    proc = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "-rfE", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "1 passed, 1 error" in proc.stdout, proc.stdout + proc.stderr
    assert "needs a `backline_transport` fixture" in proc.stdout, proc.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                    reason="creates network namespaces: needs root and iproute2 (`ip`)")
def test_two_namespaces_reach_each_other_over_the_veth_and_go_however_the_block_exits() -> None:
    listen = ("import socket; s = socket.create_server(('{host}', 0)); print(s.getsockname()[1], flush=True); "
              "c, _ = s.accept(); c.sendall(b'hi'); c.close()")
    dial = "import socket, sys; print(socket.create_connection(('{host}', int(sys.argv[1])), timeout=30).recv(2))"
    with pytest.raises(KeyError):
        with two_namespaces("10.209.0") as pair:
            server = subprocess.Popen([*pair.exec_in(pair.b), sys.executable, "-c", listen.format(host=pair.address_b)],
                                      stdout=subprocess.PIPE, text=True)
            try:
                port = server.stdout.readline().strip()
                got = subprocess.run([*pair.exec_in(pair.a), sys.executable, "-c", dial.format(host=pair.address_b),
                                      port], capture_output=True, text=True, timeout=60)
                assert got.stdout.strip() == "b'hi'", got.stderr
            finally:
                server.kill()
                server.wait(30)
                server.stdout.close()
            raise KeyError("the block fails")
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True, timeout=30).stdout
    tag = pair.a.removeprefix("bl-a-")
    assert tag not in names and tag not in links
