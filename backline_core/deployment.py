"""Bring up the sessions a Placement describes, in this process and in helper processes.

A coprocessor that runs in another process is a ``backline coprocessor serve`` child,
started with ``python -P`` (nothing is imported from the working directory) and tied to
this process: it exits when its parent dies, however the parent dies.

>>> from backline_core import Controller, Coprocessor, Placement, plugins
>>> from backline_core.deployment import deploy
>>> if "memcpy" in plugins.names("transport"):
...     p = Placement(controller=Controller(), transport="memcpy",
...                   coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="controller-thread")])
...     with deploy(p, in_bytes=1, out_bytes=1) as d:
...         assert d.session("dec").round(bytes([0b001])) == bytes([1 << 0])
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from .errors import DeadlineError, PlacementError, TransportError
from .placement import Placement
from .resolution import ResolvedNode, resolve
from .session import Session, resolve_function


class CoprocessorProcess:
    """A coprocessor served by ``backline coprocessor serve`` in a child process."""

    def __init__(self, transport: str, key: str, functions: Sequence[str], config: str = "",
                 hardware: str = "cpu", ready_timeout: float = 30.0) -> None:
        # -P: the working directory is not put on sys.path, so a file or a *.dist-info there
        # cannot replace a module or a plugin inside the coprocessor.
        cmd = [sys.executable, "-P", "-m", "backline_core.cli", "coprocessor", "serve",
               "--transport", transport, "--key", key, "--hardware", hardware, "--config", config,
               "--parent-pid", str(os.getpid())]
        self._spec_files: list[str] = []
        for fn in functions:
            if len(fn) > 4096:  # a native context can be far past the kernel's 128 KiB argument limit
                fd, path = tempfile.mkstemp(prefix="backline-fn-", suffix=".json")
                with os.fdopen(fd, "w") as fh:
                    fh.write(fn)
                self._spec_files.append(path)
                fn = "@" + path
            cmd += ["--fn", fn]
        self.key = key
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + ready_timeout
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("ready"):
                    self._remove_spec_files()
                    return
                if line == "":
                    break
            elif self.proc.poll() is not None:
                break
        self.kill()
        self._remove_spec_files()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        if self.proc.returncode not in (None, -signal.SIGKILL) or err:
            raise TransportError(f"coprocessor process for key {key!r} failed to start: {err.strip() or line.strip()}")
        raise DeadlineError(f"coprocessor process for key {key!r} was not ready within {ready_timeout} s")

    def _remove_spec_files(self) -> None:
        for path in self._spec_files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._spec_files.clear()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def terminate(self, timeout: float = 10.0) -> int:
        """Ask the server to stop cleanly (SIGTERM); kill it if it does not within ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the server (as a crash would)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


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
    """Live sessions for a placement: one controller session per coprocessor, keyed by its name."""

    def __init__(self, placement: Placement, *, in_bytes: int, out_bytes: int) -> None:
        self.placement = placement
        self.resolution = resolve(placement)
        self.coprocessor_sessions: dict[str, Session] = {}
        self.processes: dict[str, CoprocessorProcess] = {}
        self.controller_sessions: dict[str, Session] = {}
        try:
            for node in self.resolution.coprocessors:
                self._bring_up_coprocessor(node)
            ctl = self.resolution.controller
            for node in self.resolution.coprocessors:
                session = Session(ctl.library, "controller", node.name, ctl.config, node.runs_in)
                self.controller_sessions[node.name] = session
                _bring_up_controller(session, in_bytes, out_bytes)
        except BaseException:
            self.close()
            raise

    def _bring_up_coprocessor(self, node: ResolvedNode) -> None:
        if node.runs_in == "process":
            self.processes[node.name] = CoprocessorProcess(
                self.placement.transport, node.name, [function_spec(node.function)], node.config, node.hardware)
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
        for group in (self.controller_sessions, self.coprocessor_sessions):
            for s in group.values():
                s.destroy()
            group.clear()
        for proc in self.processes.values():
            proc.terminate()
        self.processes.clear()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bring_up_controller(session: Session, in_bytes: int, out_bytes: int) -> None:
    session.connect()
    session.alloc_memory()
    session.exchange_keys()
    session.establish_channel()
    session.set_message_sizes(in_bytes, out_bytes)
    session.start()


def deploy(placement: Placement, *, in_bytes: int, out_bytes: int) -> Deployment:
    """Resolve ``placement`` and bring up its sessions; use as a context manager."""
    return Deployment(placement, in_bytes=in_bytes, out_bytes=out_bytes)
