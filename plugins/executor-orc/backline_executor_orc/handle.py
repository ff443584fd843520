"""Handles on executor servers: one started here, one started over SSH, or one already running.

An :class:`Executor` knows the address a client dials, the secret file that authenticates it
and the machine the code runs on; :meth:`Executor.placement_options` gives the mapping that
goes into ``Coprocessor(executor_options=...)``. Starting a handle configures this process's
C client (``bl_executor_configure``) for its address.

- :meth:`Executor.local` starts ``python -P -m backline_executor_orc serve`` on 127.0.0.1 with
  a fresh secret; the server watches this process (``--parent-pid``) and exits with it.
- :meth:`Executor.ssh` deploys the executor to another machine (wheels built here, installed
  in a virtual environment in a remote workspace), starts it under ``ssh -tt`` (so it gets
  SIGHUP when that ssh ends) bound to the remote loopback, and forwards a local port to it
  with a second ``ssh -N -L``. The secret travels on ssh's stdin, never on a command line.
- :meth:`Executor.attach` names an executor someone else started; closing it stops nothing.

``close()`` (also on ``with`` exit, when the handle is garbage-collected, and at interpreter
exit) stops what the handle started and removes what it created, here and on the remote.
Keep a reference to the handle while its executor is in use.
"""

from __future__ import annotations

import atexit
import io
import ipaddress
import math
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from backline_core import AuthenticationError, DeadlineError, InvalidArgumentError, PeerError, TransportError
from backline_core.sdk import ChildProcess, child_environment, describe_exit, free_port, interpreter, stop_process

from .secret import generate_secret_file

READY_LINE = re.compile(r"backline-executor ready address=(\S+) pid=(\d+) protocol=(\d+) triple=(\S+)")
#: how many attempts the SSH forward gets when its local port turns out to be taken
FORWARD_ATTEMPTS = 5
#: lines of a log quoted in an error message
TAIL_LINES = 15
#: seconds a stopped process gets after SIGTERM before SIGKILL
STOP_GRACE_S = 5.0
#: prefix of the remote workspaces Executor.ssh creates itself (the removal guard checks it)
REMOTE_WORKSPACE_PREFIX = "/tmp/backline-executor-"


def configure_client(address: str, secret_file: str, timeout_ms: int | None = None) -> None:
    """Tell this process's C client which secret file authenticates ``address`` and how long
    each call to it may take (``bl_executor_configure``; None: env BACKLINE_EXECUTOR_TIMEOUT_MS,
    else BL_EXECUTOR_DEFAULT_TIMEOUT_MS); raise a failed status as its exception."""
    from backline_core.sdk import check, lib

    if timeout_ms is not None and (isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0):
        raise InvalidArgumentError(f"timeout_ms={timeout_ms!r} must be a whole number of milliseconds > 0")
    check(lib.bl_executor_configure(address.encode(), os.fsencode(secret_file), timeout_ms or 0))


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (IPv6 in brackets) -> ``(host, port)``; InvalidArgumentError otherwise."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^\s:\[\]]+):(\d+)", address or "")
    if not match:
        raise InvalidArgumentError(f"executor address {address!r} is not host:port "
                                   "(IPv6 hosts in brackets: [::1]:9000)")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 0 < port < 65536:
        raise InvalidArgumentError(f"executor address {address!r}: port {port} is not in 1..65535")
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise InvalidArgumentError(f"{name}={value!r} must be a finite number of seconds > 0")
    return float(value)


def _tail(path: str | os.PathLike[str] | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of the file at ``path``, indented, or '' (no file)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.replace("\r", "").splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept)


def _with_tail(message: str, label: str, path: str | None, *, show_path: bool = True,
               say_empty: bool = True) -> str:
    """``message`` and the last lines of the log at ``path``. ``show_path=False`` for a log in a
    temp folder that is about to be removed (a failed start); ``say_empty=False``: an empty log
    adds nothing."""
    tail = _tail(path)
    where = f"{label} ({path})" if show_path else label
    if tail:
        return f"{message}\n  {where} ends with:\n{tail}"
    return f"{message} ({label} is empty)" if say_empty else message


def _probe_hello(host: str, port: int, timeout: float) -> bool:
    """Whether an executor answers at host:port: it sends a HELLO frame at accept, so the first
    four bytes are the protocol's magic (anything else listening there, or an SSH forward whose
    far end is not up, is not it). Sends nothing; the server drops the unauthenticated socket."""
    from backline_core.sdk import lib

    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            got = b""
            while len(got) < 4:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                s.settimeout(left)
                chunk = s.recv(4 - len(got))
                if not chunk:
                    return False
                got += chunk
    except OSError:
        return False
    return struct.unpack(">I", got)[0] == lib.BL_EXECUTOR_MAGIC


def _check_protocol(version: int, where: str) -> None:
    from backline_core.sdk import lib

    if version != lib.BL_EXECUTOR_PROTOCOL_VERSION:
        raise TransportError(f"the executor {where} speaks protocol version {version}, this client speaks "
                             f"{lib.BL_EXECUTOR_PROTOCOL_VERSION}: install the same backline-executor-orc there")


# --- processes ----------------------------------------------------------------------------------


class _Child(ChildProcess):
    """A process a handle started, in its own process group (stopped as a group): the local
    executor, or an ssh (``role``). A failed start quotes the last lines of its log."""

    def __init__(self, argv: list[str], role: str, name: str, *, pid_label: str = "pid", log_label: str = "",
                 log_path: str | None = None, show_path: bool = True, **options: Any) -> None:
        super().__init__(argv, name=name, **options)
        self.role = role
        self.what = f"{name} ({pid_label} {self.pid})"
        self._log_label, self._log_path, self._show_path = log_label, log_path, show_path

    def start_error(self) -> TransportError:
        rc = self.proc.returncode
        cls = InvalidArgumentError if rc == 2 else TransportError  # status 2: the server refused its arguments
        return cls(_with_tail(f"{self.what} {describe_exit(rc)} before it was ready", self._log_label,
                              self._log_path, show_path=self._show_path))

    def deadline_error(self, timeout: float) -> DeadlineError:
        return DeadlineError(_with_tail(f"{self.what} was not ready within {timeout:g} s", self._log_label,
                                        self._log_path, show_path=self._show_path))


# --- local resources and their release ----------------------------------------------------------


class _Resources:
    """What a handle started and created; released once, by close(), the garbage collector or
    interpreter exit (weakref.finalize). Holds no reference to the handle."""

    def __init__(self) -> None:
        self.procs: list[_Child] = []  # stopped in reverse order
        self.tmpdir: str | None = None
        self.remote_cleanup: Callable[[], None] | None = None
        self.closed = False
        self.lock = threading.Lock()

    def release(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for child in reversed(self.procs):
            try:
                child.terminate(STOP_GRACE_S)  # and closes ssh -tt's stdin, held open so its session stays up
            except DeadlineError as exc:  # pragma: no cover - SIGKILL does not fail
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        if self.remote_cleanup is not None:
            try:
                self.remote_cleanup()
            except Exception as exc:  # close() must go on: say what was left
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _private_tmpdir() -> str:
    """A fresh directory only this user can enter (mkdtemp makes it 0700)."""
    path = tempfile.mkdtemp(prefix="backline-executor-")
    os.chmod(path, 0o700)
    return path


# --- SSH ----------------------------------------------------------------------------------------


class _Ssh:
    """How to run ssh to one destination: the common options and error interpretation."""

    def __init__(self, host: str, user: str | None, port: int, identity_file: str | None,
                 ssh_options: Sequence[str], connect_timeout: float) -> None:
        for name, value in (("host", host), ("user", user)):
            if value is not None and (not isinstance(value, str) or not value or value.startswith("-")
                                      or any(c.isspace() for c in value) or (name == "user" and "@" in value)):
                raise InvalidArgumentError(f"ssh {name}={value!r} is not a valid {name} name")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise InvalidArgumentError(f"ssh port={port!r} must be an integer in 1..65535")
        if isinstance(ssh_options, (str, bytes)) or not all(isinstance(o, str) for o in ssh_options):
            raise InvalidArgumentError(f"ssh_options={ssh_options!r} must be a list of strings, e.g. "
                                       "['-o', 'StrictHostKeyChecking=yes']")
        if identity_file is not None and not os.path.isfile(identity_file):
            raise InvalidArgumentError(f"identity_file={identity_file!r} is not a file")
        self.host, self.user = host, user
        self.destination = f"{user}@{host}" if user else host
        # ssh keeps the first value it gets for an option: BatchMode (never a password prompt) comes
        # before the caller's options, the defaults after them
        self.options = ["-o", "BatchMode=yes", *ssh_options, "-o", "ServerAliveInterval=5",
                        "-o", "ServerAliveCountMax=3", "-o", f"ConnectTimeout={max(1, math.ceil(connect_timeout))}",
                        "-p", str(port)]
        if identity_file is not None:
            self.options += ["-i", os.fspath(identity_file), "-o", "IdentitiesOnly=yes"]

    def argv(self, *extra: str, command: str | None = None) -> list[str]:
        return ["ssh", *self.options, *extra, self.destination, *([command] if command is not None else [])]

    def failure(self, what: str, rc: int | None, stderr: str) -> TransportError:
        """The error for an ssh run that failed with ``rc`` and said ``stderr``."""
        said = "\n".join("    " + line for line in stderr.strip().splitlines()[-TAIL_LINES:])
        said = f"; ssh said:\n{said}" if said else ""
        if rc == 255 and re.search(r"Permission denied|Host key verification failed|"
                                   r"No more authentication methods|Too many authentication failures", stderr):
            return AuthenticationError(
                f"ssh to {self.destination} needs a password or an unknown host key: set up key login "
                f"(identity_file=... of a key in the remote ~/.ssh/authorized_keys) and add the host key to "
                f"known_hosts (ssh {self.destination} once by hand), then retry{said}")
        if rc == 255:
            return TransportError(f"ssh to {self.destination} failed while {what}{said}")
        return TransportError(f"on {self.destination}, {what} failed ({describe_exit(rc)}){said}")

    def run(self, what: str, command: str, *, timeout: float, input: bytes | None = None) -> str:
        """Run ``command`` (a shell command line) on the remote; return its stdout."""
        argv = self.argv("-T", command=command)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
        except OSError as exc:
            raise TransportError(f"cannot run ssh ({exc}): install the OpenSSH client") from None
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(proc, 1.0, group=True)
            out, err = proc.communicate()
            said = err.decode(errors="replace").strip()
            raise DeadlineError(f"ssh to {self.destination} did not finish {what} within {timeout:g} s"
                                + (f"; ssh said: {said}" if said else "")) from None
        except BaseException:
            stop_process(proc, 1.0, group=True)
            raise
        if proc.returncode != 0:
            raise self.failure(what, proc.returncode, err.decode(errors="replace"))
        return out.decode(errors="replace")


# The remote half of deployment, run by the remote `python` in the workspace: a virtual
# environment that sees that interpreter's packages (llvmlite, cffi, numpy, ...) plus the
# shipped wheels, installed offline without their dependencies.
_BOOTSTRAP = r'''"""Set up the Backline executor's virtual environment in a workspace (sent by Executor.ssh)."""
import glob, os, subprocess, sys, sysconfig, venv

ws = sys.argv[1]
env = os.path.join(ws, "venv")
venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env)
py = os.path.join(env, "bin", "python")
site = subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True).strip()
if sys.prefix != sys.base_prefix:
    # this interpreter is itself a virtual environment: --system-site-packages shows only its
    # base's packages, so its own site directories are added too (after the new venv's, which win)
    dirs = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    with open(os.path.join(site, "_backline_parent_environment.pth"), "w") as fh:
        fh.write("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
if subprocess.run([py, "-c", "import pip"], capture_output=True).returncode != 0:
    subprocess.run([py, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
wheels = sorted(glob.glob(os.path.join(ws, "wheels", "*.whl")))
subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
                "--no-warn-script-location", "-q", *wheels], check=True)
'''


# --- wheels -------------------------------------------------------------------------------------

_WHEELS: dict[tuple[str, int], str] = {}  # (source directory, newest mtime in ns) -> built wheel
_WHEELS_LOCK = threading.Lock()
_WHEEL_DIR: list[str] = []  # one temp dir for this process's wheels, removed at exit
_SKIP_DIRS = {"__pycache__", "build", "dist", ".git", ".pytest_cache", "tests"}
_SKIP_SUFFIXES = (".so", ".o", ".pyc", ".egg-info")


def _source_files(root: Path) -> Iterable[Path]:
    """The files of the distribution at ``root`` that a wheel build reads: its top-level files
    and its top-level packages (folders with ``__init__.py``), less build outputs."""
    for entry in sorted(root.iterdir()):
        if entry.is_file():
            yield entry
        elif entry.is_dir() and (entry / "__init__.py").is_file() and not entry.name.endswith(_SKIP_SUFFIXES):
            for dirpath, dirnames, filenames in os.walk(entry):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(_SKIP_SUFFIXES))
                for name in sorted(filenames):
                    if not name.endswith(_SKIP_SUFFIXES) and not (name.startswith("_cffi_") and name.endswith(".c")):
                        yield Path(dirpath, name)


def distribution_source(module: Any) -> Path | None:
    """The source checkout a package was imported from (the folder above it holding
    ``pyproject.toml``), or None for an installed copy."""
    root = Path(module.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def _wheel_dir() -> str:
    if not _WHEEL_DIR:
        _WHEEL_DIR.append(tempfile.mkdtemp(prefix="backline-executor-wheels-"))
        atexit.register(shutil.rmtree, _WHEEL_DIR[0], True)
    return _WHEEL_DIR[0]


def _pip_wheel(args: list[str], dest: str, what: str, timeout: float) -> str:
    before = set(os.listdir(dest))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", dest, *args]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DeadlineError(f"building the wheel of {what} took more than {timeout:g} s") from None
    made = sorted(set(os.listdir(dest)) - before)
    if done.returncode != 0 or not made:
        lines = done.stderr.decode(errors="replace").strip().splitlines()[-TAIL_LINES:]
        said = "\n".join("    " + line for line in lines)
        raise TransportError(f"cannot build the wheel of {what} (pip wheel {describe_exit(done.returncode)}):\n{said}")
    return os.path.join(dest, made[-1])


def build_wheel(source: str | os.PathLike[str], *, timeout: float = 900.0) -> str:
    """Build (once per process while its sources are unchanged) the wheel of the distribution
    whose source folder is ``source``; returns the wheel's path.

    The sources are copied to a temp folder first, so the build writes nothing into the
    checkout; pip builds them with this environment's build tools (``--no-build-isolation``)
    and nothing from an index (``--no-index``), so no network is needed."""
    root = Path(source).resolve()
    if not (root / "pyproject.toml").is_file():
        raise InvalidArgumentError(f"{os.fspath(source)!r} is not a distribution's source folder (no pyproject.toml)")
    files = list(_source_files(root))
    key = (str(root), max((f.stat().st_mtime_ns for f in files), default=0))
    with _WHEELS_LOCK:
        cached = _WHEELS.get(key)
        if cached and os.path.isfile(cached):
            return cached
        dest = tempfile.mkdtemp(prefix="out-", dir=_wheel_dir())
        with tempfile.TemporaryDirectory(prefix="src-", dir=_wheel_dir()) as copy:
            for f in files:
                target = Path(copy, f.relative_to(root))
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
            wheel = _pip_wheel(["--no-build-isolation", "--no-index", copy], dest, str(root), timeout)
        _WHEELS[key] = wheel
        return wheel


def _installed_wheel(distribution: str, version: str, timeout: float) -> str:
    """The wheel of an installed (not source-checkout) distribution: ``pip wheel NAME==VERSION``,
    which needs that version on the configured package index (or in pip's cache)."""
    with _WHEELS_LOCK:
        key = (f"{distribution}=={version}", 0)
        cached = _WHEELS.get(key)
        if cached and os.path.isfile(cached):
            return cached
        dest = tempfile.mkdtemp(prefix="out-", dir=_wheel_dir())
        _WHEELS[key] = _pip_wheel([f"{distribution}=={version}"], dest, f"{distribution}=={version}", timeout)
        return _WHEELS[key]


def deployment_wheels(packages: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """Wheels of backline-core, backline-executor-orc and each source folder in ``packages``
    (e.g. ``plugins/transport-memcpy``), built from the checkouts this process imported them from."""
    import backline_core
    import backline_executor_orc

    wheels = []
    for module, distribution in ((backline_core, "backline-core"), (backline_executor_orc, "backline-executor-orc")):
        root = distribution_source(module)
        if root is not None:
            wheels.append(build_wheel(root))
        else:
            from importlib.metadata import version

            wheels.append(_installed_wheel(distribution, version(distribution), 900.0))
    wheels += [build_wheel(p) for p in packages]
    return wheels


def _wheel_tar(wheels: Sequence[str]) -> bytes:
    """A tar stream of ``wheels/*.whl`` and ``bootstrap.py`` for the remote workspace."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))

        for wheel in wheels:
            add("wheels/" + os.path.basename(wheel), Path(wheel).read_bytes())
        add("bootstrap.py", _BOOTSTRAP.encode())
    return buf.getvalue()


# --- the handle ---------------------------------------------------------------------------------


class Executor:
    """A running executor server: where to dial it (``address``), how to authenticate
    (``secret_file``), the machine it runs on (``host``) and its target ``triple``.

    Build one with :meth:`local`, :meth:`ssh` or :meth:`attach`. A context manager;
    ``close()`` is idempotent and also runs at garbage collection and interpreter exit.
    """

    def __init__(self, kind: str, address: str, host: str, secret_file: str, triple: str | None,
                 resources: _Resources, *, pid: int | None = None, log_path: str | None = None,
                 ready_seconds: float = 0.0, timeout_ms: int | None = None) -> None:
        self.kind = kind  #: "local", "ssh" or "attached"
        self.address = address  #: "host:port" this process dials
        self.host = host  #: the machine the executor runs on
        self.secret_file = secret_file  #: the file holding the shared secret (on this machine)
        self.triple = triple  #: the executor's target triple (None: not known, for an attached one)
        self.pid = pid  #: the server's pid (local: on this machine; ssh: on the remote)
        self.log_path = log_path  #: the executor's output (local: its stderr; ssh: its terminal)
        self.ready_seconds = ready_seconds  #: seconds from start to ready (ssh: including deployment)
        self.timeout_ms = timeout_ms  #: the C client's per-call deadline for it (None: the default)
        self._resources = resources
        self._finalizer = weakref.finalize(self, resources.release)  # also runs at interpreter exit
        self.workspace: str | None = None  #: ssh: the remote workspace
        self.site_packages: str | None = None  #: ssh with deploy: the remote venv's site-packages
        self.forward_ports_taken: list[int] = []  #: ssh: local ports the forward found taken (and replaced)
        self._ssh_destination: str | None = None
        self._forward_log: str | None = None
        self._serve_log: str | None = None
        configure_client(address, secret_file, self.timeout_ms)

    # -- start ----------------------------------------------------------------------------------

    @classmethod
    def local(cls, *, preload: Sequence[str | os.PathLike[str]] = (), ready_timeout: float = 30.0,
              log_file: str | os.PathLike[str] | None = None, python: str = sys.executable,
              timeout_ms: int | None = None) -> Executor:
        """Start an executor on 127.0.0.1 in a child process of this one (it exits with this process).

        ``preload``: shared libraries the server loads (``--preload``) so shipped objects can use
        them. ``log_file``: where its stderr goes (default: ``executor.log`` in the handle's
        private temp folder). ``timeout_ms``: the C client's per-call deadline for it.
        """
        ready_timeout = _check_seconds("ready_timeout", ready_timeout)
        if not python:
            raise InvalidArgumentError("python is empty: give the interpreter that runs the executor")
        res = _Resources()
        try:
            res.tmpdir = _private_tmpdir()
            secret_file = os.path.join(res.tmpdir, "secret")
            generate_secret_file(secret_file)
            log_path = os.fspath(log_file) if log_file is not None else os.path.join(res.tmpdir, "executor.log")
            cmd = [*(interpreter() if python == sys.executable else [python, "-P"]), "-m",
                   "backline_executor_orc", "serve", "--bind", "127.0.0.1:0", "--secret-file", secret_file,
                   "--parent-pid", str(os.getpid()), "--remove-at-exit", res.tmpdir]
            for lib in preload:
                cmd += ["--preload", os.fspath(lib)]
            started = time.monotonic()
            with open(log_path, "ab") as log:  # its stderr; its stdout is copied there line by line
                child = _Child(cmd, "executor", "the local executor", log_label="its log", log_path=log_path,
                               show_path=log_file is not None, ready=READY_LINE.pattern, stderr=log, log=log_path,
                               env=child_environment())
            res.procs.append(child)
            address, _, protocol, triple = child.wait_ready(ready_timeout).groups()
            ready_seconds = time.monotonic() - started
            _check_protocol(int(protocol), f"started here ({python})")
            host, _ = split_address(address)
            if not _is_loopback(host):
                raise TransportError(f"{child.what} bound {address}, not a loopback address")
            return cls("local", address, host, secret_file, triple, res, pid=child.pid, log_path=log_path,
                       ready_seconds=ready_seconds, timeout_ms=timeout_ms)
        except BaseException:
            res.release()  # nothing is left behind when start-up fails
            raise

    @classmethod
    def ssh(cls, host: str, *, user: str | None = None, port: int = 22, identity_file: str | None = None,
            python: str = "python3", workspace: str | None = None, deploy: bool = True,
            packages: Sequence[str | os.PathLike[str]] = (), ssh_options: Sequence[str] = (),
            ready_timeout: float = 60.0, local_port: int | None = None, timeout_ms: int | None = None) -> Executor:
        """Start an executor on ``host`` over SSH and forward a local port to it.

        Login must work without a password (``ssh -o BatchMode=yes``: a key, ``identity_file``,
        and a known host key); ``ssh_options`` are passed to every ssh (e.g. ``["-F", config]``).
        The remote needs a POSIX shell, ``mktemp``, ``tar`` and ``python`` (3.11+).

        ``deploy=True``: wheels of backline-core, backline-executor-orc and the source folders in
        ``packages`` are built here (see :func:`deployment_wheels`; they must suit the remote's
        Python and CPU, like this machine's), copied into the workspace and installed, offline and
        without dependencies, into ``WORKSPACE/venv``, a virtual environment that sees the
        packages of ``python`` (llvmlite and numpy, cffi, pluggy, stevedore must be installed there).
        ``deploy=False``: ``python`` already has backline-executor-orc installed.

        ``workspace``: a remote folder to use (default: a fresh ``mktemp -d`` under /tmp). It is
        removed at close if this handle created it; otherwise only the files put there are.
        ``ready_timeout`` bounds each remote step (connect, start, forward; deployment gets at
        least 120 s); ``ready_seconds`` is the whole bring-up, wheel building included.
        ``local_port``: the forward's local port to try first (default: a free one); a port that
        turns out to be taken is replaced by another, up to FORWARD_ATTEMPTS times.

        The forward is a relay by design, so the handshake's tags cover no addresses here
        (``BACKLINE_EXECUTOR_FORWARDED=1`` there, ``bl_executor_configure_forwarded`` here): ssh,
        which owns the local port and dials the executor, keeps other relays out.
        """
        ready_timeout = _check_seconds("ready_timeout", ready_timeout)
        if local_port is not None and (isinstance(local_port, bool) or not isinstance(local_port, int)
                                       or not 0 < local_port < 65536):
            raise InvalidArgumentError(f"local_port={local_port!r} must be an integer in 1..65535")
        if not python or "\n" in python:
            raise InvalidArgumentError(f"python={python!r} is not an interpreter path or name")
        if workspace is not None and (not workspace.startswith("/") or "\n" in workspace
                                      or os.path.normpath(workspace) in ("/", "/tmp")):
            raise InvalidArgumentError(f"workspace={workspace!r} must be an absolute path of a folder of its own")
        ssh = _Ssh(host, user, port, identity_file, ssh_options, ready_timeout)
        started = time.monotonic()
        res = _Resources()
        try:
            res.tmpdir = _private_tmpdir()
            secret_file = os.path.join(res.tmpdir, "secret")
            generate_secret_file(secret_file)
            wheels = deployment_wheels(packages) if deploy else []

            # (2) the workspace; from here on close() removes it
            if workspace is None:
                said = ssh.run("creating the workspace", f"mktemp -d {REMOTE_WORKSPACE_PREFIX}XXXXXXXXXX",
                               timeout=ready_timeout).strip()
                ws = said.splitlines()[-1] if said else ""  # the last line: a login script may print first
                if not re.fullmatch(re.escape(REMOTE_WORKSPACE_PREFIX) + r"[A-Za-z0-9]+", ws):
                    raise TransportError(f"on {ssh.destination}, mktemp -d answered {ws!r}, not a folder under "
                                         f"{REMOTE_WORKSPACE_PREFIX}*")
                created = True
            else:
                ws = os.path.normpath(workspace)
                q = shlex.quote(ws)
                said = ssh.run("creating the workspace",
                               f"if [ -e {q} ]; then echo existed; else mkdir -p -m 700 -- {q} && echo created; fi",
                               timeout=ready_timeout).strip()
                created = said.endswith("created")
            res.remote_cleanup = _remote_cleanup(ssh, ws, created, workspace is not None, ready_timeout)
            qws = shlex.quote(ws)

            # (3) deployment: wheels + bootstrap in one tar stream, then the venv
            if deploy:
                ssh.run(f"installing the executor in {ws}/venv (with {python})",
                        f"umask 077 && tar -xf - -C {qws} && {shlex.quote(python)} -I {qws}/bootstrap.py {qws}",
                        input=_wheel_tar(wheels), timeout=max(ready_timeout, 120.0))
                remote_python = f"{ws}/venv/bin/python"
                # where the deployed packages are there: the node's library paths are re-rooted into it
                site_packages = ssh.run("asking the venv for its site-packages",
                                        f"{shlex.quote(remote_python)} -P -c "
                                        "'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'",
                                        timeout=ready_timeout).strip()
            else:
                remote_python = python
                site_packages = None

            # (4) the secret, on ssh's stdin
            ssh.run("writing the secret", f"umask 077 && cat > {qws}/secret",
                    input=Path(secret_file).read_bytes(), timeout=ready_timeout)

            # (5) the executor, under a terminal: when this ssh ends it gets SIGHUP
            serve_log = os.path.join(res.tmpdir, "executor.log")
            ssh_log = os.path.join(res.tmpdir, "ssh-serve.log")
            # reached only through the forward below, whose ends see other connections than the
            # executor does: the handshake's tags cover no addresses (the forward owns the ports)
            command = (f"exec env BACKLINE_EXECUTOR_FORWARDED=1 {shlex.quote(remote_python)} -P -m "
                       f"backline_executor_orc serve --bind 127.0.0.1:0 --secret-file {qws}/secret")
            with open(ssh_log, "ab") as err:
                serve = _ssh_child(ssh.argv("-tt", "-e", "none", command=command), "ssh-serve",
                                   f"the executor on {ssh.destination}", log_label="its output", log_path=serve_log,
                                   show_path=False, ready=READY_LINE.pattern, stdin_pipe=True, stderr=err,
                                   log=serve_log)
            res.procs.append(serve)
            try:
                match = serve.wait_ready(ready_timeout)
            except TransportError as exc:
                raise type(exc)(_with_tail(str(exc), "ssh's log", ssh_log, show_path=False, say_empty=False),
                                status=exc.status) from None
            remote_address, remote_pid, protocol, triple = match.groups()
            _check_protocol(int(protocol), f"on {ssh.destination}")
            res.remote_cleanup = _remote_cleanup(ssh, ws, created, workspace is not None, ready_timeout,
                                                 int(remote_pid))
            _, remote_port = split_address(remote_address)

            # (6) the forward
            local, forward_log, tried = _open_forward(ssh, res, remote_port, local_port, ready_timeout)
            from backline_core.sdk import check, lib

            check(lib.bl_executor_configure_forwarded(f"127.0.0.1:{local}".encode(), 1))
            handle = cls("ssh", f"127.0.0.1:{local}", host, secret_file, triple, res, pid=int(remote_pid),
                         log_path=serve_log, ready_seconds=time.monotonic() - started, timeout_ms=timeout_ms)
            handle.workspace = ws
            handle.site_packages = site_packages
            handle._ssh_destination = ssh.destination
            handle._forward_log, handle._serve_log = forward_log, ssh_log
            handle.forward_ports_taken = tried
            return handle
        except BaseException:
            res.release()
            raise

    @classmethod
    def attach(cls, address: str, secret_file: str | os.PathLike[str], *, host: str | None = None,
               triple: str | None = None, timeout_ms: int | None = None) -> Executor:
        """An executor someone else started, at ``address``, authenticated by ``secret_file``;
        ``host`` (default: the address's host) is the machine it runs on. Closing it stops nothing."""
        address_host, _ = split_address(address)
        secret_file = os.fspath(secret_file)
        if not os.path.isfile(secret_file):
            raise InvalidArgumentError(f"secret_file={secret_file!r} is not a file")
        return cls("attached", address, host or address_host, secret_file, triple, _Resources(),
                   timeout_ms=timeout_ms)

    # -- use ------------------------------------------------------------------------------------

    def placement_options(self) -> dict[str, str]:
        """The ``executor_options`` of a ``Coprocessor`` run by this executor (``triple`` left
        out when not known: the placement then assumes this host's)."""
        options = {"executor": "orc", "address": self.address, "host": self.host, "secret_file": self.secret_file}
        if self.triple is not None:
            options["triple"] = self.triple
        if self.site_packages:
            options["site_packages"] = self.site_packages  # deployed: its own copies of the packages
        return options

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._resources.closed

    @property
    def processes(self) -> dict[str, int]:
        """The pids of the processes this handle started here, by role ("executor" for a local
        one; "ssh-serve" and "ssh-forward" for an SSH one)."""
        return {child.role: child.pid for child in self._resources.procs}

    def failure(self) -> str | None:
        """Why this executor is gone (a sentence naming what ended), or None while it runs.
        An attached executor is not watched: None unless it was closed."""
        if self.closed:
            return f"the executor handle for {self.address} was closed"
        for child in self._resources.procs:
            rc = child.returncode
            if rc is None:
                continue
            if child.role == "executor":
                return _with_tail(f"the local executor at {self.address} (pid {child.pid}) {describe_exit(rc)}",
                                  "its log", self.log_path)
            if child.role == "ssh-forward":
                return _with_tail(f"the SSH forward to {self._ssh_destination} for the executor at {self.address} "
                                  f"ended (ssh pid {child.pid} {describe_exit(rc)})", "ssh's log", self._forward_log)
            return _with_tail(f"the SSH session to {self._ssh_destination} running the executor at {self.address} "
                              f"ended (ssh pid {child.pid} {describe_exit(rc)}): the executor got SIGHUP",
                              "ssh's log", self._serve_log)
        return None

    def alive(self) -> bool:
        """Whether what this handle started is still running (attached: whether the address
        answers like an executor, which costs one unauthenticated connection)."""
        if self.kind == "attached":
            host, port = split_address(self.address)
            return not self.closed and _probe_hello(host, port, 2.0)
        return self.failure() is None

    def check_alive(self) -> None:
        """Raise PeerError saying what ended when the executor is gone."""
        why = self.failure()
        if why is not None:
            raise PeerError(why)

    def configure_client(self, timeout_ms: int | None = None) -> None:
        """(Re)configure this process's C client for this executor, with a per-call deadline."""
        if timeout_ms is not None:
            self.timeout_ms = timeout_ms
        configure_client(self.address, self.secret_file, self.timeout_ms)

    def close(self) -> None:
        """Stop what this handle started and remove what it created (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Executor kind={self.kind} address={self.address} host={self.host} {state}>"


# --- helpers of the constructors ----------------------------------------------------------------


def _ssh_child(argv: list[str], role: str, name: str, **options: Any) -> _Child:
    """An ssh process of a handle: it dies with this process however this process ends (ssh
    cannot watch a parent pid), and its start failing is one clear error."""
    try:
        return _Child(argv, role, name, pid_label="ssh pid", die_with_parent=True, **options)
    except TransportError as exc:
        raise TransportError(f"cannot run ssh ({exc}): install the OpenSSH client") from None


def _workspace_guard(ws: str, given: bool) -> bool:
    """Whether ``ws`` may be removed: the ``mktemp -d`` path this handle got, or the workspace it was given."""
    if not ws or not ws.startswith("/") or os.path.normpath(ws) != ws or ws in ("/", "/tmp"):
        return False
    return given or bool(re.fullmatch(re.escape(REMOTE_WORKSPACE_PREFIX) + r"[A-Za-z0-9]+", ws))


def _remote_cleanup(ssh: _Ssh, ws: str, created: bool, given: bool, timeout: float,
                    remote_pid: int | None = None) -> Callable[[], None]:
    """What close() runs on the remote after the ssh processes are gone: wait for the executor
    (it got SIGHUP) to exit, then remove the workspace if this handle created it (else only
    the files deployment put there)."""
    if not _workspace_guard(ws, given):
        raise TransportError(f"refusing to use {ws!r} on {ssh.destination} as the executor's workspace")
    q = shlex.quote(ws)
    if created:
        remove = f"rm -rf -- {q}"
    else:
        remove = "rm -rf -- " + " ".join(shlex.quote(f"{ws}/{n}") for n in ("venv", "wheels", "bootstrap.py", "secret"))
    wait = ""
    if remote_pid is not None:
        # the executor exits on SIGHUP within a few seconds; one still running this workspace's
        # secret file after 10 s is ours, and is killed
        wait = (f"i=0; while kill -0 {remote_pid} 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
                f"if kill -0 {remote_pid} 2>/dev/null && ps -o args= -p {remote_pid} | grep -qF -- {q}/secret; "
                f"then kill -KILL {remote_pid}; fi; ")

    def cleanup() -> None:
        try:
            ssh.run(f"removing the workspace {ws}", wait + remove, timeout=min(timeout, 30.0) + 15.0)
        except TransportError as exc:
            raise TransportError(f"the executor workspace {ws} on {ssh.destination} may be left behind: "
                                 f"{exc}") from None

    return cleanup


def _open_forward(ssh: _Ssh, res: _Resources, remote_port: int, first_port: int | None,
                  timeout: float) -> tuple[int, str, list[int]]:
    """Start ``ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:REMOTE`` and wait until an executor answers at
    LOCAL; a local port that is taken (ssh exits: ExitOnForwardFailure) is replaced by another."""
    assert res.tmpdir is not None
    taken: list[int] = []
    for attempt in range(FORWARD_ATTEMPTS):
        local = first_port if attempt == 0 and first_port is not None else free_port("127.0.0.1")
        log_path = os.path.join(res.tmpdir, f"ssh-forward-{attempt}.log")
        argv = ssh.argv("-N", "-o", "ExitOnForwardFailure=yes", "-L", f"127.0.0.1:{local}:127.0.0.1:{remote_port}")
        with open(log_path, "ab") as err:
            forward = _ssh_child(argv, "ssh-forward", f"the SSH forward to {ssh.destination}", ready=None, stderr=err)
        res.procs.append(forward)
        deadline = time.monotonic() + timeout
        while True:
            if forward.returncode is not None:
                said = Path(log_path).read_text(errors="replace")
                if re.search(r"Address already in use|cannot listen|Could not request local forwarding", said):
                    taken.append(local)
                    res.procs.remove(forward)
                    forward.terminate()  # it has exited: reaped, its pipe closed
                    break  # next port
                raise ssh.failure(f"forwarding local port {local} to the executor", forward.returncode, said)
            if _probe_hello("127.0.0.1", local, 1.0):
                return local, log_path, taken
            if time.monotonic() >= deadline:
                message = (f"the SSH forward 127.0.0.1:{local} -> {ssh.destination}:{remote_port} did not reach "
                           f"the executor within {timeout:g} s")
                raise DeadlineError(_with_tail(message, "ssh's log", log_path, show_path=False))
            time.sleep(0.1)
    raise TransportError(f"cannot forward a local port to the executor on {ssh.destination}: local ports "
                         f"{', '.join(map(str, taken))} were taken; free one, or pass local_port= of a free one")
