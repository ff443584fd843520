"""Asynchronous bring-up: a step runs on a worker thread and is awaited by token."""

from __future__ import annotations

import pytest

from backline_core import LifecycleError, Session
from backline_core._errors import DeadlineError, InvalidArgumentError


def test_controller_connects_while_the_same_thread_brings_up_its_coprocessor(key):
    # Synchronously this deadlocks until the deadline: connect waits for a coprocessor that
    # this very thread has not created yet. Asynchronously it completes.
    ctl = Session.create("memcpy", "controller", key, "connect_timeout_ms=5000")
    try:
        token = ctl.connect_async()
        with Session.open("memcpy", "coprocessor", key, functions=["echo"], runs_in="thread") as cop:
            Session.await_step(token)
            Session.await_step(ctl.exchange_keys_async())
            ctl.establish_channel()
            ctl.set_message_sizes(8, 8)
            ctl.start()
            assert ctl.round(b"overlap!") == b"overlap!"
            ctl.destroy()
            assert cop is not None
    finally:
        ctl.destroy()


def test_the_session_refuses_other_calls_until_the_step_is_awaited(key):
    ctl = Session.create("memcpy", "controller", key, "connect_timeout_ms=300")
    try:
        token = ctl.connect_async()
        with pytest.raises(LifecycleError, match="in flight"):
            ctl.alloc_memory()
        with pytest.raises(DeadlineError, match="no coprocessor serves key"):
            Session.await_step(token)  # the step's own error text comes back with its status
        with pytest.raises(InvalidArgumentError, match="already awaited"):
            Session.await_step(token)
    finally:
        ctl.destroy()


def test_destroy_waits_for_a_step_in_flight(key):
    ctl = Session.create("memcpy", "controller", key, "connect_timeout_ms=200")
    ctl.connect_async()
    ctl.destroy()  # must not free the session under the worker; returns once the step ended


def test_async_out_of_order_is_refused(key):
    with Session.create("memcpy", "controller", key) as ctl:
        with pytest.raises(LifecycleError, match="out of order"):
            ctl.exchange_keys_async()
