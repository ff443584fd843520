"""deploy() with coprocessors in executors: real rounds, faults, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backline_core import (
    BoundFunction,
    Controller,
    Coprocessor,
    KeyTakenError,
    PeerError,
    Placement,
    PlacementError,
    TransportError,
    deploy,
    plugins,
)

pytest.importorskip("backline_compiler", reason="building an executor's code needs backline-compiler on this host")

from backline_executor_orc.handle import Executor  # noqa: E402

from backline_core.sdk import ChildProcess, children, gone  # noqa: E402

steane = plugins.get("decoder", "steane").build  # the core's Steane lookup table

SHM = Path(f"/dev/shm/backline-{os.geteuid()}")


def _key(tag: str) -> str:
    return f"exec-{tag}-{os.getpid()}"


def _placement(ex: Executor, key: str, fn: object = "steane", **node: object) -> Placement:
    return Placement(controller=Controller(), transport="memcpy",
                     coprocessors=[Coprocessor(name=key, coprocessor_fn=fn, executor=ex, **node)])


def _children(pid: int) -> list[int]:
    return children(pid, zombies=True)  # an unreaped session process still counts: the executor reaps them


@pytest.fixture
def executor():
    with Executor.local() as ex:
        yield ex


def test_steane_in_a_local_executor_answers_like_the_table(executor):
    key = _key("steane")
    with deploy(_placement(executor, key), in_bytes=1, out_bytes=1) as d, BoundFunction(steane()) as table:
        assert d.resolution.coprocessor(key).runs_in == "executor"
        assert _children(executor.pid), "the executor serves the deployment from a session process"
        session = d.session(key)
        for round_ in range(2000):
            syndrome = bytes([round_ % 8])
            assert session.round(syndrome) == table(0, syndrome)
    # closed: the session process has gone, the segment is unlinked, the executor still serves
    deadline = time.monotonic() + 10
    while _children(executor.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children(executor.pid)
    assert not (SHM / key).exists()
    with deploy(_placement(executor, key), in_bytes=1, out_bytes=1) as d:  # the same key again
        assert d.session(key).round(bytes([0b001])) == BoundFunction(steane())(0, bytes([0b001]))


def test_echo_with_variable_payloads(executor):
    key = _key("echo")
    with deploy(_placement(executor, key, fn="echo"), in_bytes=200, out_bytes=200) as d:
        session = d.session(key)
        for n in (1, 7, 64, 200):
            payload = bytes(range(n))
            assert session.round(payload) == payload


def test_a_bring_up_failure_there_comes_back_with_its_text(executor):
    key = _key("busy")
    with deploy(_placement(executor, key), in_bytes=1, out_bytes=1):
        # a second coprocessor under the same key: the executor's bring-up is refused, with its reason
        with pytest.raises(KeyTakenError) as info:
            deploy(_placement(executor, key), in_bytes=1, out_bytes=1)
    message = str(info.value)
    print(message)
    assert "bring-up of coprocessor" in message and executor.address in message and "BL_EBUSY" in message


def test_a_dead_executor_is_a_peer_error_at_the_controller_within_its_deadline():
    ex = Executor.local()
    key = _key("dead")
    try:
        d = deploy(_placement(ex, key, init_args={"timeout_ms": 500}), in_bytes=1, out_bytes=1)
        session = d.session(key)
        assert session.round(bytes([1]))
        os.killpg(os.getpgid(ex.pid), signal.SIGKILL)  # the executor and its session processes
        t0 = time.monotonic()
        with pytest.raises((PeerError, TransportError)) as info:
            for _ in range(100_000):
                session.round(bytes([1]))
        elapsed = time.monotonic() - t0
        print(f"dead executor noticed after {elapsed * 1e3:.0f} ms: {info.value}")
        assert elapsed < 10
        with pytest.raises(TransportError):
            d.close()  # stopping the coprocessor there fails: its executor is gone; everything else is closed
        assert not d.controller_sessions and not d.executor_runs
    finally:
        ex.close()
    assert not (SHM / key).exists()  # the controller's destroy unlinks what the dead coprocessor left



def test_a_python_function_cannot_be_shipped(executor):
    with pytest.raises(PlacementError, match="Python callable"):
        deploy(_placement(executor, _key("py"), fn=lambda d, p: p), in_bytes=1, out_bytes=1)


def test_wrong_secret_is_refused_before_anything_runs(executor, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("0" * 64)
    wrong.chmod(0o600)
    options = dict(executor.placement_options(), secret_file=str(wrong))
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=_key("auth"), coprocessor_fn="steane",
                                                    executor_options=options)])
    with pytest.raises(TransportError, match="authentication"):
        deploy(placement, in_bytes=1, out_bytes=1)
    assert not _children(executor.pid)


def test_bench_runs_in_an_executor():
    out = subprocess.run([sys.executable, "-m", "backline_core", "bench", "--runs-in", "executor",
                          "--rounds", "20000", "--block", "10000", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stderr
    assert "runs_in=executor" in out.stdout and "lost: 0  mismatched replies: 0" in out.stdout


def test_executor_bench_reports_each_figure():
    out = subprocess.run([sys.executable, "-m", "backline_core", "executor", "bench", "--rounds", "50"],
                         capture_output=True, text=True, timeout=300)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stderr
    for words in ("local: ready in", "open (connect + authenticate)", "decoder object", "sync launch", "ratio",
                  "bare loopback TCP ping-pong"):
        assert words in out.stdout


def test_executor_bench_bad_input_is_one_line():
    out = subprocess.run([sys.executable, "-m", "backline_core", "executor", "bench", "--rounds", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--rounds" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_killed_controller_leaves_neither_executor_nor_its_secret():
    script = ("import os, sys, time\nfrom backline_executor_orc.handle import Executor\nex = Executor.local()\n"
              "print(ex.pid, os.path.dirname(ex.secret_file), flush=True)\ntime.sleep(300)\n")
    controller = ChildProcess([sys.executable, "-c", script], name="the controller", ready=r"^(\d+) (\S+)$",
                              process_group=False)  # its kill below must reach it alone, not the executor
    try:
        pid_text, folder = controller.wait_ready(120).groups()
        pid = int(pid_text)
        assert Path(folder, "secret").exists()
        controller.kill(10)  # no atexit, no finalizers: the executor must notice and clean up after itself
        deadline = time.monotonic() + 15
        while (not gone(pid) or Path(folder).exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(pid), "the executor outlived its controller"
        assert not Path(folder).exists(), f"{folder} (the executor's secret and log) was left behind"
    finally:
        controller.kill(10)


def test_the_executor_plugin_never_imports_the_compiler():
    """It finds the object builder through the registry (the compiler registers it)."""
    import ast

    package = Path(__file__).resolve().parents[1] / "backline_executor_orc"
    imports = [f"{path.name}:{node.lineno}" for path in package.glob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.Import, ast.ImportFrom))
               and any((a.name if isinstance(node, ast.Import) else node.module or "").startswith("backline_compiler")
                       for a in node.names)]
    assert not imports, f"backline_executor_orc imports backline_compiler at {imports}"
    assert "coprocessor-object" in plugins.names("builder")


def test_without_an_object_builder_the_error_says_what_to_install(executor, monkeypatch):
    from backline_executor_orc import api

    monkeypatch.setattr(api.plugins, "names", lambda kind: [] if kind == "builder" else plugins.names(kind))
    with pytest.raises(PlacementError, match=r"needs an object builder.*pip install backline-compiler"):
        with deploy(_placement(executor, _key("nobuilder")), in_bytes=1, out_bytes=1):
            pass
