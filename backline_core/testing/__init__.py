"""Helpers for the tests of transport plugins (most for a networked one, whose coprocessor listens
on an ``Endpoint``), so that each plugin's tests do not carry their own copy.

* :func:`free_port` -- a TCP port nothing listens on now, for a coprocessor's endpoint.
* :func:`endpoint_config` -- the configuration string of a node that uses ``host:port``.
* :class:`ServeProcess` -- ``backline coprocessor serve`` in a child process, as a context
  manager that waits for its ``ready`` line and kills and reaps it at the end.
* :class:`ReadyProcess` -- any command in a child process whose first stdout line is its READY
  line of ``key=value`` words (``backline decoding-server``'s), read with a deadline.
* :func:`one_line` -- the single line a CLI error must be (no traceback).
* :func:`gone` and :func:`children_running` -- whether a process has ended, and which of this
  process's children still run a given program (nothing may be left behind).
* :func:`run_cli` -- ``python -m backline_core ARGS`` in a child process: its rc, stdout and stderr;
  :func:`usage_error` checks that it failed with exit status 2 and one line.
* :class:`TransportUnderTest` -- what :mod:`backline_core.testing.conformance`, the one suite of
  test bodies every transport runs, needs to know of a transport (docs/plugins.md, "Testing a
  transport with the conformance suite").
* :func:`shm_segments` -- the shared-memory segments of /dev/shm (nothing may be left behind).
* :func:`two_namespaces` -- two network namespaces joined by a veth pair, for a test (or a
  benchmark) with its nodes on two "hosts" of this machine (root and iproute2).

The package is also a pytest plugin (the ``pytest11`` entry point ``backline``,
:mod:`backline_core.testing.plugin`): its fixtures are named ``backline_*`` and do nothing in a
run that does not ask for them.

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

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from .._device import BELL_PROGRAM
from .._errors import BacklineError
from .._process import ChildProcess, children, free_port, gone

__all__ = ["BELL_PROGRAM", "CliResult", "NamespacePair", "ReadyProcess", "ServeProcess", "TransportUnderTest",
           "children_running",
           "endpoint_config", "free_port", "gone", "one_line", "run_cli", "shm_segments", "test_secret",
           "two_namespaces", "usage_error"]


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
    """This process's live children whose command line holds one of ``needles`` (none given: every
    one), as "PID: command"."""
    found = []
    for pid in children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if not needles or any(n in cmd for n in needles):
            shown = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid}: {shown}")
    return found


def endpoint_config(host: str, port: int | None, **extra: object) -> str:
    """The configuration string of a node whose coprocessor is at ``host:port``, with ``extra`` keys after
    (``port`` None: a transport without endpoints, only the ``extra`` keys).

    >>> endpoint_config("127.0.0.1", 18515, timeout_ms=10000, tls="shm", secret_file="/run/s")
    'host=127.0.0.1;port=18515;timeout_ms=10000;tls=shm;secret_file=/run/s'
    >>> endpoint_config("127.0.0.1", None, slots=8)
    'slots=8'
    """
    where = [] if port is None else [f"host={host}", f"port={port}"]
    if port is not None and "secret_file" not in extra:
        extra = {**extra, "secret_file": test_secret()}
    return ";".join([*where, *(f"{k}={v}" for k, v in extra.items() if v is not None)])


_test_secret: Any = None


def test_secret() -> str:
    """The secret file this test process gives both ends of every networked pair it configures
    (:func:`endpoint_config` adds it as ``secret_file``; pass ``secret_file=None`` for none):
    made on first use in a private folder, removed when the process exits."""
    global _test_secret
    if _test_secret is None:
        import atexit

        from .._trust import DeploymentSecret

        _test_secret = DeploymentSecret()
        atexit.register(_test_secret.remove)
    return _test_secret.path


test_secret.__test__ = False  # type: ignore[attr-defined]  # not a test, whatever pytest's name rules say


class CliResult(NamedTuple):
    """What a ``python -m backline_core`` child did: its exit status and its output."""

    rc: int
    stdout: str
    stderr: str


def run_cli(*args: str, timeout: float = 300.0, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None) -> CliResult:
    """Run ``python -m backline_core ARGS`` (this interpreter) to its end, at most ``timeout`` seconds."""
    proc = subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else dict(env), cwd=cwd)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def usage_error(result: CliResult | subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The one line of a command that failed on bad input: exit status 2, one line on stderr (no
    traceback) holding every one of ``fragments``; AssertionError otherwise."""
    rc = result.rc if isinstance(result, CliResult) else result.returncode
    assert rc == 2, f"want exit status 2, got {rc}:\n{result.stdout}\n{result.stderr}"
    line = one_line(result.stderr)
    missing = [f for f in fragments if f not in line]
    assert not missing, f"{missing} not in {line!r}"
    return line


#: Where shared-memory segments live; the memcpy transport keeps a user's in a directory there.
SHM_ROOT = "/dev/shm"


def shm_segments(root: str = SHM_ROOT) -> set[str]:
    """The names under ``root`` and one directory level below it (``backline-UID/KEY``)."""
    found: set[str] = set()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        found.add(entry.name)
        try:
            if entry.is_dir(follow_symlinks=False):
                found.update(f"{entry.name}/{sub}" for sub in os.listdir(entry.path))
        except OSError:
            continue
    return found


class NamespacePair(NamedTuple):
    """Two network namespaces joined by a veth pair: ``a`` holds ``address_a`` on its end ``veth_a``,
    ``b`` holds ``address_b`` on ``veth_b``."""

    a: str
    b: str
    address_a: str
    address_b: str
    veth_a: str
    veth_b: str

    def exec_in(self, namespace: str) -> list[str]:
        """The prefix that runs a command in ``namespace`` (``ip netns exec NAMESPACE``)."""
        return ["ip", "netns", "exec", namespace]

    def pids(self, namespace: str) -> list[int]:
        """The processes in ``namespace`` now (``ip netns pids``): a test checks none is left."""
        done = subprocess.run(["ip", "netns", "pids", namespace], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=30)
        return [int(p) for p in done.stdout.split()]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise BacklineError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def two_namespaces(subnet: str) -> Iterator[NamespacePair]:
    """Network namespaces ``bl-a-TAG`` (``SUBNET.1/24``) and ``bl-b-TAG`` (``SUBNET.2/24``) joined by
    a veth pair, the veth and ``lo`` up in each; both (and the veth with them) are deleted however the
    block exits. Needs root and iproute2 (``ip``); a step that fails raises BacklineError.

    ``subnet`` is the first three octets, e.g. ``"10.203.0"``: give each concurrent user its own."""
    tag = uuid.uuid4().hex[:6]
    # an interface name has at most 15 characters
    pair = NamespacePair(f"bl-a-{tag}", f"bl-b-{tag}", f"{subnet}.1", f"{subnet}.2", f"bla{tag}", f"blb{tag}")
    made: list[str] = []
    try:
        for ns in (pair.a, pair.b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", pair.veth_a, "type", "veth", "peer", "name", pair.veth_b)
        for ns, dev, address in ((pair.a, pair.veth_a, pair.address_a), (pair.b, pair.veth_b, pair.address_b)):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        for ns in made:  # deleting a namespace deletes the veth end in it, and so the pair
            subprocess.run(["ip", "netns", "del", ns], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        # before the namespaces moved, the veth was in this one
        subprocess.run(["ip", "link", "del", pair.veth_a], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    if tag in left:  # checked only when the block succeeded: its own error says more
        raise BacklineError(f"network namespaces left behind: {left}")


@dataclass(frozen=True)
class TransportUnderTest:
    """A transport as :mod:`backline_core.testing.conformance` runs it: a transport's conftest.py
    returns one from its ``backline_transport`` fixture (parametrize the fixture for variants,
    e.g. one per ``tls``).

    ``name``: the transport; ``runs_in``: where the suite's coprocessors run (one of the places
    the transport declares; default its first); ``init_args``: keys both nodes get (e.g.
    ``{"tls": "tcp"}``); ``host``: the endpoint's host for a transport that needs one;
    ``timeout_ms``: the controller's round deadline (generous: test machines are shared);
    ``bad_values``: the transport's own keys with values it must refuse, as
    ``(init_args, [words the refusal holds])``; ``peer_gone``: words of which the
    PeerError of a round to a killed coprocessor holds one; ``second_controller_says``: what
    refusing a controller from another process while one is connected says; ``id``: the
    variant's pytest id.
    What the registry says of the transport (where its coprocessors may run, whether they need an
    endpoint, whether it has a bench floor) is read from it, not repeated here.
    """

    name: str
    runs_in: str | None = None
    init_args: Mapping[str, object] = field(default_factory=dict)
    host: str = "127.0.0.1"
    timeout_ms: int = 10000
    bad_values: Sequence[tuple[Mapping[str, object], Sequence[str]]] = ()
    peer_gone: Sequence[str] = ("closed",)
    second_controller_says: str = "another controller"
    id: str = ""

    @property
    def record(self) -> Any:
        """The registry's record of the transport's CPU coprocessor part (``backline_core.Transport``)."""
        from .. import plugins

        return plugins.transport_backend(self.name, "cpu", "coprocessor")

    @property
    def places(self) -> tuple[str, ...]:
        """Every ``runs_in`` the transport declares."""
        return tuple(self.record.runs_in)

    @property
    def place(self) -> str:
        """Where the suite's coprocessors run."""
        return self.runs_in or self.places[0]

    @property
    def networked(self) -> bool:
        """Whether its coprocessors listen on an ``Endpoint``."""
        return bool(self.record.needs_endpoint)

    @property
    def in_process(self) -> bool:
        """Whether the suite's coprocessors run in the test's own process."""
        return self.place in ("thread", "controller-thread")

    def port(self) -> int | None:
        """A free port for a coprocessor's endpoint (None for a transport without endpoints)."""
        return free_port(self.host) if self.networked else None

    def config(self, port: int | None, **extra: object) -> str:
        """A controller's configuration string for the coprocessor at ``port``."""
        return endpoint_config(self.host, port, **{"timeout_ms": self.timeout_ms, **self.init_args, **extra})

    def coprocessor_config(self, port: int | None, **extra: object) -> str:
        """A coprocessor's configuration string at ``port``."""
        return endpoint_config(self.host, port, **{**self.init_args, **extra})

    def placement(self, key: str, port: int | None, fn: Any = "steane", runs_in: str | None = None,
                  **init_args: object) -> Any:
        """A Placement of one controller and one coprocessor ``key`` serving ``fn`` (``init_args``: the
        coprocessor's extra keys)."""
        from .. import Controller, Coprocessor, Endpoint, Placement

        endpoint = Endpoint(host=self.host, port=port) if port is not None else None
        secret = {"secret_file": test_secret()} if port is not None else {}
        init_args = {**secret, **init_args}
        return Placement(controller=Controller(init_args={"timeout_ms": self.timeout_ms, **secret, **self.init_args}),
                         transport=self.name,
                         coprocessors=[Coprocessor(name=key, coprocessor_fn=fn, runs_in=runs_in or self.place,
                                                   endpoint=endpoint, init_args={**self.init_args, **init_args})])

    def serve(self, key: str, port: int | None, *fns: str, **extra: object) -> ServeProcess:
        """``backline coprocessor serve`` of this transport for ``key`` (``fns``; default steane)."""
        return ServeProcess(self.name, port, *(fns or ("steane",)), key=key, host=self.host,
                            **{**self.init_args, **extra})

    def __str__(self) -> str:
        return f"{self.name} ({self.id})" if self.id else self.name


class ServeProcess:
    """``backline coprocessor serve --transport TRANSPORT`` on ``host:port`` in a child process.

    ``fns``: the coprocessor functions it serves (``--fn``, in order; default ``echo``);
    ``key``: its session key; ``extra``: more configuration keys (:func:`endpoint_config`;
    ``port`` None: a transport without endpoints, whose config is only ``extra``).
    ``wrapper`` runs the command inside another (``["ip", "netns", "exec", "b"]``); ``stderr``
    is a pipe unless a file is given (to read the coprocessor's notes afterwards).

    Entering waits up to ``start_timeout`` seconds for its ``ready`` line (kept in
    :attr:`ready`) and raises AssertionError with what it said if none comes; leaving stops it
    if it still runs (SIGTERM, then SIGKILL after 10 s), reaps it and closes its pipes, so
    nothing is left however the test went. :attr:`proc` is the ``Popen``, for a test that
    kills or signals it itself.
    """

    def __init__(self, transport: str, port: int | None, *fns: str, key: str = "dec", host: str = "127.0.0.1",
                 wrapper: Sequence[str] = (), stderr: int | IO[str] = subprocess.PIPE, start_timeout: float = 120.0,
                 **extra: object) -> None:
        self.command = [*wrapper, sys.executable, "-m", "backline_core", "coprocessor", "serve", "--transport",
                        transport, "--key", key, "--config", endpoint_config(host, port, **extra)]
        for fn in fns or ("echo",):
            self.command += ["--fn", fn]
        self._stderr = stderr
        self.start_timeout = start_timeout
        self.child: ChildProcess | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = ""

    def __enter__(self) -> ServeProcess:
        stderr = None if self._stderr == subprocess.PIPE else self._stderr
        self.child = ChildProcess(self.command, name=f"coprocessor serve ({' '.join(self.command)})", stderr=stderr,
                                  ready=r"^ready\b.*")
        self.proc = self.child.proc
        try:
            self.ready = self.child.wait_ready(self.start_timeout).group(0) + "\n"
        except BacklineError as exc:
            self.__exit__()
            raise AssertionError(f"{' '.join(self.command)} did not start: {exc}; it said {self._said()!r}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child is not None:  # SIGTERM first: a coprocessor then removes what it made (memcpy's segment)
            self.child.terminate(10.0)

    def _said(self) -> str:
        """What the child wrote (its last lines; its stderr file, if it was given one)."""
        said = "\n".join(self.child.output_tail()) if self.child is not None else ""
        name = getattr(self._stderr, "name", None)
        if isinstance(name, str):
            try:
                self._stderr.flush()
                said += Path(name).read_text()
            except (OSError, ValueError):
                pass
        return said


class ReadyProcess:
    """``argv`` in a child process whose first stdout line must start with ``ready``.

    That line's ``key=value`` words are :attr:`fields`; the lines after it queue in :attr:`lines`
    (``None`` once stdout closes). Without such a line in ``timeout`` seconds the child is killed
    and AssertionError says what came instead. :meth:`stop` signals it and returns what it said
    after; :meth:`kill` kills it (if it still runs), reaps it and closes its pipes.
    """

    def __init__(self, argv: Sequence[str], ready: str, *, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None or not line.startswith(ready):
            exited = self.proc.poll() is not None  # its stderr is then complete: reading it cannot block
            err = self.proc.stderr.read() if exited and self.proc.stderr else ""
            self.kill()
            raise AssertionError(f"no {ready.strip()} line from {' '.join(argv)}: {line!r}; stderr {err!r}")
        self.fields = dict(tok.split("=", 1) for tok in line.split()[1:])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, list[str], str]:
        """Send ``signum`` and wait for the exit: its status, the stdout lines not yet taken, its stderr."""
        self.proc.send_signal(signum)
        rc = self.proc.wait(timeout=self.timeout)
        self.reader.join(self.timeout)
        rest = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        return rc, rest, self.proc.stderr.read() if self.proc.stderr else ""

    def kill(self) -> None:
        """Kill it if it still runs, reap it and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.timeout)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
