"""Defects a security/robustness probe found in sessions (memcpy transport and the core runtime).

- A coprocessor function that stopped or destroyed the session running it freed that session
  under its own stack (a segfault); it now gets a LifecycleError and the round goes on.
- Two threads on one controller session received each other's replies; the second is now
  refused (KeyTakenError, "in use by another thread").
- A coprocessor unlinked a file with its key's name that was not a segment it made.
- Past sequence 2**64 - 1 a round "succeeded" with an empty reply nobody sent (sequence 0 is
  "slot never written"); that round is now refused.

Crashes are run in a subprocess, so a crash is a failed test rather than a dead run.
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from backline_core._errors import KeyTakenError, LifecycleError
from backline_core._session import Session

from .conftest import shm_path

# ---- 1. a coprocessor function that tears down its own session ---------------------------------------

SELF_TEARDOWN = """
    import sys
    from backline_core import CoprocessorFunction
    from backline_core._abi import ffi, lib
    from backline_core._errors import LifecycleError
    from backline_core._session import Session

    runs_in, action, target = sys.argv[1:4]
    key = f"selfdestroy-{runs_in}-{action}-{target}-" + str(__import__("os").getpid())
    sessions, seen = {}, []

    def tear_down(decoder_id, payload):
        try:
            if target == "raw":  # the C path: find the session by key, as a C function can
                s = lib.bl_session_get(lib.BL_COPROCESSOR, key.encode())
                rc = (lib.bl_destroy if action == "destroy" else lib.bl_stop)(s)
                seen.append((ffi.string(lib.bl_status_name(rc)).decode(), ffi.string(lib.bl_last_error()).decode()))
            else:
                getattr(sessions[target], action)()
                seen.append(("returned", ""))
        except LifecycleError as exc:
            seen.append(("LifecycleError", str(exc)))
        return payload

    fn = CoprocessorFunction(name="tear_down", python=tear_down)
    with Session.open("memcpy", "coprocessor", key, functions=[fn], runs_in=runs_in) as cop, \\
         Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8) as ctl:
        sessions.update(coprocessor=cop, raw=cop, controller=ctl)
        assert ctl.round(b"syndrome") == b"syndrome"  # the session lived on
        assert ctl.round(b"again!!!") == b"again!!!"
    print(repr(seen))
"""


@pytest.mark.defect("a coprocessor function that destroyed (or stopped) the session running it segfaulted")
@pytest.mark.parametrize("action", ["destroy", "stop"])
# A thread coprocessor's function does not run in the controller's session: tearing the controller
# down from it is teardown from another thread (test_concurrent_teardown.py), so that pair is not here.
@pytest.mark.parametrize("runs_in, target", [("thread", "coprocessor"), ("thread", "raw"),
                                             ("controller-thread", "coprocessor"), ("controller-thread", "raw"),
                                             ("controller-thread", "controller")])
def test_function_cannot_tear_down_the_session_running_it(runs_in: str, action: str, target: str) -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SELF_TEARDOWN), runs_in, action, target],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    seen = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of a list of str pairs
    assert len(seen) == 2
    for status, text in seen:
        assert status in ("LifecycleError", "BL_ESTATE"), seen
        assert "cannot stop or destroy the session that is running it" in text, text


# ---- 2. two threads on one controller session ---------------------------------------------------------


@pytest.mark.defect("two threads using one controller session silently received each other's replies")
@pytest.mark.parametrize("runs_in", ["thread", "controller-thread"])
def test_threads_sharing_a_controller_never_get_each_others_replies(pair, runs_in: str) -> None:
    _, ctl = pair(runs_in, in_bytes=8, out_bytes=8)
    wrong: list[tuple[bytes, bytes]] = []
    errors: list[str] = []
    refused = [0] * 4
    done = [0] * 4
    start = threading.Barrier(4, timeout=30)

    def hammer(t: int) -> None:
        start.wait()
        for i in range(3000):
            payload = struct.pack("<II", t, i)
            try:
                reply = ctl.round(payload)
            except KeyTakenError as exc:
                refused[t] += 1
                if "in use by another thread" not in str(exc):
                    errors.append(str(exc))
                continue
            except Exception as exc:  # anything else is the defect's noise (a stolen slot, a lost round)
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            done[t] += 1
            if reply != payload:
                wrong.append((payload, reply))

    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads)
    assert not wrong, f"{len(wrong)} replies went to the wrong request, e.g. {wrong[:3]}"
    assert not errors, errors[:5]
    assert sum(done) > 0
    assert ctl.round(b"one more") == b"one more"  # the session is fine for one thread afterwards


@pytest.mark.parametrize("runs_in", ["thread", "controller-thread"])
def test_a_thread_with_rounds_in_flight_owns_the_session_until_it_collects(pair, runs_in: str) -> None:
    _, ctl = pair(runs_in, in_bytes=8, out_bytes=8)
    ctl.stage_payload(b"mine....")
    ctl.post()
    got: list[BaseException] = []

    def other() -> None:
        try:
            ctl.round(b"theirs..")
        except BaseException as exc:  # noqa: BLE001 - the test reports it below
            got.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert len(got) == 1 and isinstance(got[0], KeyTakenError), got
    assert "use one session per thread" in str(got[0])
    assert ctl.collect() == b"mine...."  # its own reply, not the other thread's
    # nothing in flight: another thread may take the session over
    t = threading.Thread(target=lambda: got.append(ctl.round(b"handover")))
    t.start()
    t.join(30)
    assert got[1:] == [b"handover"]


# ---- 3. a file that carries the key's name but is not this coprocessor's segment ----------------------


def plant(path: str, data: bytes, age_s: float = 3600.0) -> None:
    """A private regular file of this user's at ``path``, last modified ``age_s`` ago."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    then = time.time() - age_s
    os.utime(path, (then, then))


@pytest.mark.defect("a coprocessor unlinked a file in /dev/shm that carried its key's name but was not a segment")
@pytest.mark.parametrize("data", [b"precious user data\n", b"\0" * 4096], ids=["text", "zeros"])
def test_a_planted_file_with_the_key_name_is_refused_and_survives(key, cleanup, data: bytes) -> None:
    path = shm_path(key)
    plant(path, data)
    try:
        with pytest.raises(KeyTakenError) as info:
            cleanup(Session.open("memcpy", "coprocessor", key, functions=["echo"], runs_in="process"))
        assert "not a memcpy segment" in str(info.value) and path in str(info.value)
        with open(path, "rb") as f:
            assert f.read() == data
    finally:
        os.unlink(path)


def test_a_file_renamed_over_the_segment_survives_the_coprocessor(key, tmp_path) -> None:
    cop = Session.open("memcpy", "coprocessor", key, functions=["echo"], runs_in="process")
    path = shm_path(key)
    other = os.path.join(os.path.dirname(path), f".{key}.planted")
    try:
        plant(other, b"not yours\n")
        os.rename(other, path)  # the name now names another file
        cop.destroy()
        with open(path, "rb") as f:
            assert f.read() == b"not yours\n"
    finally:
        cop.destroy()
        for p in (path, other):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


# ---- 4. the round sequence at its top ------------------------------------------------------------------

CTL_BYTES, SLOTS, SLOT_BYTES = 384, 64, 256  # memcpy.c's control block; the core's default ring


def set_seq(path: str, ring: int, slot: int, seq: int) -> None:
    """Store ``seq`` in the header of ``slot`` of ring 0 (requests) or 1 (replies) of a segment."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, CTL_BYTES + 2 * SLOTS * SLOT_BYTES) as m:
            off = CTL_BYTES + ring * SLOTS * SLOT_BYTES + slot * SLOT_BYTES
            m[off:off + 8] = struct.pack("<Q", seq)
    finally:
        os.close(fd)


@pytest.mark.defect("at sequence 2**64-1 the next round succeeded with an empty reply nobody sent")
def test_the_round_after_the_last_sequence_number_fails(key, coprocessor, controller) -> None:
    coprocessor("process")
    top = 2**64 - 1
    # As a coprocessor that has served rounds up to the top would leave its rings: the last
    # controller's round `top` answered, in slot (top - 1) & (slots - 1).
    for ring in (0, 1):
        set_seq(shm_path(key), ring, (top - 1) % SLOTS, top)
    ctl = controller()  # continues the sequence: its next round would be number 0
    with pytest.raises(LifecycleError, match="sequence numbers are exhausted") as info:
        ctl.round(b"syndrome")
    assert "new session" in str(info.value)
    with pytest.raises(LifecycleError, match="sequence numbers are exhausted"):
        ctl.stage_payload(b"syndrome")
