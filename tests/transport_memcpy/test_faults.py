"""Bad input and faults on memcpy-transport sessions: lifecycle calls out of order, oversized
payloads, unknown decoders, failing functions, dead peers, contention for a key, teardown
idempotence and shared-memory hygiene. Malformed configuration, a killed or stopped
coprocessor and a second controller in one process are the conformance suite's
(test_conformance.py).

Every blocking call runs under a short deadline (timeout_ms / connect_timeout_ms in the
session config, subprocess timeouts), and elapsed-time bounds are hang guards only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from backline_core._deployment import CoprocessorProcess
from backline_core._errors import (
    DeadlineError,
    FunctionError,
    InvalidArgumentError,
    KeyTakenError,
    LifecycleError,
    NothingPostedError,
    PayloadTooLargeError,
    PeerError,
    TransportError,
    UnknownDecoderError,
)
from backline_core._abi import ffi, lib
from backline_core._session import ROLES, Session

PLACES = ("controller-thread", "thread", "process")  # a coprocessor's runs_in
IN_PROCESS = ("controller-thread", "thread")
HANG_GUARD_S = 5.0  # not a performance bound: only "did not hang"
SUBPROCESS_TIMEOUT_S = 60


def run_python(body: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body), *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)


def brought_up_to_channel(role: str, key: str, config: str = "", runs_in: str | None = None) -> Session:
    s = Session.create("memcpy", role, key, config, runs_in=runs_in)
    s.connect()
    s.alloc_memory()
    s.exchange_keys()
    s.establish_channel()
    return s


# ---- lifecycle out of order ----------------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "coprocessor"])
def test_start_before_connect(key, role):
    with Session.create("memcpy", role, key, runs_in="thread") as s:
        with pytest.raises(LifecycleError) as exc:
            s.start()
        msg = str(exc.value)
        assert "start" in msg and "out of order" in msg and "created" in msg and "connect" in msg, msg


def test_connect_twice(key):
    with Session.create("memcpy", "coprocessor", key, runs_in="thread") as s:
        s.connect()
        with pytest.raises(LifecycleError, match="connect .*out of order"):
            s.connect()


def test_set_message_sizes_on_a_coprocessor(key):
    with brought_up_to_channel("coprocessor", key, runs_in="thread") as cop:
        with pytest.raises(LifecycleError) as exc:
            cop.set_message_sizes(8, 8)
        assert "controller call" in str(exc.value) and "set_coprocessor_fn" in str(exc.value)


def test_set_message_sizes_on_a_started_coprocessor_names_the_role(coprocessor):
    # The role is the problem, not the order: saying "out of order" sends the user to
    # call it earlier, which fails the same way.
    cop = coprocessor("thread")
    with pytest.raises(LifecycleError) as exc:
        cop.set_message_sizes(8, 8)
    assert "controller call" in str(exc.value), str(exc.value)


def test_set_coprocessor_fn_on_a_controller(key, coprocessor):
    coprocessor("thread")
    with brought_up_to_channel("controller", key) as ctl:
        with pytest.raises(LifecycleError) as exc:
            ctl.set_coprocessor_fn("echo")
        assert "coprocessor call" in str(exc.value) and "set_message_sizes" in str(exc.value)


def test_stage_before_start(key, coprocessor):
    coprocessor("controller-thread")
    with brought_up_to_channel("controller", key) as ctl:
        ctl.set_message_sizes(8, 8)
        with pytest.raises(LifecycleError) as exc:
            ctl.stage_payload(b"early")
        msg = str(exc.value)
        assert "stage_payload" in msg and "configured" in msg and "started" in msg, msg
        with pytest.raises(LifecycleError):
            ctl.round(b"early")
        ctl.start()
        assert ctl.round(b"now") == b"now"


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_post_without_stage(pair, runs_in):
    _, ctl = pair(runs_in)
    with pytest.raises(LifecycleError, match="nothing staged"):
        ctl.post()
    ctl.stage_payload(b"once")
    ctl.post()
    with pytest.raises(LifecycleError, match="nothing staged"):
        ctl.post()  # one stage, one post
    assert ctl.collect() == b"once"
    assert ctl.round(b"again") == b"again"


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_collect_with_nothing_in_flight(pair, runs_in):
    _, ctl = pair(runs_in)
    with pytest.raises(NothingPostedError, match="no round is in flight"):
        ctl.collect()
    with pytest.raises(NothingPostedError):
        ctl.reply_slot()
    assert ctl.round(b"x") == b"x"
    with pytest.raises(NothingPostedError):
        ctl.collect()


def test_round_calls_on_a_coprocessor(coprocessor):
    cop = coprocessor("thread")
    for call in (lambda: cop.stage_payload(b"x"), cop.post, cop.collect, lambda: cop.round(b"x")):
        with pytest.raises(LifecycleError, match="controller call"):
            call()


# ---- sizes, decoders, functions ---------------------------------------------------------------


@pytest.mark.parametrize("runs_in", PLACES)
def test_oversized_payload_then_session_keeps_working(pair, runs_in):
    _, ctl = pair(runs_in, in_bytes=8, out_bytes=8)
    with pytest.raises(PayloadTooLargeError) as exc:
        ctl.stage_payload(b"123456789")
    assert "9 bytes" in str(exc.value) and "8" in str(exc.value)
    with pytest.raises(PayloadTooLargeError):
        ctl.round(bytes(300))
    assert ctl.round(b"12345678") == b"12345678"
    with pytest.raises(NothingPostedError):
        ctl.collect()  # the refused payloads never went out


@pytest.mark.parametrize("runs_in", PLACES)
def test_message_sizes_larger_than_slot_payload(key, coprocessor, controller, runs_in):
    coprocessor(runs_in, config="slot_bytes=128")  # 96 payload bytes per slot
    for in_bytes, out_bytes in ((97, 8), (8, 97), (0, 8)):
        with pytest.raises(PayloadTooLargeError) as exc:
            controller(in_bytes=in_bytes, out_bytes=out_bytes)
        assert "96" in str(exc.value) and "slot_bytes" in str(exc.value)
    ctl = controller(in_bytes=96, out_bytes=96)  # every refused controller freed the key
    assert ctl.round(bytes(96)) == bytes(96)


@pytest.mark.parametrize("runs_in", PLACES)
def test_unknown_decoder_id_then_next_round_works(pair, runs_in):
    _, ctl = pair(runs_in)  # echo serves decoder_ids 0 and 1
    for decoder_id in (2, 7, 255):
        with pytest.raises(UnknownDecoderError) as exc:
            ctl.round(b"hello", decoder_id)
        assert f"decoder_id {decoder_id}" in str(exc.value)
        assert ctl.round(b"next", 0) == b"next"
    with pytest.raises(InvalidArgumentError, match="below 256"):
        ctl.round(b"x", 256)
    assert ctl.round(b"still", 1) == b"still"


def _raising(decoder_id: int, payload: bytes) -> bytes:
    if payload == b"boom":
        raise RuntimeError("decoder exploded")
    return payload


def _too_long(decoder_id: int, payload: bytes) -> bytes:
    return payload * 100 if payload == b"long" else payload


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_python_function_that_raises(pair, runs_in, caplog):
    _, ctl = pair(runs_in, [_raising])
    with pytest.raises(FunctionError, match="decoder_id 0"):
        ctl.round(b"boom")
    assert ctl.round(b"fine") == b"fine"
    with pytest.raises(FunctionError):
        ctl.round(b"boom")
    assert ctl.round(b"ok") == b"ok"
    # the coprocessor logs the exception it turned into BL_EFN
    assert any(r.exc_info and "decoder exploded" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_python_function_reply_too_long(pair, runs_in):
    _, ctl = pair(runs_in, [_too_long], in_bytes=8, out_bytes=8)
    with pytest.raises(FunctionError):
        ctl.round(b"long")  # 400 bytes cannot fit a 224-byte slot payload
    assert ctl.round(b"short") == b"short"


@pytest.mark.parametrize("runs_in", PLACES)
def test_steane_rejects_malformed_syndromes(pair, runs_in):
    _, ctl = pair(runs_in, ["steane"], in_bytes=2, out_bytes=1)
    for bad in (bytes([8]), bytes([0xFF]), b"\x01\x00", b""):
        with pytest.raises(FunctionError):
            ctl.round(bad)
        assert ctl.round(b"\x01") == b"\x01"


# ---- dead and missing peers -------------------------------------------------------------------


def test_dead_inline_peer_error_text_is_not_stale_or_repeated(pair):
    cop, ctl = pair("controller-thread", ctl_config="timeout_ms=300")
    with pytest.raises(PayloadTooLargeError):
        ctl.stage_payload(bytes(9))  # leaves an unrelated error text behind
    cop.stop()
    for _ in range(3):
        with pytest.raises(PeerError) as exc:
            ctl.round(b"x")
        msg = str(exc.value)
        assert msg.count("could not deliver") == 1, msg
        assert "set_message_sizes" not in msg, f"stale text of an earlier error: {msg!r}"


def test_dead_inline_peer_keeps_reporting_peer_error(pair):
    # Every round against a stopped inline coprocessor fails the same way; the failed
    # deliveries must not pile up as "in flight" until the ring reports itself full.
    cop, ctl = pair("controller-thread", cop_config="slots=2;slot_bytes=64", ctl_config="timeout_ms=300")
    assert ctl.round(b"alive") == b"alive"
    cop.stop()
    for attempt in range(6):
        try:
            ctl.round(b"x")
        except PeerError:
            continue
        except TransportError as exc:
            pytest.fail(f"attempt {attempt}: {type(exc).__name__}: {exc}")
        pytest.fail(f"attempt {attempt}: the round succeeded against a stopped coprocessor")


def test_controller_without_coprocessor(key):
    t0 = time.monotonic()
    with pytest.raises(DeadlineError) as exc:
        Session.open("memcpy", "controller", key, config="connect_timeout_ms=200", in_bytes=8, out_bytes=8)
    assert time.monotonic() - t0 < HANG_GUARD_S
    msg = str(exc.value)
    assert "backline coprocessor serve" in msg and key in msg, msg
    assert lib.bl_session_get(ROLES["controller"], key.encode()) == ffi.NULL


# ---- contention for a key -----------------------------------------------------------------------


_SECOND_CONTROLLER = """
    import sys
    from backline_core._errors import KeyTakenError
    from backline_core._session import Session
    try:
        s = Session.open("memcpy", "controller", sys.argv[1], config="connect_timeout_ms=3000;timeout_ms=1000",
                         in_bytes=8, out_bytes=8)
    except KeyTakenError as exc:
        print("KeyTakenError:", exc)
        sys.exit(0)
    except Exception as exc:
        print(type(exc).__name__ + ":", exc)
        sys.exit(3)
    s.destroy()
    print("opened a second controller")
    sys.exit(4)
"""

_TAKE_OVER = """
    import sys
    from backline_core._session import Session
    with Session.open("memcpy", "controller", sys.argv[1], config="connect_timeout_ms=3000;timeout_ms=1000",
                      in_bytes=8, out_bytes=8) as s:
        for i in range(1000):
            p = i.to_bytes(4, "little")
            assert s.round(p) == p
    print("took over")
"""


def test_second_controller_across_processes_refused(key, coprocessor, controller):
    coprocessor("process")
    first = controller("timeout_ms=1000")
    stop, errors, rounds = threading.Event(), [], [0]

    def keep_going():
        i = 0
        while not stop.is_set():
            p = i.to_bytes(4, "little")
            try:
                assert first.round(p) == p
            except Exception as exc:  # reported below
                errors.append(exc)
                return
            rounds[0] += 1
            i += 1
            time.sleep(0.0005)

    worker = threading.Thread(target=keep_going, daemon=True)
    worker.start()
    try:
        result = run_python(_SECOND_CONTROLLER, key)
    finally:
        stop.set()
        worker.join(10)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KeyTakenError" in result.stdout and "already held" in result.stdout
    assert not errors, errors
    assert rounds[0] > 0
    assert first.round(b"mine") == b"mine"
    first.destroy()
    result = run_python(_TAKE_OVER, key)
    assert result.returncode == 0 and "took over" in result.stdout, result.stdout + result.stderr
    again = controller()  # and back to this process
    assert again.round(b"back") == b"back"


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_second_coprocessor_in_process_refused(key, pair, runs_in):
    _, ctl = pair(runs_in)
    for other in IN_PROCESS + ("process",):
        with pytest.raises(KeyTakenError, match="already"):
            Session.open("memcpy", "coprocessor", key, runs_in=other, functions=["echo"])
    assert ctl.round(b"calm") == b"calm"


def test_second_coprocessor_process_refused(key, coprocessor, controller, shm_path):
    first = coprocessor("process")
    ctl = controller()
    with pytest.raises(TransportError) as exc:
        CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=30)
    assert "already served" in str(exc.value) and str(first.pid) in str(exc.value)
    with pytest.raises(KeyTakenError, match="already served"):  # and from this process
        Session.open("memcpy", "coprocessor", key, runs_in="process", functions=["echo"])
    assert ctl.round(b"calm") == b"calm"
    assert os.path.exists(shm_path(key))


def test_second_coprocessor_refused_while_first_is_bringing_up(key, cleanup, shm_path):
    # A coprocessor that has connected (created the segment) but not yet exchanged keys
    # owns the key: a second coprocessor must not take the name from under it.
    first = cleanup(Session.create("memcpy", "coprocessor", key, runs_in="process"))
    first.connect()
    assert os.path.exists(shm_path(key))
    second = None
    try:
        with pytest.raises(TransportError, match="already"):
            second = CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=30)
    finally:
        if second is not None:
            second.terminate()
    first.destroy()


def test_restarted_coprocessor_survives_the_old_controller(key, coprocessor, controller, cleanup, shm_path):
    # The coprocessor process crashes and is restarted on the same key while the old
    # controller is still open; destroying that controller must not remove the new
    # coprocessor's shared memory.
    crashed = coprocessor("process")
    old = controller("timeout_ms=300")
    assert old.round(b"one") == b"one"
    crashed.kill()
    with pytest.raises((PeerError, DeadlineError)):
        old.round(b"two")
    restarted = cleanup(CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=30))
    old.destroy()
    assert os.path.exists(shm_path(key)), "the old controller removed the restarted coprocessor's segment"
    t0 = time.monotonic()
    new = cleanup(Session.open("memcpy", "controller", key, config="connect_timeout_ms=1000", in_bytes=8,
                               out_bytes=8))
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert new.round(b"three") == b"three"
    new.destroy()
    assert restarted.terminate() == 0


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_restarted_in_process_coprocessor(key, pair, coprocessor, controller, runs_in):
    cop, old = pair(runs_in, ctl_config="timeout_ms=300")
    assert old.round(b"one") == b"one"
    cop.destroy()
    with pytest.raises((PeerError, DeadlineError)):
        old.round(b"two")
    coprocessor(runs_in)  # a new coprocessor on the same key
    old.destroy()
    new = controller()
    assert new.round(b"three") == b"three"


def test_stale_segment_of_a_killed_coprocessor_is_reclaimed(key, coprocessor, shm_path):
    proc = coprocessor("process")
    proc.kill()  # leaves its segment behind
    assert os.path.exists(shm_path(key))
    t0 = time.monotonic()
    with pytest.raises(DeadlineError, match="backline coprocessor serve"):
        Session.open("memcpy", "controller", key, config="connect_timeout_ms=200", in_bytes=8, out_bytes=8)
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert not os.path.exists(shm_path(key)), "a controller removes a dead coprocessor's segment"


def test_stale_segment_is_reclaimed_by_a_new_coprocessor(key, coprocessor, controller, shm_path):
    coprocessor("process").kill()
    assert os.path.exists(shm_path(key))
    coprocessor("process")  # takes the name over from the dead one
    assert controller().round(b"fresh") == b"fresh"


def test_controller_expecting_the_coprocessor_elsewhere(key, coprocessor, controller):
    coprocessor("thread")
    with pytest.raises(InvalidArgumentError) as exc:
        controller(runs_in="process")
    msg = str(exc.value)
    assert "runs in process" in msg and "runs in thread" in msg and key in msg, msg
    assert controller(runs_in="thread").round(b"ok") == b"ok"


_KILLED_CONTROLLER = """
    import os, signal, sys
    from backline_core._session import Session
    s = Session.open("memcpy", "controller", sys.argv[1], config="connect_timeout_ms=3000;timeout_ms=1000",
                     in_bytes=8, out_bytes=8)
    assert s.round(b"mine") == b"mine"
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_claim_of_a_killed_controller_is_taken_over(key, coprocessor, controller):
    coprocessor("process")
    result = run_python(_KILLED_CONTROLLER, key)
    assert result.returncode == -9 and "holding" in result.stdout, result.stdout + result.stderr
    ctl = controller("connect_timeout_ms=2000")
    for i in range(10):
        assert ctl.round(bytes([i])) == bytes([i])


_BRING_UP = ["connect", "alloc_memory", "exchange_keys", "establish_channel", "set_coprocessor_fn", "start"]


@pytest.mark.parametrize("stage", range(len(_BRING_UP) + 1), ids=["created", *_BRING_UP])
def test_process_coprocessor_torn_down_at_any_stage_leaves_no_shm(key, stage, shm_path):
    s = Session.create("memcpy", "coprocessor", key, runs_in="process")
    for step in _BRING_UP[:stage]:
        s.set_coprocessor_fn("echo") if step == "set_coprocessor_fn" else getattr(s, step)()
    s.destroy()
    left = os.path.exists(shm_path(key))
    if left:
        os.unlink(shm_path(key))  # report it here, not again from the key fixture
    assert not left, f"destroy after {_BRING_UP[stage - 1] if stage else 'create'} left {shm_path(key)}"


# ---- teardown ------------------------------------------------------------------------------------


@pytest.mark.parametrize("runs_in", PLACES)
def test_double_stop_and_double_destroy_are_noops(pair, runs_in):
    cop, ctl = pair(runs_in)
    assert ctl.round(b"x") == b"x"
    ctl.stop()
    ctl.stop()
    with pytest.raises(LifecycleError, match="stopped"):
        ctl.round(b"after stop")
    ctl.destroy()
    ctl.destroy()
    ctl.stop()
    if isinstance(cop, Session):
        cop.stop()
        cop.stop()
        cop.destroy()
        cop.destroy()
        cop.stop()


def _calls_after_destroy(cop: Session, ctl: Session) -> dict:
    return {
        "round": lambda: ctl.round(b"x"),
        "round_into": lambda: ctl.round_into(bytearray(b"x"), bytearray(8)),
        "stage_payload": lambda: ctl.stage_payload(b"x"),
        "post": ctl.post,
        "collect": ctl.collect,
        "collect_into": lambda: ctl.collect_into(bytearray(8)),
        "reply_slot": ctl.reply_slot,
        "last_rtt_ns": lambda: ctl.last_rtt_ns,
        "geometry": lambda: ctl.geometry,
        "connect": ctl.connect,
        "start": ctl.start,
        "set_message_sizes": lambda: ctl.set_message_sizes(8, 8),
        "serve_pending": cop.serve_pending,
        "set_coprocessor_fn": lambda: cop.set_coprocessor_fn("echo"),
    }


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_methods_after_destroy_raise_transport_error(pair, runs_in):
    cop, ctl = pair(runs_in)
    assert ctl.round(b"x") == b"x"  # binds round_into's cached views before the destroy
    ctl.destroy()
    cop.destroy()
    problems = []
    for name, call in _calls_after_destroy(cop, ctl).items():
        try:
            call()
        except TransportError as exc:
            if exc.status != "BL_ESTATE" or "destroyed" not in str(exc):
                problems.append(f"{name}: {exc.status} {exc}")
        except Exception as exc:
            problems.append(f"{name}: raised {type(exc).__name__}: {exc}")
        else:
            problems.append(f"{name}: did not raise")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_methods_after_destroy_raise_lifecycle_error(pair, runs_in):
    # BL_ESTATE maps to LifecycleError everywhere else (errors.STATUS); a destroyed
    # session's BL_ESTATE should be catchable the same way.
    cop, ctl = pair(runs_in)
    ctl.destroy()
    cop.destroy()
    for name in ("stage_payload", "collect", "geometry", "start", "serve_pending"):
        with pytest.raises(TransportError) as exc:
            _calls_after_destroy(cop, ctl)[name]()
        assert isinstance(exc.value, LifecycleError), f"{name}: {type(exc.value).__name__} is not a LifecycleError"


@pytest.mark.parametrize("role", ["controller", "coprocessor"])
def test_native_stop_and_destroy_on_a_destroyed_pointer(key, coprocessor, role):
    if role == "controller":
        coprocessor("thread")
        s = Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8)
        assert s.round(b"x") == b"x"
    else:
        s = Session.open("memcpy", "coprocessor", key, runs_in="thread", functions=["echo"])
    raw = s._s
    assert lib.bl_session_get(ROLES[role], key.encode()) == raw
    s.destroy()
    assert lib.bl_session_get(ROLES[role], key.encode()) == ffi.NULL
    assert lib.bl_stop(raw) == 0
    assert lib.bl_destroy(raw) == 0
    assert lib.bl_stop(raw) == 0
    assert lib.bl_stop(ffi.NULL) == 0 and lib.bl_destroy(ffi.NULL) == 0


@pytest.mark.parametrize("runs_in", PLACES)
def test_no_shared_memory_after_teardown(key, pair, runs_in, shm_path):
    cop, ctl = pair(runs_in)
    assert ctl.round(b"x") == b"x"
    assert os.path.exists(shm_path(key)) == (runs_in == "process")
    ctl.destroy()
    if isinstance(cop, CoprocessorProcess):
        assert os.path.exists(shm_path(key)), "a controller must not remove a live coprocessor's segment"
        assert cop.terminate() == 0
    else:
        cop.destroy()
    assert not os.path.exists(shm_path(key))
