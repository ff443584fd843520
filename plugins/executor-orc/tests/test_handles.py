"""Executor handles: a local server, one over a real sshd (deployed from wheels), one across
network namespaces; each authenticates through the C client and leaves nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backline_executor_orc.handle import Executor, configure_client, split_address

from backline_core import AuthenticationError, InvalidArgumentError, TransportError
from backline_core.sdk import check, children, ffi, gone, last_error, lib

HERE = Path(__file__).resolve().parent


# --- helpers --------------------------------------------------------------------------------


def open_session(address: str):
    """A C-client session with the executor at ``address`` (raises the recorded failure)."""
    lib.bl_status_take()  # start from a clean slate: the thread keeps its first failure
    session = lib.bl_executor_open(address.encode())
    if session == ffi.NULL:
        check(lib.bl_status_take())
        raise AssertionError("bl_executor_open returned NULL without recording a failure")
    return session


def call_abi_version(session) -> int:
    """``bl_abi_version`` of libbackline, called in the executor (signature ``i32 ()``)."""
    out = ffi.new("int32_t *")
    results = ffi.new("void *[1]", [out])
    check(lib.bl_executor_call(session, b"bl_abi_version", b"libbackline", b"i32 ()", ffi.NULL, 0, 0, results, 1))
    return out[0]


def remote_abi_version(address: str) -> int:
    session = open_session(address)
    try:
        return call_abi_version(session)
    finally:
        check(lib.bl_executor_close(session))


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            if raw and text in raw.decode(errors="replace").replace("\0", " ") and not gone(int(entry)):
                found.append((int(entry), raw.decode(errors="replace").replace("\0", " ").strip()))
    return found


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> object:
    """Poll ``condition()`` until it is truthy (returned) or ``timeout`` s pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} (waited {timeout} s)")
        time.sleep(0.05)
    return value


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temp folders made through ``tempfile`` land here, so a test can see that none is left."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def assert_no_handle_dirs(d: Path) -> None:
    left = [p.name for p in d.iterdir() if p.name.startswith("backline-executor-") and "wheels" not in p.name]
    assert not left, f"temp folders left behind: {left}"


# --- Executor.local -------------------------------------------------------------------------


def test_local_executor_is_ready_private_and_leaves_nothing(private_tmp: Path) -> None:
    with Executor.local() as ex:
        print(f"local executor ready in {ex.ready_seconds:.3f} s at {ex.address}")
        host, port = split_address(ex.address)
        assert host == "127.0.0.1" and port > 0
        assert ex.kind == "local" and ex.host == "127.0.0.1" and ex.triple
        assert f"address={ex.address}" in repr(ex) and "kind=local" in repr(ex) and "host=127.0.0.1" in repr(ex)
        assert stat.S_IMODE(os.stat(ex.secret_file).st_mode) == 0o600
        folder = Path(ex.secret_file).parent
        assert folder.parent == private_tmp and stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert ex.log_path and Path(ex.log_path).is_file()
        assert ex.placement_options() == {"executor": "orc", "address": ex.address, "host": "127.0.0.1",
                                          "secret_file": ex.secret_file, "triple": ex.triple}
        assert ex.alive() and ex.failure() is None
        assert remote_abi_version(ex.address) == lib.bl_abi_version()
        pid = ex.pid
        assert pid == ex.processes["executor"]
    assert ex.closed and "closed" in repr(ex)
    ex.close()  # idempotent
    assert gone(pid), f"executor {pid} is still there after close()"
    left = children(pgid=pid, zombies=True)
    assert not left, f"processes of the executor's group are left: {left}"
    assert not processes_mentioning(ex.secret_file)
    assert not folder.exists()
    assert_no_handle_dirs(private_tmp)


def test_local_bad_preload_reports_the_servers_words(private_tmp: Path) -> None:
    with pytest.raises(TransportError) as info:
        Executor.local(preload=[str(private_tmp / "libnothing-here.so")])
    message = str(info.value)
    print(message)
    assert "before it was ready" in message and "libnothing-here.so" in message  # the log tail names the library
    assert_no_handle_dirs(private_tmp)


def test_two_local_executors_refuse_each_others_secret() -> None:
    with Executor.local() as one, Executor.local() as two:
        assert one.address != two.address
        assert Path(one.secret_file).read_bytes() != Path(two.secret_file).read_bytes()
        try:
            configure_client(one.address, two.secret_file)  # the wrong key for `one`
            lib.bl_status_take()
            session = lib.bl_executor_open(one.address.encode())
            assert session == ffi.NULL
            assert lib.bl_status_take() == lib.BL_EAUTH
            assert "authentication" in last_error() and one.address in last_error()
        finally:
            one.configure_client()
        assert remote_abi_version(one.address) == lib.bl_abi_version()
        assert remote_abi_version(two.address) == lib.bl_abi_version()


def test_attach_names_an_executor_and_stops_nothing() -> None:
    with Executor.local() as started:
        with Executor.attach(started.address, started.secret_file, host="127.0.0.1") as attached:
            assert attached.kind == "attached" and attached.pid is None and attached.triple is None
            assert attached.placement_options() == {"executor": "orc", "address": started.address,
                                                    "host": "127.0.0.1", "secret_file": started.secret_file}
            assert attached.alive()
            assert remote_abi_version(attached.address) == lib.bl_abi_version()
        assert attached.closed and started.alive()  # closing the attached handle stopped nothing
        assert remote_abi_version(started.address) == lib.bl_abi_version()
    with pytest.raises(InvalidArgumentError, match="host:port"):
        Executor.attach("no-port-here", started.secret_file)


# --- Executor.ssh against a real sshd -------------------------------------------------------


def assert_ssh_handle_left_nothing(ex: Executor, sshd: Any, pids: dict[str, int], workspace: str | None) -> None:
    for role, pid in pids.items():
        assert gone(pid), f"{role} process {pid} is still there after close()"
    if ex.pid is not None:
        assert gone(ex.pid), f"the remote executor {ex.pid} is still there after close()"
    if workspace is not None:
        assert not processes_mentioning(workspace), processes_mentioning(workspace)
    wait_until(lambda: not sshd.sessions(), 15.0, f"sshd sessions are left: {sshd.sessions()}")
    assert not processes_mentioning(f"-p {sshd.port} ")


def test_ssh_deploys_wheels_and_runs_a_call(sshd: Any, private_tmp: Path) -> None:
    memcpy = HERE.parents[1] / "transport-memcpy"  # an extra distribution, built and installed too
    ex = Executor.ssh(**sshd.login(python=sys.executable, deploy=True, packages=[memcpy]))
    try:
        print(f"ssh executor (deployed) ready in {ex.ready_seconds:.1f} s at {ex.address}")
        assert ex.kind == "ssh" and ex.host == "127.0.0.1" and split_address(ex.address)[0] == "127.0.0.1"
        assert ex.workspace and Path(ex.workspace).is_dir()  # the "remote" is this machine
        assert stat.S_IMODE(Path(ex.workspace, "secret").stat().st_mode) == 0o600
        command = Path(f"/proc/{ex.pid}/cmdline").read_bytes().decode().split("\0")
        assert command[0] == f"{ex.workspace}/venv/bin/python", command  # the deployed copy runs
        assert "backline_executor_orc" in command and "serve" in command
        where = subprocess.run([command[0], "-P", "-c", "import backline_core, backline_executor_orc, "
                                "backline_transport_memcpy as m; print(backline_core.__file__, "
                                "backline_executor_orc.__file__, m.__file__)"],
                               capture_output=True, text=True, timeout=60, cwd="/")
        assert where.returncode == 0, where.stderr
        for path in where.stdout.split():  # the wheels' copies, not this checkout
            assert path.startswith(f"{ex.workspace}/venv/"), where.stdout
        assert ex.alive() and set(ex.processes) == {"ssh-serve", "ssh-forward"}
        assert remote_abi_version(ex.address) == lib.bl_abi_version()
        pids, workspace = ex.processes, ex.workspace
    finally:
        ex.close()
    assert not Path(workspace).exists(), f"the remote workspace {workspace} is still there"
    assert_ssh_handle_left_nothing(ex, sshd, pids, workspace)
    assert_no_handle_dirs(private_tmp)


def test_ssh_forward_killed_fails_the_next_call_naming_the_address(sshd: Any) -> None:
    ex = Executor.ssh(**sshd.login(python=sys.executable, deploy=False), timeout_ms=3000)
    try:
        session = open_session(ex.address)
        try:
            assert call_abi_version(session) == lib.bl_abi_version()
            forward = ex.processes["ssh-forward"]
            os.kill(forward, signal.SIGKILL)
            wait_until(lambda: not ex.alive(), 10.0, "the handle did not notice its forward died")
            out = ffi.new("int32_t *")
            results = ffi.new("void *[1]", [out])
            rc = lib.bl_executor_call(session, b"bl_abi_version", b"libbackline", b"i32 ()", ffi.NULL, 0, 0, results, 1)
            assert rc < 0
            print(f"after the forward died: status {rc}: {last_error()}")
            assert ex.address in last_error(), last_error()
        finally:
            lib.bl_executor_close(session)
        why = ex.failure()
        print(why)
        assert why and "forward" in why and ex.address in why and "SIGKILL" in why
        with pytest.raises(TransportError, match="forward"):
            ex.check_alive()
        pids, workspace = ex.processes, ex.workspace
    finally:
        ex.close()
    assert not Path(workspace).exists()
    assert_ssh_handle_left_nothing(ex, sshd, pids, workspace)


def test_ssh_without_an_authorized_key_says_it_needs_a_password(sshd: Any, ssh_keys: Any,
                                                                 private_tmp: Path) -> None:
    with pytest.raises(AuthenticationError) as info:
        Executor.ssh(**sshd.login(identity_file=ssh_keys.unauthorized_identity_file, deploy=False,
                                  python=sys.executable))
    message = str(info.value)
    print(message)
    assert f"ssh to root@{sshd.host} needs a password" in message and "identity_file" in message
    assert_no_handle_dirs(private_tmp)
    wait_until(lambda: not sshd.sessions(), 15.0, f"sshd sessions are left: {sshd.sessions()}")


def test_ssh_port_conflict_on_the_forward_is_retried(sshd: Any) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        with Executor.ssh(**sshd.login(python=sys.executable, deploy=False, local_port=taken)) as ex:
            assert ex.forward_ports_taken == [taken]
            assert split_address(ex.address)[1] != taken
            assert remote_abi_version(ex.address) == lib.bl_abi_version()
            pids, workspace = ex.processes, ex.workspace
    assert_ssh_handle_left_nothing(ex, sshd, pids, workspace)


def test_ssh_given_workspace_that_exists_is_kept(sshd: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "existing-workspace"
    workspace.mkdir()
    (workspace / "keep-me").write_text("mine")
    with Executor.ssh(**sshd.login(python=sys.executable, deploy=False, workspace=str(workspace))) as ex:
        assert ex.workspace == str(workspace) and (workspace / "secret").is_file()
        assert remote_abi_version(ex.address) == lib.bl_abi_version()
        pids = ex.processes
    assert sorted(p.name for p in workspace.iterdir()) == ["keep-me"]
    assert_ssh_handle_left_nothing(ex, sshd, pids, str(workspace))


# --- across network namespaces --------------------------------------------------------------

NETNS_SCRIPT = textwrap.dedent('''
    """Run in namespace A: an executor over SSH in namespace B, one authenticated call."""
    import json
    import sys

    from backline_core.sdk import check, ffi, lib

    from backline_executor_orc.handle import Executor

    kwargs = json.loads(sys.argv[1])
    with Executor.ssh(**kwargs) as ex:
        lib.bl_status_take()
        session = lib.bl_executor_open(ex.address.encode())
        if session == ffi.NULL:
            check(lib.bl_status_take())
        out = ffi.new("int32_t *")
        results = ffi.new("void *[1]", [out])
        check(lib.bl_executor_call(session, b"bl_abi_version", b"libbackline", b"i32 ()", ffi.NULL, 0, 0, results, 1))
        check(lib.bl_executor_close(session))
        print("RESULT " + json.dumps({"abi": out[0], "address": ex.address, "workspace": ex.workspace,
                                      "pid": ex.pid, "processes": ex.processes}), flush=True)
    print("CLOSED", flush=True)
''')


def test_ssh_across_network_namespaces(netns_pair: Any, sshd_factory: Any, tmp_path: Path) -> None:
    server = sshd_factory(netns_pair.address_b, 2222, prefix=netns_pair.exec_in(netns_pair.b))
    script = tmp_path / "in_namespace_a.py"
    script.write_text(NETNS_SCRIPT)
    kwargs = dict(server.login(python=sys.executable, deploy=False))
    done = subprocess.run([*netns_pair.exec_in(netns_pair.a), sys.executable, "-P", str(script),
                           json.dumps(kwargs)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, f"the script in {netns_pair.a} failed:\n{done.stdout}\n{done.stderr}"
    result = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    report = json.loads(result.removeprefix("RESULT "))
    print(f"from {netns_pair.a} to {netns_pair.address_b} in {netns_pair.b}: {report}")
    assert report["abi"] == lib.bl_abi_version()
    assert done.stdout.splitlines()[-1] == "CLOSED"
    assert not Path(report["workspace"]).exists()
    for pid in [report["pid"], *report["processes"].values()]:
        assert gone(pid), f"process {pid} is still there"
    assert netns_pair.pids(netns_pair.a) == []
    wait_until(lambda: not server.sessions(), 15.0, f"sshd sessions are left: {server.sessions()}")
    assert netns_pair.pids(netns_pair.b) == [server.proc.pid]
