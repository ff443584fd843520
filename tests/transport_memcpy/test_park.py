"""bl_park: the thread that brought a coprocessor up waits while the backend's poller serves."""

from __future__ import annotations

import threading

from backline_core._abi import lib
from backline_core._session import Session


def test_park_returns_once_stop_has_finished_and_rounds_are_served_meanwhile(key):
    cop = Session.open("memcpy", "coprocessor", key, functions=["echo"], runs_in="thread")
    ctl = Session.open("memcpy", "controller", key, in_bytes=8, out_bytes=8)
    parked: list[int] = []
    try:
        waiter = threading.Thread(target=lambda: parked.append(lib.bl_park(cop._handle())))
        waiter.start()
        for i in range(100):
            assert ctl.round(bytes([i])) == bytes([i])  # the poller thread answers while one is parked
        waiter.join(0.2)
        assert waiter.is_alive() and not parked
        ctl.destroy()
        cop.stop()
        waiter.join(5)
        assert not waiter.is_alive() and parked == [lib.BL_OK]
    finally:
        ctl.destroy()
        cop.destroy()
