"""Whether memcpy's cross-process path can be trusted: what a controller or a coprocessor
does when it meets a segment it did not expect -- another build's, someone else's, one
nobody serves -- and whether a dead peer, zombie or not, is seen dead at once.

A segment is the file ``/dev/shm/backline-<euid>/<key>`` (memcpy.c, docs/wire-format.md).
Tests that break the segment directory on purpose point ``BACKLINE_MEMCPY_DIR`` at a
directory of their own (``segment_dir``), so the real one other runs use is never touched.
Whatever could crash runs in a subprocess, so a segfault is a failed test, not a dead run.
Time bounds are hang guards with wide margins, not performance checks.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator

import pytest

from backline_core._errors import (
    AbiError,
    DeadlineError,
    KeyTakenError,
    PeerError,
    PlacementError,
    TransportError,
)
from backline_core._abi import lib
from backline_core._placement import Controller, Coprocessor, Placement
from backline_core._process import ChildProcess, zombie  # zombie: exited, unreaped, no thread still on its way out
from backline_core._resolution import resolve
from backline_core._session import Session

SEGMENT_DIR = f"/dev/shm/backline-{os.geteuid()}"
DIR_ENV = "BACKLINE_MEMCPY_DIR"
SUBPROCESS_TIMEOUT_S = 60
HANG_GUARD_S = 5.0

# The control block at the start of a segment: memcpy.c's struct ctl (documented in
# docs/wire-format.md, "memcpy control block"); it is memcpy's own, not an ABI constant.
REGION_MAGIC = 0x4D454D4350593031  # "MEMCPY01"
CTL_BYTES = 384
_CTL = struct.Struct("<QIIIiiIQ128s")  # magic, abi, slots, slot_bytes, runs_in, coprocessor pid, ready, size, key

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a file or directory of another user takes chown (root)")
needs_setuid = pytest.mark.skipif(os.geteuid() != 0, reason="running a coprocessor as another user takes setuid (root)")
FOREIGN_UID = 65534  # "nobody" on most systems; any uid that is not ours will do


def user_text(uid: int) -> str:
    """How memcpy names a uid in its messages."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def run_python(body: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body), *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S, env=env)


def region_bytes(slots: int, slot_bytes: int) -> int:
    return CTL_BYTES + 2 * slots * slot_bytes


def ensure_segment_dir() -> None:
    """The real segment directory, as a coprocessor would make it (if none has yet)."""
    try:
        os.mkdir(SEGMENT_DIR, 0o700)
        os.chmod(SEGMENT_DIR, 0o700)
    except FileExistsError:
        pass


def craft_segment(path: str, key: str, *, magic: int = REGION_MAGIC, abi: int | None = None, slots: int = 4,
                  slot_bytes: int = 64, size: int | None = None, file_size: int | None = None, pid: int = 0,
                  ready: int = 1, mode: int = 0o600) -> None:
    """Write a segment by hand, the way no coprocessor holds it (no lock)."""
    region = region_bytes(slots, slot_bytes)
    header = _CTL.pack(magic, lib.bl_abi_version() if abi is None else abi, slots, slot_bytes, lib.BL_RUNS_PROCESS,
                       pid, ready, region if size is None else size, key.encode())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, header.ljust(region if file_size is None else file_size, b"\0"))
    finally:
        os.close(fd)
    os.chmod(path, mode)


@pytest.fixture
def made(key: str) -> Iterator[Callable[[str], str]]:
    """Register paths a test makes by hand; removed afterwards, before the key fixture checks."""
    paths: list[str] = []

    def add(path: str) -> str:
        paths.append(path)
        return path

    yield add
    for path in reversed(paths):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass


@pytest.fixture
def segment_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A segment directory of this test's own (not yet created), through BACKLINE_MEMCPY_DIR."""
    base = tempfile.mkdtemp(prefix="bltest-", dir="/dev/shm")
    path = os.path.join(base, "segments")
    monkeypatch.setenv(DIR_ENV, path)
    yield path
    for root, dirs, _ in os.walk(base):  # undo chmod games so the tree can be removed
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(base, ignore_errors=True)


def wait_for_zombie(pid: int) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not zombie(pid):
        assert time.monotonic() < deadline, f"pid {pid} did not become a zombie"
        time.sleep(0.005)


# A controller in a subprocess (a crash there is a return code, not a dead test run); it
# prints the exception it met, or says it connected.
_CONNECT = """
    import sys
    from backline_core._session import Session
    try:
        s = Session.open("memcpy", "controller", sys.argv[1], config=sys.argv[2], in_bytes=8, out_bytes=8)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        sys.exit(0)
    print("connected", flush=True)
    s.destroy()
    sys.exit(3)
"""


def connect_in_subprocess(key: str, config: str = "connect_timeout_ms=500") -> str:
    result = run_python(_CONNECT, key, config)
    assert result.returncode == 0, f"the controller exited with {result.returncode}:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


# ---- 1. a segment of another ABI or size ----------------------------------------------------

_FOREIGN_LAYOUTS = {
    "abi": (dict(abi=lib.bl_abi_version() + 97),
            [f"ABI {lib.bl_abi_version() + 97}", f"this controller is ABI {lib.bl_abi_version()}", "restart"]),
    "file-size": (dict(file_size=region_bytes(4, 64) + 4096), [f"is {region_bytes(4, 64) + 4096} bytes", "needs"]),
    "header-size": (dict(size=region_bytes(4, 64) - 64), [f"control block says {region_bytes(4, 64) - 64}", "needs"]),
    "geometry": (dict(slots=3), ["impossible ring geometry", "slots=3"]),
    "magic": (dict(magic=int.from_bytes(b"NOTMINE!", "little")), ["not a memcpy segment", "magic"]),
}


@pytest.mark.defect('a controller meeting a segment of another ABI or size read the unmapped control block and segfaulted')
@pytest.mark.parametrize("case", list(_FOREIGN_LAYOUTS))
def test_controller_meeting_a_foreign_layout_gets_a_clear_error(key, made, shm_path, case):
    # Before: try_shm read the ABI from the mapping it had just unmapped -- a segfault.
    fields, fragments = _FOREIGN_LAYOUTS[case]
    ensure_segment_dir()
    craft_segment(made(shm_path(key)), key, **fields)
    out = connect_in_subprocess(key)
    assert out.startswith("AbiError:") and "BL_EABI" in out, out
    assert shm_path(key) in out, out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in {out!r}"
    assert os.path.exists(shm_path(key)), "another build's segment is reported, not removed"


def test_coprocessor_leaves_another_builds_segment_alone(key, made, shm_path):
    ensure_segment_dir()
    craft_segment(made(shm_path(key)), key, abi=lib.bl_abi_version() + 1, pid=os.getpid())
    with pytest.raises(AbiError) as exc:
        Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])
    msg = str(exc.value)
    assert "another build" in msg and shm_path(key) in msg and "remove it" in msg, msg
    assert os.path.exists(shm_path(key))


# ---- 2. trust: the directory ---------------------------------------------------------------------


def test_segments_live_in_a_private_directory_of_this_user(key, cleanup, shm_path):
    cop = cleanup(Session.create("memcpy", "coprocessor", key, runs_in="process"))
    cop.connect()
    d = os.lstat(SEGMENT_DIR)
    assert stat.S_ISDIR(d.st_mode) and d.st_uid == os.geteuid() and stat.S_IMODE(d.st_mode) == 0o700
    s = os.lstat(shm_path(key))
    assert stat.S_ISREG(s.st_mode) and s.st_uid == os.geteuid() and stat.S_IMODE(s.st_mode) == 0o600
    cop.destroy()
    assert not os.path.exists(shm_path(key))


def test_directory_and_segment_modes_do_not_depend_on_the_umask(key, segment_dir, cleanup):
    old = os.umask(0o277)  # would make mkdir's 0700 a 0500 and the segment's 0600 a 0400
    try:
        cop = cleanup(Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"]))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(segment_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(segment_dir, key)).st_mode) == 0o600
    with Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8) as ctl:
        assert ctl.round(b"private") == b"private"
    cop.destroy()
    assert os.listdir(segment_dir) == []


@pytest.mark.parametrize("role", ["coprocessor", "controller"])
@pytest.mark.parametrize("mode", [0o777, 0o750, 0o701])
def test_directory_open_to_others_is_refused(key, segment_dir, role, mode):
    os.mkdir(segment_dir, 0o700)
    os.chmod(segment_dir, mode)
    msg = _refused(role, key)
    assert segment_dir in msg and f"mode is 0{mode:o}" in msg and f"chmod 700 {segment_dir}" in msg, msg
    assert os.listdir(segment_dir) == [], "nothing was created in a directory others can write to"


@pytest.mark.parametrize("role", ["coprocessor", "controller"])
@pytest.mark.parametrize("trailing_slash", [False, True], ids=["plain", "trailing-slash"])
def test_directory_that_is_a_symlink_is_refused(key, segment_dir, monkeypatch, role, trailing_slash):
    target = os.path.join(os.path.dirname(segment_dir), "elsewhere")
    os.mkdir(target, 0o700)  # a fine directory: only the link is wrong
    os.symlink(target, segment_dir)
    if trailing_slash:  # "dir/" makes the kernel follow a link even with O_NOFOLLOW
        monkeypatch.setenv(DIR_ENV, segment_dir + "/")
    msg = _refused(role, key)
    assert segment_dir in msg and "symbolic link" in msg and f"rm {segment_dir}" in msg, msg
    assert os.listdir(target) == []


@pytest.mark.parametrize("role", ["coprocessor", "controller"])
def test_directory_path_that_is_a_file_is_refused(key, segment_dir, role):
    with open(segment_dir, "w"):
        pass
    msg = _refused(role, key)
    assert segment_dir in msg and "a regular file" in msg and "not a directory" in msg, msg


@pytest.mark.defect('memcpy trusted any segment name another local user could create')
@needs_root
@pytest.mark.parametrize("role", ["coprocessor", "controller"])
def test_directory_of_another_user_is_refused(key, segment_dir, role):
    # Someone else made /dev/shm/backline-<our uid> first: using it would let them read,
    # replace or block every segment of ours.
    os.mkdir(segment_dir, 0o700)
    os.chown(segment_dir, FOREIGN_UID, FOREIGN_UID)
    msg = _refused(role, key)
    assert segment_dir in msg and f"belongs to {user_text(FOREIGN_UID)}" in msg, msg
    assert f"not to this user ({user_text(os.geteuid())})" in msg and "rm -r" in msg, msg


def test_directory_override_must_be_absolute(key, monkeypatch):
    monkeypatch.setenv(DIR_ENV, "relative/dir")
    with pytest.raises(TransportError, match=f"{DIR_ENV}=relative/dir: must be an absolute path"):
        Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])


def _refused(role: str, key: str) -> str:
    """The error a session of ``role`` on ``key`` gets at connect; it must not be a timeout."""
    t0 = time.monotonic()
    with pytest.raises(TransportError) as exc:
        if role == "coprocessor":
            Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])
        else:
            Session.open("memcpy", "controller", key, config="connect_timeout_ms=3000", in_bytes=8, out_bytes=8)
    assert not isinstance(exc.value, DeadlineError), f"waited instead of refusing: {exc.value}"
    assert time.monotonic() - t0 < 2.0
    return str(exc.value)


def test_in_process_pairs_do_not_need_the_segment_directory(key, segment_dir):
    os.mkdir(segment_dir, 0o777)
    os.chmod(segment_dir, 0o777)  # unusable, and irrelevant to a coprocessor in this process
    for runs_in in ("controller-thread", "thread"):
        k = f"{key}-{runs_in}"
        with Session.open("memcpy", "coprocessor", k, runs_in=runs_in, functions=["echo"]), \
                Session.open("memcpy", "controller", k, in_bytes=8, out_bytes=8, runs_in=runs_in) as ctl:
            assert ctl.round(runs_in.encode()[:8]) == runs_in.encode()[:8]


# ---- 2. trust: the segment -------------------------------------------------------------------------


@pytest.mark.defect("a controller opened any user's /backline.<key> it could read and write, with no owner check")
@needs_root
def test_controller_refuses_a_segment_of_another_user(key, coprocessor, shm_path):
    # Even a live, well-formed segment is not ours to talk to if another user owns it.
    coprocessor("process")
    os.chown(shm_path(key), FOREIGN_UID, FOREIGN_UID)
    try:
        out = connect_in_subprocess(key)
    finally:
        os.chown(shm_path(key), os.geteuid(), os.getegid())
    assert out.startswith("TransportError:") and shm_path(key) in out, out
    assert f"belongs to {user_text(FOREIGN_UID)}" in out and "not to this user" in out and "Remove it" in out, out


@pytest.mark.defect('a controller used a segment other users could read or write')
@pytest.mark.parametrize("mode", [0o666, 0o640, 0o604])
def test_controller_refuses_a_segment_open_to_others(key, coprocessor, shm_path, mode):
    coprocessor("process")
    os.chmod(shm_path(key), mode)
    try:
        out = connect_in_subprocess(key)
    finally:
        os.chmod(shm_path(key), 0o600)
    assert out.startswith("TransportError:") and shm_path(key) in out, out
    assert f"mode is 0{mode:o}" in out and "must be 0600" in out, out


@pytest.mark.defect('a controller followed whatever the segment name pointed at')
@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_controller_refuses_a_segment_that_is_not_a_regular_file(key, made, shm_path, kind):
    ensure_segment_dir()
    path = made(shm_path(key))
    if kind == "symlink":  # to a well-formed segment: the link itself is what is refused
        target = made(shm_path(f"{key}-target"))
        craft_segment(target, key, pid=os.getpid())
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        os.mkdir(path, 0o700)
    out = connect_in_subprocess(key)
    expected = {"symlink": "a symbolic link", "fifo": "a FIFO", "directory": "a directory"}[kind]
    assert out.startswith("TransportError:") and f"refusing {path}: it is {expected}" in out, out


@needs_root
def test_coprocessor_refuses_a_name_another_user_put_on_its_key(key, made, shm_path):
    ensure_segment_dir()
    craft_segment(made(shm_path(key)), key, pid=os.getpid())
    os.chown(shm_path(key), FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(TransportError) as exc:
        Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])
    assert f"belongs to {user_text(FOREIGN_UID)}" in str(exc.value), str(exc.value)
    assert os.stat(shm_path(key)).st_uid == FOREIGN_UID, "a foreign file is reported, not removed or reused"


_OTHER_USER = """
    import os, sys
    from backline_core._errors import DeadlineError
    from backline_core._session import Session, resolve_function

    key, uid = sys.argv[1], int(sys.argv[2])
    steane = resolve_function("steane")
    # Import all the child needs while it can still read the interpreter's files.
    with Session.open("memcpy", "coprocessor", key + "-warm", runs_in="thread", functions=[steane]):
        pass
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    child = os.fork()
    if child == 0:  # another user serving the same key
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            s = Session.open("memcpy", "coprocessor", key, runs_in="process", functions=[steane])
            os.write(ready_w, b"+")
            os.read(stop_r, 1)
            s.destroy()
            os._exit(0)
        except BaseException as exc:
            os.write(ready_w, f"-{type(exc).__name__}: {exc}".encode())
            os._exit(1)
    said = os.read(ready_r, 4096)
    try:
        assert said == b"+", said
        try:  # our controller must not talk to the other user's coprocessor ...
            Session.open("memcpy", "controller", key, config="connect_timeout_ms=300", in_bytes=1, out_bytes=1)
            print("HIJACKED: connected to the other user's coprocessor")
            sys.exit(3)
        except DeadlineError:
            pass
        # ... and the other user's coprocessor must not keep ours from serving the key
        with Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"]), \\
                Session.open("memcpy", "controller", key, in_bytes=1, out_bytes=1) as ctl:
            reply = ctl.round(b"\\x03")
            assert reply == b"\\x03", f"answered by steane ({reply!r}), not by our echo"
    finally:
        os.write(stop_w, b"+")
        _, status = os.waitpid(child, 0)
    print("ok", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.defect("another user's coprocessor on a key answered our controller and kept our coprocessor from starting")
@needs_setuid
def test_another_users_coprocessor_neither_answers_nor_blocks_our_key(key):
    # Before: both users' segments were /dev/shm/backline.<key>, so the other user's
    # coprocessor answered our controller, and its name kept ours from starting.
    other_dir = f"/dev/shm/backline-{FOREIGN_UID}"
    existed = os.path.exists(other_dir)
    try:
        result = run_python(_OTHER_USER, key, str(FOREIGN_UID))
    finally:
        if not existed:
            shutil.rmtree(other_dir, ignore_errors=True)
        else:
            with_key = os.path.join(other_dir, key)
            if os.path.lexists(with_key):
                os.unlink(with_key)
    assert result.returncode == 0 and "ok 0" in result.stdout, result.stdout + result.stderr


# ---- 3. liveness without pids ---------------------------------------------------------------------


@pytest.mark.defect('kill(pid, 0) succeeds on a zombie: every round against a SIGKILLed, unreaped coprocessor waited out timeout_ms')
def test_killed_unreaped_coprocessor_is_seen_dead_at_once(key, coprocessor, controller, shm_path):
    proc = coprocessor("process")
    ctl = controller("timeout_ms=20000")
    assert ctl.round(b"alive") == b"alive"
    os.kill(proc.pid, signal.SIGKILL)  # and no wait(): it stays a zombie
    wait_for_zombie(proc.pid)
    t0 = time.monotonic()
    with pytest.raises(PeerError, match="died"):
        ctl.round(b"anyone?")
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0, f"the round against a dead coprocessor took {elapsed:.1f} s (timeout_ms=20000)"
    assert zombie(proc.pid), "the test must hold a zombie, not a reaped child"
    # 4. the controller's close removes what the dead coprocessor left behind
    assert os.path.exists(shm_path(key))
    ctl.destroy()
    assert not os.path.exists(shm_path(key)), "the controller left the dead coprocessor's segment behind"


@pytest.mark.defect("a controller connected to a zombie coprocessor's segment")
def test_controller_does_not_connect_to_an_unreaped_coprocessor(key, coprocessor, shm_path):
    proc = coprocessor("process")
    os.kill(proc.pid, signal.SIGKILL)
    wait_for_zombie(proc.pid)
    t0 = time.monotonic()
    with pytest.raises(DeadlineError, match="no coprocessor serves key"):
        Session.open("memcpy", "controller", key, config="connect_timeout_ms=500", in_bytes=8, out_bytes=8)
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert zombie(proc.pid)
    assert not os.path.exists(shm_path(key)), "the zombie's segment is a leftover; the controller removes it"


def test_new_coprocessor_takes_over_from_an_unreaped_one(key, coprocessor, controller):
    proc = coprocessor("process")
    os.kill(proc.pid, signal.SIGKILL)
    wait_for_zombie(proc.pid)
    coprocessor("process")  # the zombie holds nothing: the key is free
    assert controller().round(b"fresh") == b"fresh"
    assert zombie(proc.pid)


# ---- 4. nothing left behind, in either direction ------------------------------------------------

_HOLDING_CONTROLLER = """
    import sys, time
    from backline_core._session import Session
    s = Session.open("memcpy", "controller", sys.argv[1], config="connect_timeout_ms=3000;timeout_ms=1000",
                     in_bytes=8, out_bytes=8)
    assert s.round(b"mine") == b"mine"
    print("holding", flush=True)
    time.sleep(300)
"""


@pytest.mark.defect('a SIGKILLed but unreaped controller kept its key claimed (pid check), refusing every new controller')
def test_killed_controller_frees_the_key_and_the_coprocessor_keeps_serving(key, coprocessor, controller, shm_path):
    cop = coprocessor("process")
    holder = ChildProcess([sys.executable, "-c", textwrap.dedent(_HOLDING_CONTROLLER), key],
                          name="the holding controller", ready=r"^holding$", process_group=False)
    try:
        holder.wait_ready(SUBPROCESS_TIMEOUT_S)
        with pytest.raises(KeyTakenError, match="already held by a controller"):
            controller("connect_timeout_ms=2000")
        os.kill(holder.pid, signal.SIGKILL)  # no wait(): a zombie
        wait_for_zombie(holder.pid)
        t0 = time.monotonic()
        ctl = controller("connect_timeout_ms=2000")
        assert time.monotonic() - t0 < HANG_GUARD_S
        for i in range(10):  # the coprocessor kept serving; the sequence goes on
            assert ctl.round(bytes([i])) == bytes([i])
        assert zombie(holder.pid)
    finally:
        holder.kill(10)
    assert os.listdir(SEGMENT_DIR).count(key) == 1
    ctl.destroy()
    assert os.path.exists(shm_path(key)), "a controller must not remove a live coprocessor's segment"
    assert cop.terminate() == 0
    assert key not in os.listdir(SEGMENT_DIR)


# ---- 5. a segment nobody serves ----------------------------------------------------------------------


@pytest.mark.defect('a controller connected to a segment nobody served because the pid written in it was alive')
def test_hand_written_segment_with_a_live_pid_but_no_lock(key, made, shm_path):
    # The pid in it is alive (this test's), but no coprocessor holds the segment: it is
    # served by nobody, and a controller must neither hang on it nor crash.
    ensure_segment_dir()
    craft_segment(made(shm_path(key)), key, pid=os.getpid())
    t0 = time.monotonic()
    out = connect_in_subprocess(key, "connect_timeout_ms=500;timeout_ms=500")
    assert time.monotonic() - t0 < SUBPROCESS_TIMEOUT_S / 2
    assert out.startswith("DeadlineError:") and "no coprocessor serves key" in out, out
    assert not os.path.exists(shm_path(key)), "a segment nobody holds is a leftover; the controller removes it"


def test_hand_written_segment_is_reclaimed_by_a_coprocessor(key, made, cleanup, shm_path):
    ensure_segment_dir()
    craft_segment(made(shm_path(key)), key, pid=os.getpid())
    cleanup(Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"]))
    with Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8) as ctl:
        assert ctl.round(b"mine now") == b"mine now"


@pytest.mark.defect('an empty leftover segment blocked its key for good')
def test_empty_leftover_blocks_only_while_it_could_be_a_coprocessor_starting(key, made, cleanup, shm_path):
    # An empty file is what a coprocessor's segment looks like between its create and its
    # lock: refused while young, a leftover once old.
    ensure_segment_dir()
    with open(made(shm_path(key)), "wb"):
        pass
    os.chmod(shm_path(key), 0o600)
    with pytest.raises(KeyTakenError, match="being set up by another coprocessor"):
        Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])
    out = connect_in_subprocess(key, "connect_timeout_ms=300")
    assert out.startswith("DeadlineError:") and "exists but is not being served yet" in out, out
    long_ago = time.time() - 60
    os.utime(shm_path(key), (long_ago, long_ago))
    cleanup(Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"]))
    with Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8) as ctl:
        assert ctl.round(b"healed") == b"healed"


# ---- configuration: runs_in and cpu are checked where a placement is resolved ---------------------


#: one past this machine's last CPU: never a CPU of it
NO_SUCH_CPU = os.sysconf("SC_NPROCESSORS_CONF")


@pytest.mark.parametrize("node,runs_in,cpu,fragments", [
    ("coprocessor", "thread", NO_SUCH_CPU, [f"cpu={NO_SUCH_CPU}", "not a CPU of this machine"]),
    ("coprocessor", "process", NO_SUCH_CPU, [f"cpu={NO_SUCH_CPU}", "not a CPU of this machine"]),
    ("coprocessor", "controller-thread", 0, ["cpu=0", "runs in the controller's thread has no thread to pin"]),
    ("controller", "thread", 0, ["cpu=0", "a controller has none"]),
], ids=["thread", "process", "controller-thread", "controller"])
def test_resolve_refuses_a_cpu_the_backend_refuses(key, node, runs_in, cpu, fragments):
    args = {"init_args": {"cpu": cpu}}
    placement = Placement(
        controller=Controller(**(args if node == "controller" else {})), transport="memcpy",
        coprocessors=[Coprocessor(name=key, coprocessor_fn="echo", runs_in=runs_in,
                                  **(args if node == "coprocessor" else {}))])
    with pytest.raises(PlacementError) as exc:
        resolve(placement)
    msg = str(exc.value)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
