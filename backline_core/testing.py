"""Helpers for the tests of networked transport plugins (a transport whose coprocessor listens
on an ``Endpoint``), so that each plugin's tests do not carry their own copy.

* :func:`free_port` -- a TCP port nothing listens on now, for a coprocessor's endpoint.
* :func:`endpoint_config` -- the configuration string of a node that uses ``host:port``.
* :class:`ServeProcess` -- ``backline coprocessor serve`` in a child process, as a context
  manager that waits for its ``ready`` line and kills and reaps it at the end.
* :func:`one_line` -- the single line a CLI error must be (no traceback).
* :func:`gone` and :func:`children_running` -- whether a process has ended, and which of this
  process's children still run a given program (nothing may be left behind).

For example (``my-transport`` being the plugin's transport)::

    from backline_core import Session
    from backline_core.testing import ServeProcess, endpoint_config, free_port

    def test_a_round() -> None:
        port = free_port("127.0.0.1")
        with ServeProcess("my-transport", port, "steane", host="127.0.0.1", timeout_ms=10000):
            s = Session.open("my-transport", "controller", "dec", in_bytes=1, out_bytes=1,
                             config=endpoint_config("127.0.0.1", port, timeout_ms=10000))
            try:
                assert s.round(b"\\x03") == b"\\x02"
            finally:
                s.destroy()

It imports only the standard library and the core's process kit: it works with the core alone,
and starts nothing until it is called.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ._device import BELL_PROGRAM
from ._process import children, free_port, gone

__all__ = ["BELL_PROGRAM", "ServeProcess", "children_running", "endpoint_config", "free_port", "gone", "one_line"]


def one_line(stderr: str) -> str:
    """The one non-blank line of ``stderr``; AssertionError if there are more, or a traceback.

    >>> one_line("backline: error: --port 0: give 1 to 65535\\n")
    'backline: error: --port 0: give 1 to 65535'
    """
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"want one line, got:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


def children_running(*needles: bytes) -> list[str]:
    """This process's live children whose command line holds one of ``needles``, as "PID: command"."""
    found = []
    for pid in children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if any(n in cmd for n in needles):
            shown = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid}: {shown}")
    return found


def endpoint_config(host: str, port: int, **extra: object) -> str:
    """The configuration string of a node whose coprocessor is at ``host:port``, with ``extra`` keys after.

    >>> endpoint_config("127.0.0.1", 18515, timeout_ms=10000, tls="shm")
    'host=127.0.0.1;port=18515;timeout_ms=10000;tls=shm'
    """
    return ";".join([f"host={host}", f"port={port}", *(f"{k}={v}" for k, v in extra.items())])


class ServeProcess:
    """``backline coprocessor serve --transport TRANSPORT`` on ``host:port`` in a child process.

    ``fns``: the coprocessor functions it serves (``--fn``, in order; default ``echo``);
    ``key``: its session key; ``extra``: more configuration keys (:func:`endpoint_config`).
    ``wrapper`` runs the command inside another (``["ip", "netns", "exec", "b"]``); ``stderr``
    is a pipe unless a file is given (to read the coprocessor's notes afterwards).

    Entering waits up to ``start_timeout`` seconds for its ``ready`` line (kept in
    :attr:`ready`) and raises AssertionError with what it said if none comes; leaving kills
    it if it still runs, reaps it and closes its pipes, so nothing is left however the test
    went. :attr:`proc` is the ``Popen``, for a test that kills or signals it itself.
    """

    def __init__(self, transport: str, port: int, *fns: str, key: str = "dec", host: str = "127.0.0.1",
                 wrapper: Sequence[str] = (), stderr: int | IO[str] = subprocess.PIPE, start_timeout: float = 120.0,
                 **extra: object) -> None:
        self.command = [*wrapper, sys.executable, "-m", "backline_core", "coprocessor", "serve", "--transport",
                        transport, "--key", key, "--config", endpoint_config(host, port, **extra)]
        for fn in fns or ("echo",):
            self.command += ["--fn", fn]
        self._stderr = stderr
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.ready = ""

    def __enter__(self) -> ServeProcess:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        try:
            readable, _, _ = select.select([self.proc.stdout], [], [], self.start_timeout)
            self.ready = self.proc.stdout.readline() if readable else ""
            if not self.ready.startswith("ready"):
                exited = self.proc.poll()
                if exited is None and readable and not self.ready:  # its stdout closed: it is exiting
                    try:
                        exited = self.proc.wait(5)
                    except subprocess.TimeoutExpired:
                        pass
                self._end()
                how = f"exited with status {exited}" if exited is not None else \
                    f"did not say ready within {self.start_timeout} s"
                raise AssertionError(f"{' '.join(self.command)} did not start: it {how}; stdout {self.ready!r}, "
                                     f"stderr {self._said()!r}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self._end()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def _said(self) -> str:
        """What the child wrote on stderr (a pipe, or the file it was given)."""
        if self.proc.stderr is not None:
            return self.proc.stderr.read()
        name = getattr(self._stderr, "name", None)
        if isinstance(name, str):
            try:
                self._stderr.flush()
                return Path(name).read_text()
            except (OSError, ValueError):
                pass
        return "(its stderr went elsewhere)"

    def _end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
