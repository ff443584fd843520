"""Sessions used wrongly but plausibly: teardown from another thread, Python functions that
misbehave, an inline function that overruns its deadline. None may crash or hang.

Runs over the minimal backend compiled in conftest.py, so only the core is needed. The
teardown races run in a subprocess: a use-after-free there would kill the interpreter,
which must show as a failed test, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from backline_core import CoprocessorFunction
from backline_core._errors import DeadlineError, FunctionError, LifecycleError


def _run(code: str, backend: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), backend], capture_output=True, text=True,
                          timeout=120)


# The coprocessor side is bound but never answers (auto delivery off), so the controller's
# round waits in collect -- the window the races need.
_WAITING_PAIR = """
    import sys, threading, time, cffi
    from backline_core import Session
    from backline_core._builtins import echo
    backend = sys.argv[1]
    ffi = cffi.FFI(); ffi.cdef("void tb_set_auto_deliver(int on);")
    tb = ffi.dlopen(backend); tb.tb_set_auto_deliver(0)

    def pair(key):
        cop = Session(backend, "coprocessor", key, "timeout_ms=5000")
        for step in (cop.connect, cop.alloc_memory, cop.exchange_keys, cop.establish_channel):
            step()
        cop.set_coprocessor_fn(echo()); cop.start()
        ctl = Session(backend, "controller", key, "timeout_ms=5000")
        for step in (ctl.connect, ctl.alloc_memory, ctl.exchange_keys, ctl.establish_channel):
            step()
        ctl.set_message_sizes(8, 8); ctl.start()
        return cop, ctl

    def in_round(ctl, seen):
        try:
            ctl.round(b"syndrome")
            seen.append("returned")
        except Exception as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
"""


@pytest.mark.defect("Session.destroy() while another thread is inside round() was a use-after-free")
def test_destroy_while_another_thread_is_in_a_round(stub_backend) -> None:
    proc = _run(_WAITING_PAIR + """
    for i in range(10):
        cop, ctl = pair(f"race-{i}")
        seen = []
        t = threading.Thread(target=in_round, args=(ctl, seen))
        t.start()
        time.sleep(0.05)  # the round is now waiting for a reply that will not come
        t0 = time.monotonic()
        ctl.destroy()
        took = time.monotonic() - t0
        t.join(10)
        assert not t.is_alive(), "the round did not return"
        assert took < 2.5, took  # well inside timeout_ms=5000: the round was stopped, not waited out
        assert len(seen) == 1 and seen[0].startswith("LifecycleError") and "stopped by another thread" in seen[0], seen
        cop.destroy()
    print("ok")
    """, stub_backend.path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_calls_after_destroy_on_another_thread_fail_cleanly(stub_backend) -> None:
    proc = _run(_WAITING_PAIR + """
    cop, ctl = pair("after")
    ctl.destroy(); cop.destroy()
    seen = []
    in_round(ctl, seen)
    assert seen[0].startswith("LifecycleError") and "destroyed" in seen[0], seen
    ctl.destroy()  # idempotent
    print("ok")
    """, stub_backend.path)
    assert proc.returncode == 0, proc.stderr


def test_stop_from_another_thread_ends_a_blocking_serve(pairs) -> None:
    import threading

    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="noop", python=lambda d, p: p))
    cop.start()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            cop.serve()
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    t = threading.Thread(target=serve)
    t.start()
    time.sleep(0.05)
    cop.destroy()
    t.join(5)
    assert not t.is_alive()
    assert errors == []  # serve returns normally once stopped


# ---- Python coprocessor functions that misbehave -------------------------------------------

def _raises(exc: BaseException):
    def fn(decoder_id: int, payload: bytes) -> bytes:
        raise exc
    return fn


@pytest.mark.defect("a Python coprocessor function raising SystemExit/KeyboardInterrupt gave an empty successful reply")
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), ValueError("bad syndrome")])
def test_python_function_that_raises_fails_the_round(pairs, exc) -> None:
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="raiser", python=_raises(exc)))
    cop.start()
    ctl = pairs.controller(key)
    with pytest.raises(FunctionError, match="failed"):
        ctl.round(b"abc")
    # the coprocessor keeps serving: the next round reaches it again
    with pytest.raises(FunctionError):
        ctl.round(b"abc")


def _generator(decoder_id: int, payload: bytes):
    yield payload


@pytest.mark.defect("a Python coprocessor function returning 5 sent five zero bytes")
@pytest.mark.parametrize("reply", [5, {"a": 1}, "text", None, 3.5, [1, 2]], ids=repr)
def test_python_function_returning_a_non_buffer_fails_the_round(pairs, reply) -> None:
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="wrong", python=lambda d, p: reply))
    cop.start()
    ctl = pairs.controller(key)
    with pytest.raises(FunctionError):
        ctl.round(b"abc")


@pytest.mark.defect("a Python coprocessor function returning a generator was coerced to bytes")
def test_python_function_returning_a_generator_fails_the_round(pairs) -> None:
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="gen", python=_generator))
    cop.start()
    ctl = pairs.controller(key)
    with pytest.raises(FunctionError):
        ctl.round(b"abc")


@pytest.mark.parametrize("reply", [b"\x01\x02", bytearray(b"\x01\x02"), memoryview(b"\x01\x02")], ids=type)
def test_python_function_bytes_like_replies_pass(pairs, reply) -> None:
    import numpy as np

    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="ok", python=lambda d, p: reply), decoder_ids=[0])
    cop.set_coprocessor_fn(CoprocessorFunction(name="arr", python=lambda d, p: np.array([1, 2], dtype=np.uint8)),
                           decoder_ids=[1])
    cop.start()
    ctl = pairs.controller(key)
    assert ctl.round(b"abc") == b"\x01\x02"
    assert ctl.round(b"abc", decoder_id=1) == b"\x01\x02"


# ---- an inline round that overruns its deadline ---------------------------------------------

@pytest.mark.defect("an inline round that overran its deadline succeeded")
def test_inline_round_past_its_deadline_is_a_deadline_error(pairs) -> None:
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    calls = []

    def slow(decoder_id: int, payload: bytes) -> bytes:
        calls.append(payload)
        if payload == b"slow":
            time.sleep(0.2)
        return payload

    cop.set_coprocessor_fn(CoprocessorFunction(name="slow", python=slow))
    cop.start()
    ctl = pairs.controller(key, config="timeout_ms=50")
    assert ctl.round(b"fast") == b"fast"
    with pytest.raises(DeadlineError, match="timeout_ms=50"):
        ctl.round(b"slow")
    assert ctl.round(b"next") == b"next"  # the late round holds no slot
    assert calls == [b"fast", b"slow", b"next"]


def test_lifecycle_error_names_a_destroyed_session(pairs) -> None:
    _, cop, ctl = pairs.pair()
    ctl.destroy()
    with pytest.raises(LifecycleError, match="destroyed"):
        ctl.post()
