"""Shared fixtures of the memcpy-transport tests.

Every test gets its own session key (``key``), so no two tests ever pair with each other
or trip over each other's shared memory, and the ``key`` fixture checks at teardown that
no segment ``<key>*`` was left behind in this user's segment directory
(``/dev/shm/backline-<euid>``, see docs/wire-format.md). ``cleanup`` destroys sessions
and kills coprocessor processes a test created even when the test fails half-way, and a
watchdog turns any hang into a traceback and an exit instead of a stuck run.
"""

from __future__ import annotations

import faulthandler
import fcntl
import os
import struct
import textwrap
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from backline_core._deployment import CoprocessorProcess
from backline_core.testing import TransportUnderTest
from backline_core._abi import get_library
from backline_core._session import Session

#: Where memcpy keeps this user's process segments (one file per key; memcpy.c).
SHM_DIR = f"/dev/shm/backline-{os.geteuid()}"
#: Last resort against a hang: a test running this long dumps every thread's stack and
#: ends the run. Above the longest subprocess timeout (300 s), so those report first.
WATCHDOG_S = 330


@pytest.fixture(params=["controller-thread", "thread", "process"])
def backline_transport(request: pytest.FixtureRequest) -> TransportUnderTest:
    """memcpy for the conformance suite (test_conformance.py), its coprocessors in each place it has
    but an executor's (the suite's executor test puts one there)."""
    return TransportUnderTest("memcpy", runs_in=request.param, peer_gone=("died", "closed", "gone"),
                              second_controller_says="already held", id=request.param,
                              bad_values=[({"cpu": 99999}, ["cpu=99999", "not a CPU"]),
                                          ({"cpu": -2}, ["cpu=-2", "from 0"])])


def shm_path(key: str) -> str:
    """The file of ``key``'s process segment."""
    return os.path.join(SHM_DIR, key)


def backline_shm(prefix: str = "") -> set[str]:
    """Segments in this user's segment directory whose key starts with ``prefix``."""
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(prefix)}
    except FileNotFoundError:  # no process coprocessor of this user has run yet
        return set()


@pytest.fixture(name="shm_path")
def _shm_path() -> Callable[[str], str]:
    """``shm_path(key)``: the file of ``key``'s process segment."""
    return shm_path


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    """Nothing may hang: past WATCHDOG_S the run dumps all stacks and exits."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def key() -> Iterator[str]:
    """A session key unique to this test; afterwards no shared memory for it may remain."""
    k = f"bltest-{uuid.uuid4().hex[:12]}"
    yield k
    left = backline_shm(k)
    for name in left:  # do not let one failure pollute /dev/shm for later runs
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except OSError:
            pass
    assert not left, f"shared memory left behind for key {k!r}: {sorted(left)}"


def served(name: str) -> bool:
    """Whether a live coprocessor holds segment ``name`` (its lock on byte 0; memcpy.c)."""
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)  # struct flock, l_pid 0
        return struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, query))[0] != fcntl.F_UNLCK
    except OSError:
        return False
    finally:
        os.close(fd)


#: Keys the bench chooses itself (backline_core/bench.py: ``bench-<pid>``).
BENCH_PREFIX = "bench-"


@pytest.fixture
def no_new_shm() -> Iterator[None]:
    """For tests whose keys are chosen elsewhere (the bench): no new bench segment may remain.

    The directory is this user's, shared with any other run at the same time: only bench
    keys are looked at (another test's hand-made files are not this fixture's to remove),
    and a new one a live coprocessor still holds is someone's running bench, not a leftover."""
    before = backline_shm(BENCH_PREFIX)
    yield
    left = {name for name in backline_shm(BENCH_PREFIX) - before if not served(name)}
    for name in left:
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except OSError:
            pass
    assert not left, f"shared memory left behind: {sorted(left)}"


@pytest.fixture
def cleanup() -> Iterator[Callable[[Any], Any]]:
    """Register sessions / CoprocessorProcesses / deployments; torn down in reverse order."""
    items: list[Any] = []

    def add(obj: Any) -> Any:
        items.append(obj)
        return obj

    yield add
    for obj in reversed(items):
        try:
            if isinstance(obj, CoprocessorProcess):
                obj.terminate(timeout=10)  # SIGTERM: the server removes its shared memory
            elif hasattr(obj, "destroy"):
                obj.destroy()
            elif hasattr(obj, "close"):
                obj.close()
        except Exception:  # teardown must go on; the test itself reports failures
            pass


@pytest.fixture
def fn_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module of coprocessor functions for ``coprocessor serve`` children.

    ``reverse`` is bound to decoder_id 1 and ``steane2`` (the native Steane lookup) to 2,
    so ``--fn echo --fn M:reverse --fn M:steane2`` serves echo on 0, reverse on 1 and
    steane on 2, as the in-process tests bind them.
    """
    name = f"bl_test_fns_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        from backline_core._coprocessor_function import CoprocessorFunction

        def _reverse(decoder_id, payload):
            return payload[::-1]

        reverse = CoprocessorFunction(name="reverse", python=_reverse, decoder_ids=(1,))
        steane2 = CoprocessorFunction(name="steane2", library={get_library()!r}, symbol="bl_fn_steane",
                                      decoder_ids=(2,))
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return name


@pytest.fixture
def coprocessor(key: str, cleanup: Callable[[Any], Any]) -> Callable[..., Any]:
    """Bring up a coprocessor on ``key``: a started Session for controller-thread/thread, a
    ``backline coprocessor serve`` child (CoprocessorProcess) for process."""

    def make(runs_in: str, functions: Any = ("echo",), config: str = "") -> Any:
        if runs_in == "process":
            return cleanup(CoprocessorProcess("memcpy", key, list(functions), config, ready_timeout=30))
        return cleanup(Session.open("memcpy", "coprocessor", key, config=config, runs_in=runs_in,
                                    functions=list(functions)))

    return make


@pytest.fixture
def controller(key: str, cleanup: Callable[[Any], Any]) -> Callable[..., Session]:
    """Open a started controller Session on ``key`` (destroyed after the test); ``runs_in``:
    where it expects its coprocessor (None: wherever it is found)."""

    def make(config: str = "", in_bytes: int = 8, out_bytes: int = 8, runs_in: str | None = None) -> Session:
        return cleanup(Session.open("memcpy", "controller", key, config=config, runs_in=runs_in, in_bytes=in_bytes,
                                    out_bytes=out_bytes))

    return make


@pytest.fixture
def pair(coprocessor: Callable[..., Any], controller: Callable[..., Session]) -> Callable[..., tuple[Any, Session]]:
    """A coprocessor (see ``coprocessor``) and a controller paired on ``key``."""

    def make(runs_in: str, functions: Any = ("echo",), *, cop_config: str = "", ctl_config: str = "",
             in_bytes: int = 8, out_bytes: int = 8) -> tuple[Any, Session]:
        cop = coprocessor(runs_in, functions, cop_config)
        return cop, controller(ctl_config, in_bytes, out_bytes)

    return make
