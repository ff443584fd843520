"""Fixtures of the executor's handle tests: a real OpenSSH server, and a pair of network namespaces.

Both need root (and sshd / ip); without them the tests that use them are skipped with the
reason. Nothing here reads or writes ~/.ssh: the client's config, key and known_hosts live
in the test's temp folder and go to ssh with ``-F``; and nothing is created outside the temp
folders (sshd's /run/sshd, when missing, is made in a private mount namespace).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from backline_core.sdk import children, free_port, stop_process
from backline_core.testing import NamespacePair, two_namespaces

SSHD = "/usr/sbin/sshd"
#: OpenSSH's privilege-separation folder (compiled in; sshd refuses to start without it)
PRIVSEP_DIR = Path("/run/sshd")


def _need_root(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to run sshd / create network namespaces)")
    for tool in tools:
        if not (os.path.isabs(tool) and os.access(tool, os.X_OK)) and shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (OpenSSH server / iproute2), which is not installed")


def wait_until(condition: Callable[[], object], timeout: float, what: str, step: float = 0.05) -> object:
    """Poll ``condition()`` until it is truthy (returned) or ``timeout`` s pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} (waited {timeout} s)")
        time.sleep(step)


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "backline-test", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    return path


@dataclasses.dataclass
class SshKeys:
    """A client key pair authorized by the test sshd servers, and a throwaway one that is not."""

    identity_file: str
    unauthorized_identity_file: str
    authorized_keys: Path


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    _need_root(SSHD, "ssh", "ssh-keygen")
    d = tmp_path_factory.mktemp("ssh-keys")
    key = _keygen(d / "id_ed25519")
    other = _keygen(d / "id_unauthorized")
    authorized = d / "authorized_keys"
    authorized.write_text(Path(str(key) + ".pub").read_text())
    return SshKeys(str(key), str(other), authorized)


def _privsep_prefix() -> list[str]:
    """What to run sshd under so it has its privilege-separation folder without this test
    changing the machine: nothing when /run/sshd exists, else a private mount namespace with
    a fresh tmpfs on /run holding an empty /run/sshd."""
    if PRIVSEP_DIR.is_dir():
        return []
    if shutil.which("unshare") is None:
        pytest.skip(f"sshd needs {PRIVSEP_DIR} (absent here), or unshare (util-linux) to make a private one")
    setup = f'mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 {PRIVSEP_DIR} && exec "$0" "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", setup]


@dataclasses.dataclass
class Sshd:
    """A running test sshd and what a client needs to log in to it as root."""

    host: str
    port: int
    user: str
    identity_file: str
    ssh_options: list[str]
    log: Path
    proc: subprocess.Popen[bytes]

    def login(self, **overrides: object) -> dict[str, object]:
        """Keyword arguments of ``Executor.ssh`` for this server (``host`` included)."""
        kwargs: dict[str, object] = dict(host=self.host, port=self.port, user=self.user,
                                         identity_file=self.identity_file, ssh_options=self.ssh_options)
        kwargs.update(overrides)
        return kwargs

    def sessions(self) -> list[int]:
        """pids of the processes sshd forked for connections that are still there."""
        return children(self.proc.pid, zombies=True)


def start_sshd(directory: Path, keys: SshKeys, listen: str, port: int, *, prefix: Sequence[str] = ()) -> Sshd:
    """Start ``sshd -D`` (under ``prefix``, e.g. ``ip netns exec NS``) listening on listen:port with
    a config, host key and authorized keys in ``directory``; wait until it listens."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(directory / "ssh_host_ed25519_key")
    config = directory / "sshd_config"
    log = directory / "sshd.log"
    config.write_text("\n".join([
        f"ListenAddress {listen}",
        f"Port {port}",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {keys.authorized_keys}",
        f"PidFile {directory / 'sshd.pid'}",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UseDNS no",
        "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE",
        "",
    ]))
    known_hosts = directory / "known_hosts"
    key_type, key_data = Path(str(host_key) + ".pub").read_text().split()[:2]
    known_hosts.write_text(f"[{listen}]:{port} {key_type} {key_data}\n")
    client_config = directory / "ssh_config"
    client_config.write_text("\n".join([
        "Host *",
        f"  UserKnownHostsFile {known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  CheckHostIP no",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
        "",
    ]))
    # unshare and sh exec, so proc is sshd itself
    proc = subprocess.Popen([*prefix, *_privsep_prefix(), SSHD, "-D", "-f", str(config), "-E", str(log)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    listening = f"Server listening on {listen} port {port}"

    def ready() -> bool:
        if proc.poll() is not None:
            said = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            logged = log.read_text() if log.exists() else ""
            raise RuntimeError(f"sshd exited with status {proc.returncode}: {said}{logged}")
        return log.exists() and listening in log.read_text()

    try:
        wait_until(ready, 15.0, f"sshd did not log {listening!r}")
    except BaseException:
        stop_sshd(proc)
        raise
    return Sshd(listen, port, "root", keys.identity_file, ["-F", str(client_config)], log, proc)


def stop_sshd(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, 10.0)
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory, ssh_keys: SshKeys) -> Iterator[Sshd]:
    """A real OpenSSH sshd on 127.0.0.1 (a free port) that lets ``root`` in with ``ssh_keys``."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"), ssh_keys, "127.0.0.1", free_port("127.0.0.1"))
    yield server
    stop_sshd(server.proc)
    with socket.socket() as s:
        s.settimeout(2.0)
        assert s.connect_ex(("127.0.0.1", server.port)) != 0, f"port {server.port} still answers after sshd stopped"


@pytest.fixture
def sshd_factory(ssh_keys: SshKeys, tmp_path: Path) -> Iterator[Any]:
    """``start(listen, port, prefix=())`` -> Sshd: more sshd servers (e.g. in a network namespace,
    prefix ``ip netns exec NS``), stopped at the end of the test."""
    started: list[Sshd] = []

    def start(listen: str, port: int, prefix: Sequence[str] = ()) -> Sshd:
        server = start_sshd(tmp_path / f"sshd-{len(started)}", ssh_keys, listen, port, prefix=prefix)
        started.append(server)
        return server

    yield start
    for server in started:
        stop_sshd(server.proc)


@pytest.fixture
def netns_pair() -> Iterator[NamespacePair]:
    """Two namespaces on a veth pair (``backline_core.testing.two_namespaces``, a random 10.X.Y subnet),
    deleted afterwards; a process still in one fails the test, after being killed."""
    _need_root("ip")
    # root and ip are there (_need_root): a namespace that cannot be made is a failure, not a skip
    with contextlib.ExitStack() as stack:
        pair = stack.enter_context(two_namespaces(f"10.{random.randint(1, 254)}.{random.randint(0, 255)}"))
        try:
            yield pair
        finally:
            left = {ns: pair.pids(ns) for ns in (pair.a, pair.b)}
            for pids in left.values():
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
    left = {ns: pids for ns, pids in left.items() if pids}
    assert not left, f"processes were left in the namespaces: {left}"
