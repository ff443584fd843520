"""Per-round RTT recording: bl_record_rtt / bl_recorded_rtt and RoundTripLog.

Runs over the minimal backend compiled in conftest.py (its deliver hook answers each
round on the spot), so only the core is needed.
"""

from __future__ import annotations

import numpy as np
import pytest

from backline_core import RoundTripLog
from backline_core._errors import InvalidArgumentError, LifecycleError, NotFoundError
from backline_core._abi import check, ffi, last_error, lib


def rounds(ctl, n: int) -> list[int]:
    """Run ``n`` rounds; the last_rtt_ns each one left."""
    out = []
    for i in range(n):
        assert ctl.round(bytes([i % 256])) == bytes([i % 256])
        out.append(ctl.last_rtt_ns)
    return out


# ---- the C calls --------------------------------------------------------------------------

def test_native_arm_count_overflow_and_disarm(pairs):
    _, _, ctl = pairs.pair()
    sentinel = 0xDEADBEEF
    buf = ffi.new("uint64_t[]", [sentinel] * 4)
    check(lib.bl_record_rtt(ctl._s, buf, 3))
    assert lib.bl_recorded_rtt(ctl._s) == 0
    seen = rounds(ctl, 5)
    assert lib.bl_recorded_rtt(ctl._s) == 5  # counts past the capacity
    assert list(buf[0:3]) == seen[:3]
    assert buf[3] == sentinel  # nothing written past cap
    check(lib.bl_record_rtt(ctl._s, ffi.NULL, 0))  # disarm: the count stays readable
    rounds(ctl, 2)
    assert lib.bl_recorded_rtt(ctl._s) == 5
    assert list(buf[0:3]) == seen[:3]
    check(lib.bl_record_rtt(ctl._s, buf, 3))  # re-arm: the count starts over
    assert lib.bl_recorded_rtt(ctl._s) == 0


def test_native_capacity_zero_counts_only(pairs):
    _, _, ctl = pairs.pair()
    buf = ffi.new("uint64_t[]", [7])
    check(lib.bl_record_rtt(ctl._s, buf, 0))
    rounds(ctl, 3)
    assert lib.bl_recorded_rtt(ctl._s) == 3 and buf[0] == 7


def test_native_records_pipelined_rounds_and_reply_slot(pairs):
    _, _, ctl = pairs.pair()
    buf = ffi.new("uint64_t[]", 8)
    check(lib.bl_record_rtt(ctl._s, buf, 8))
    for p in (b"a", b"b", b"c"):
        ctl.stage_payload(p)
        ctl.post()
    assert ctl.collect() == b"a"
    assert bytes(ctl.reply_slot()) == b"b"
    assert ctl.collect_into(bytearray(4)) == 1
    assert lib.bl_recorded_rtt(ctl._s) == 3
    assert all(buf[i] > 0 for i in range(3)) and buf[2] == ctl.last_rtt_ns


def test_native_errors(pairs):
    _, cop, ctl = pairs.pair()
    buf = ffi.new("uint64_t[]", 1)
    assert lib.bl_record_rtt(cop._s, buf, 1) == -2  # BL_ESTATE
    assert "coprocessor session" in last_error() and "controller" in last_error()
    assert lib.bl_record_rtt(ffi.NULL, buf, 1) == -1  # BL_EINVAL
    assert "record_rtt" in last_error()
    assert lib.bl_recorded_rtt(ffi.NULL) == 0
    assert lib.bl_recorded_rtt(cop._s) == 0


def test_destroy_leaves_the_armed_buffer_alone(pairs):
    _, _, ctl = pairs.pair()
    buf = ffi.new("uint64_t[]", [1, 2, 3])
    check(lib.bl_record_rtt(ctl._s, buf, 1))
    ctl.destroy()  # the runtime never frees or writes the caller's buffer at teardown
    assert list(buf) == [1, 2, 3]


# ---- RoundTripLog ---------------------------------------------------------------------------

def test_attach_records_rounds_driven_elsewhere(pairs):
    key, _, ctl = pairs.pair()
    log = RoundTripLog.attach(key, capacity=8)
    assert (log.rounds, log.dropped, len(log.rtt_ns())) == (0, 0, 0)
    seen = rounds(ctl, 5)
    assert log.rounds == 5 and log.dropped == 0
    live = log.rtt_ns()
    assert live.dtype == np.uint64 and live.tolist() == seen
    log.close()
    assert log.closed and "closed" in repr(log)
    rounds(ctl, 2)  # after close: not recorded
    assert log.rounds == 5 and log.rtt_ns().tolist() == seen
    log.close()  # idempotent
    assert log.rounds == 5


def test_capacity_overflow_counts_dropped_rounds(pairs):
    key, _, ctl = pairs.pair()
    log = RoundTripLog.attach(key, capacity=3)
    seen = rounds(ctl, 7)
    log.close()
    assert (log.rounds, log.dropped) == (7, 4)
    assert log.rtt_ns().tolist() == seen[:3]


def test_capacity_zero_counts_only(pairs):
    key, _, ctl = pairs.pair()
    log = RoundTripLog.attach(key, capacity=0)
    rounds(ctl, 2)
    log.close()
    assert (log.rounds, log.dropped, log.rtt_ns().size) == (2, 2, 0)


def test_session_record_rtt_and_destroy_closes_the_log(pairs):
    _, _, ctl = pairs.pair()
    log = ctl.record_rtt(4)
    seen = rounds(ctl, 2)
    ctl.destroy()  # closes the log first, so its count survives
    assert log.closed and log.rounds == 2 and log.rtt_ns().tolist() == seen


def test_context_manager_closes(pairs):
    _, _, ctl = pairs.pair()
    with ctl.record_rtt(2) as log:
        rounds(ctl, 1)
    assert log.closed and log.rounds == 1


def test_one_log_per_session(pairs):
    key, _, ctl = pairs.pair()
    first = RoundTripLog.attach(key, 2)
    with pytest.raises(LifecycleError, match="already recorded"):
        RoundTripLog.attach(key, 2)
    first.close()
    second = ctl.record_rtt(2)
    rounds(ctl, 1)
    assert second.rounds == 1 and first.rounds == 0


def test_close_after_the_session_was_destroyed_natively(pairs):
    key, _, ctl = pairs.pair()
    log = RoundTripLog.attach(key, 2)
    rounds(ctl, 1)
    lib.bl_destroy(ctl._s)  # as compiled code would, behind Python's back
    with pytest.raises(LifecycleError, match="close\\(\\) before destroying"):
        log.close()
    with pytest.raises(LifecycleError, match=key):
        log.rounds


def test_attach_unknown_key_names_it():
    with pytest.raises(NotFoundError, match="no-such-rtt-key"):
        RoundTripLog.attach("no-such-rtt-key", 4)


def test_attach_to_a_coprocessor_is_refused(pairs):
    key, _, _ = pairs.pair()
    with pytest.raises(LifecycleError, match="coprocessor session"):
        RoundTripLog.attach(key, 4, role="coprocessor")
    _, cop, _ = pairs.pair()
    with pytest.raises(LifecycleError, match="controller"):
        cop.record_rtt(4)


def test_attach_bad_role(pairs):
    key, _, _ = pairs.pair()
    with pytest.raises(InvalidArgumentError, match="role must be"):
        RoundTripLog.attach(key, 4, role="host")


@pytest.mark.parametrize("capacity", [-1, True, 1.5, "4", None])
def test_bad_capacity(pairs, capacity):
    key, _, _ = pairs.pair()
    with pytest.raises(InvalidArgumentError, match="capacity="):
        RoundTripLog.attach(key, capacity)
