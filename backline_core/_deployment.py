"""Bring up the sessions a Placement describes, in this process and in helper processes.

A coprocessor that runs in another process is a ``backline coprocessor serve`` child,
started with ``python -P`` (nothing is imported from the working directory) and tied to
this process: it exits when its parent dies, however the parent dies. A coprocessor that runs
in an executor (``runs_in == "executor"``) is started by its executor plugin, which ships the
node's compiled code there; closing the deployment stops it and closes the executor session.

>>> from backline_core import Controller, Coprocessor, Placement, plugins
>>> from backline_core._deployment import deploy
>>> if "memcpy" in plugins.names("transport"):
...     p = Placement(controller=Controller(), transport="memcpy",
...                   coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="controller-thread")])
...     with deploy(p, in_bytes=1, out_bytes=1) as d:
...         assert d.session("dec").round(bytes([0b001])) == bytes([1 << 0])
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

from ._errors import STATUS, InvalidArgumentError, PlacementError, TransportError
from ._process import ChildProcess, describe_exit, exit_on_stop_signals
from ._placement import Placement
from . import _plugins as plugins
from ._resolution import (DEFAULT_EXECUTOR, ResolvedNode, needs_secret, resolve, resolve_controller, served_elsewhere,
                          with_secret)
from ._trust import DeploymentSecret
from ._session import Session, resolve_function
from ._abi import lib


class CoprocessorProcess:
    """A coprocessor served by ``backline coprocessor serve`` in a child process.

    The child is ``python -P -m backline_core`` with this interpreter's isolation flags
    and an environment whose ``PYTHONPATH`` keeps only absolute entries: nothing in the
    working directory (a module such as ``argparse.py``, a ``*.dist-info`` naming a plugin)
    is imported there. It runs in its own process group (a terminal's Ctrl-C or hang-up
    goes to this process, which stops it) and watches this process (``--parent-pid``), so
    it exits when this process does, however this process ends.

    Start-up waits at most ``ready_timeout`` seconds for the child's ``ready`` line; a child
    that exits first raises the error its last line of stderr reports (as the
    :class:`~backline_core.TransportError` subclass its status names), and nothing
    is left running when start-up fails. The child's output is read all along, so a
    function that prints never blocks on a full pipe; :meth:`output_tail` has its last lines.
    """

    def __init__(self, transport: str, key: str, functions: Sequence[str], config: str = "",
                 hardware: str = "cpu", ready_timeout: float = 30.0) -> None:
        if not isinstance(ready_timeout, (int, float)) or not (0 < ready_timeout < math.inf):
            raise InvalidArgumentError(f"ready_timeout={ready_timeout!r} must be a finite number of seconds > 0")
        self.key = key
        self.child: ChildProcess | None = None
        spec_files: list[str] = []
        # -P: the working directory is not put on sys.path (see child_environment for the rest).
        cmd = [*interpreter(), "-m", "backline_core", "coprocessor", "serve",
               "--transport", transport, "--key", key, "--hardware", hardware, "--config", config,
               "--parent-pid", str(os.getpid())]
        try:
            for fn in functions:
                if len(fn) > 4096:  # a native context can be far past the kernel's 128 KiB argument limit
                    fd, path = tempfile.mkstemp(prefix="backline-fn-", suffix=".json")
                    spec_files.append(path)
                    with os.fdopen(fd, "w") as fh:
                        fh.write(fn)
                    fn = "@" + path
                cmd += ["--fn", fn]
            self.child = _ServeChild(cmd, name=f"coprocessor process for key {key!r}", env=child_environment())
            self.child.wait_ready(ready_timeout)
        except BaseException:
            self.kill()  # nothing is left running when start-up fails
            raise
        finally:
            for path in spec_files:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.child.proc if self.child is not None else None

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    def output_tail(self) -> list[str]:
        """The child's last lines of output (stdout and stderr, as they came), oldest first."""
        return self.child.output_tail() if self.child is not None else []

    def terminate(self, timeout: float = 10.0) -> int | None:
        """Ask the server to stop cleanly (SIGTERM); kill it if it does not within ``timeout``."""
        return self.child.terminate(timeout) if self.child is not None else None

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the server (as a crash would) and wait up to ``timeout`` for it to go."""
        if self.child is not None:
            self.child.kill(timeout)


class _ServeChild(ChildProcess):
    """``coprocessor serve``'s last line of stderr ends in its status, ``[BL_E...]``."""

    def start_error(self) -> TransportError:
        said = self.last_line().removeprefix("backline: error: ")
        message = f"{self.name} {describe_exit(self.proc.returncode)} before it was ready"
        if not said:
            return TransportError(f"{message} (it printed nothing on stderr)")
        status = re.search(r"\[(BL_E[A-Z]+)\]\s*$", said)
        if status:
            cls = next((c for name, c in STATUS.values() if name == status.group(1)), TransportError)
            return cls(f"{message}: {said}", status=status.group(1))
        return TransportError(f"{message}: {said}")


def interpreter() -> list[str]:
    """This interpreter with its isolation flags and ``-P``, for a child no less isolated than
    this process that imports nothing from its working directory."""
    if not sys.executable:
        raise TransportError("cannot start a child process: this interpreter does not know its own "
                             "executable (sys.executable is empty)")
    flags = sys.flags
    if flags.isolated:
        return [sys.executable, "-I", "-P"]
    return [sys.executable, *(["-E"] if flags.ignore_environment else []),
            *(["-s"] if flags.no_user_site else []), "-P"]


def function_spec(fn: object) -> str:
    """How a serve process is told a coprocessor function on its command line: a decoder
    name or ``module:function`` followed by ``@id,id``, or a native function as JSON."""
    function = resolve_function(fn)
    if isinstance(fn, str):
        name = fn
    elif function.python is not None:
        name = function.to_dict()["python"]
    else:
        return json.dumps(function.to_dict(), separators=(",", ":"))
    return f"{name}@{','.join(map(str, function.decoder_ids))}"


class Deployment:
    """Live sessions for a placement: one controller session per coprocessor, keyed by its name.

    What it started is released by :meth:`close`, and also at garbage collection and at
    interpreter exit (``weakref.finalize``). A deployment with helper processes or executors
    makes SIGTERM and SIGHUP end this process through ``SystemExit`` where their handlers are
    still the default (:func:`~backline_core.sdk.exit_on_stop_signals`), so that exit runs too:
    a coprocessor in an executor owns its shared-memory segment there and removes it only when
    told to stop, and SIGTERM's default action would end this process without telling it.
    """

    def __init__(self, placement: Placement, *, in_bytes: int, out_bytes: int) -> None:
        for what, value in (("in_bytes", in_bytes), ("out_bytes", out_bytes)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= lib.BL_MAX_SLOT_BYTES:
                shown = repr(value) if not isinstance(value, int) or abs(value) < 10**12 else "(too large)"
                raise InvalidArgumentError(f"deploy: {what}={shown} must be an int from 0 to {lib.BL_MAX_SLOT_BYTES} "
                                           "(the largest message, in bytes)")
        self.resolution = resolve(placement)
        #: a networked transport's ends authenticate: with no secret_file given, one made for this deployment
        self.secret: DeploymentSecret | None = None
        if needs_secret(self.resolution):
            self.secret = DeploymentSecret()
            try:
                placement = with_secret(placement, self.secret.path)
                self.resolution = resolve(placement)
            except BaseException:
                self.secret.remove()
                raise
        self.placement = placement
        self.coprocessor_sessions: dict[str, Session] = {}
        self.processes: dict[str, CoprocessorProcess] = {}
        #: coprocessors running in executors: name -> the executor plugin's handle (``stop()``)
        self.executor_runs: dict[str, Any] = {}
        self.controller_sessions: dict[str, Session] = {}
        # holds what to release, not self: it also runs when self is collected or the interpreter exits
        self._finalizer = weakref.finalize(self, _release, self.controller_sessions, self.coprocessor_sessions,
                                           self.executor_runs, self.processes, self.secret)
        if any(node.runs_in in ("process", "executor") for node in self.resolution.coprocessors):
            exit_on_stop_signals()
        try:
            for node in self.resolution.coprocessors:
                self._bring_up_coprocessor(node, in_bytes, out_bytes)
            for node in self.resolution.coprocessors:
                self.controller_sessions[node.name] = _controller_session(self.resolution.controller.library, node,
                                                                          in_bytes, out_bytes)
        except BaseException:
            self.close()
            raise

    def _bring_up_coprocessor(self, node: ResolvedNode, in_bytes: int, out_bytes: int) -> None:
        if node.runs_in == "process":
            self.processes[node.name] = start_process(node)
        elif node.runs_in == "executor":
            self.executor_runs[node.name] = start_in_executor(node, in_bytes=in_bytes, out_bytes=out_bytes)
        else:
            session = Session(node.library, "coprocessor", node.name, node.config, node.runs_in)
            self.coprocessor_sessions[node.name] = session
            try:
                for step in (session.connect, session.alloc_memory, session.exchange_keys, session.establish_channel):
                    step()
                session.set_coprocessor_fn(node.function)
                session.start()
            except BaseException:
                session.destroy()
                del self.coprocessor_sessions[node.name]
                raise

    def session(self, coprocessor: str | None = None) -> Session:
        """The controller's session with ``coprocessor`` (optional when there is only one)."""
        if coprocessor is None:
            if len(self.controller_sessions) != 1:
                raise PlacementError(
                    f"this placement has {len(self.controller_sessions)} coprocessors "
                    f"({', '.join(self.controller_sessions)}); name the one you want"
                )
            return next(iter(self.controller_sessions.values()))
        try:
            return self.controller_sessions[coprocessor]
        except KeyError:
            raise PlacementError(
                f"no coprocessor named {coprocessor!r}; this placement has {', '.join(self.controller_sessions)}"
            ) from None

    def close(self) -> None:
        """Destroy every session and stop every helper process (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(controller_sessions: dict[str, Session], coprocessor_sessions: dict[str, Session],
             executor_runs: dict[str, Any], processes: dict[str, CoprocessorProcess],
             secret: DeploymentSecret | None) -> None:
    """What :meth:`Deployment.close` does: destroy the sessions, stop the executor runs and the
    helper processes, remove the deployment's secret; the first failure is raised once all that
    is done."""
    for group in (controller_sessions, coprocessor_sessions):
        for s in group.values():
            s.destroy()
        group.clear()
    errors = []
    for run in executor_runs.values():
        try:
            run.stop()  # stop launch, await the serve launch, close the executor session
        except Exception as exc:  # the others still stop; the first failure is reported
            errors.append(exc)
    executor_runs.clear()
    for proc in processes.values():
        proc.terminate()
    processes.clear()
    if secret is not None:
        secret.remove()
    if errors:
        raise errors[0]


def start_process(node: ResolvedNode) -> CoprocessorProcess:
    """A ``backline coprocessor serve`` child for a resolved coprocessor that runs in another process."""
    if node.runs_in != "process" or node.function is None:
        raise PlacementError(f"{node.role} {node.name!r} does not run in another process (runs_in={node.runs_in!r})")
    return CoprocessorProcess(node.transport.name, node.name, [function_spec(node.function)], node.config,
                              node.hardware)


def start_in_executor(node: ResolvedNode, *, in_bytes: int, out_bytes: int) -> Any:
    """Start a resolved executor-run coprocessor through its executor plugin; returns its handle.

    The plugin (``Executor.load()`` -> a module with ``start_coprocessor``) builds the node's
    code, ships it and brings it up there; ``handle.stop()`` ends it."""
    if node.runs_in != "executor":
        raise PlacementError(f"{node.role} {node.name!r} does not run in an executor (runs_in={node.runs_in!r})")
    kind = str(node.executor_options.get("executor", DEFAULT_EXECUTOR))
    api = plugins.get("executor", kind).load()
    return api.start_coprocessor(node, in_bytes=in_bytes, out_bytes=out_bytes)


def _controller_session(library: str, node: ResolvedNode, in_bytes: int, out_bytes: int) -> Session:
    """The controller's session with ``node`` on backend ``library``, started (destroyed again if
    bringing it up fails)."""
    session = Session(library, "controller", node.name, node.controller_config, node.runs_in)
    try:
        session.connect()
        session.alloc_memory()
        session.exchange_keys()
        session.establish_channel()
        session.set_message_sizes(in_bytes, out_bytes)
        session.start()
    except BaseException:
        session.destroy()
        raise
    return session


def connect_controller(placement: Placement, coprocessor: str, *, in_bytes: int, out_bytes: int) -> Session:
    """The controller's session with ``coprocessor``, which is already served at its Endpoint on
    another host (``backline coprocessor serve`` there): resolved as :func:`deploy` resolves it,
    but nothing is started here. A transport with no coprocessor side installed (its coprocessor is
    a server Backline does not run, such as cuqr's decoding server) is resolved on the controller's
    side only (:func:`~backline_core._resolution.resolve_controller`). The caller destroys the session."""
    if placement.coprocessor(coprocessor).endpoint is None:
        raise PlacementError(f"coprocessor {coprocessor!r} has no Endpoint: a controller can only connect to a "
                             "coprocessor served elsewhere at a host and port")
    if served_elsewhere(placement, coprocessor):
        controller, node = resolve_controller(placement, coprocessor)
        return _controller_session(controller.library, node, in_bytes, out_bytes)
    resolution = resolve(placement)
    return _controller_session(resolution.controller.library, resolution.coprocessor(coprocessor), in_bytes, out_bytes)


def deploy(placement: Placement, *, in_bytes: int, out_bytes: int) -> Deployment:
    """Resolve ``placement`` and bring up its sessions; use as a context manager."""
    return Deployment(placement, in_bytes=in_bytes, out_bytes=out_bytes)


def child_environment() -> dict[str, str]:
    """This process's environment for a child that serves others (a coprocessor, an executor, a
    floor responder), less what would import from its working directory: an empty or relative
    ``PYTHONPATH`` entry names the working directory (or a place in it), which ``-P`` alone does
    not keep off ``sys.path``."""
    env = dict(os.environ)
    entries = env.get("PYTHONPATH", "").split(os.pathsep)
    kept = [entry for entry in entries if entry and os.path.isabs(entry)]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    env["PYTHONSAFEPATH"] = "1"
    for name in ("PYTHONSTARTUP", "PYTHONINSPECT"):  # interactive-only; never in a server
        env.pop(name, None)
    return env
