"""The ucx transport's default, ``tls=auto``: between two processes of one host it takes UCX shared
memory (not TCP), a dead peer is still told by the out-of-band connection, and the bench warns
when its floor is far slower than ucx_perftest. Real coprocessor processes and libucp throughout.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from backline_core import Controller, Coprocessor, Endpoint, PeerError, Placement, Session, deploy
from backline_core.testing import ServeProcess, endpoint_config, free_port

from backline_transport_ucx.floor import REFERENCE_WARN_RATIO, Floor

HOST = "127.0.0.1"
SLOW = 10000  # generous: the machines these run on are shared


def placement(port: int, controller_tls: str | None, coprocessor_tls: str | None) -> Placement:
    def args(tls: str | None) -> dict[str, object]:
        return {"timeout_ms": SLOW, **({"tls": tls} if tls else {})}

    return Placement(controller=Controller(init_args=args(controller_tls)), transport="ucx",
                     coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="process",
                                               endpoint=Endpoint(host=HOST, port=port),
                                               init_args=args(coprocessor_tls))])


def chosen(err: str) -> str:
    """The UCX transports the controller's note names."""
    lines = [line for line in err.splitlines() if "UCX transports:" in line]
    assert lines, err
    return lines[-1].split("UCX transports:", 1)[1].strip()


@pytest.mark.parametrize("coprocessor_tls", [None, "auto", "shm"])
def test_auto_between_two_processes_of_this_host_takes_shared_memory(capfd: pytest.CaptureFixture[str],
                                                                     coprocessor_tls: str | None) -> None:
    with deploy(placement(free_port(HOST), None, coprocessor_tls), in_bytes=1, out_bytes=1) as d:
        assert d.session("dec").round(bytes([0b010])) == bytes([0x10])
    err = capfd.readouterr().err
    transports = chosen(err)
    assert "tls=auto" in err
    assert "memory" in transports and "tcp" not in transports, err


def test_tcp_stays_tcp_on_this_host(capfd: pytest.CaptureFixture[str]) -> None:
    with deploy(placement(free_port(HOST), "tcp", "tcp"), in_bytes=1, out_bytes=1) as d:
        assert d.session("dec").round(bytes([0b001])) == bytes([0x01])
    assert chosen(capfd.readouterr().err).startswith("tcp"), "tls=tcp must not be replaced by shared memory"


def test_over_auto_a_killed_coprocessor_is_told_by_its_connection_not_the_deadline() -> None:
    port = free_port(HOST)
    with ServeProcess("ucx", port, "steane", host=HOST, timeout_ms=SLOW) as serve:
        s = Session.open("ucx", "controller", "dec", config=endpoint_config(HOST, port, timeout_ms=600000),
                         in_bytes=1, out_bytes=1)
        try:
            assert s.round(b"\x01") == b"\x01"
            serve.proc.send_signal(signal.SIGKILL)
            serve.proc.wait(30)
            # Shared memory has no failure report of its own: a PeerError (not the 600 s deadline's
            # DeadlineError) can only come from the out-of-band connection's closing.
            with pytest.raises(PeerError, match="closed"):
                s.round(b"\x01")
        finally:
            s.destroy()


def test_the_floor_over_auto_on_this_host_runs_over_shared_memory() -> None:
    with Floor(HOST, 8, tls="auto") as floor:
        out = np.zeros(200, dtype=np.uint64)
        floor.run(1, out)
        assert (out > 0).all()
        assert "tls=auto" in floor.description and "memory" in floor.description, floor.description
        assert "tcp" not in floor.description, floor.description


def test_the_bench_warns_in_one_line_when_the_floor_is_far_above_ucx_perftest() -> None:
    floor = Floor(HOST, 8, tls="tcp")
    floor.description = "tls=tcp, UCX transports tcp"
    floor._block_medians = [15000.0, 16000.0, 15500.0]
    line = floor.warning({"median_ns": 300.0})
    assert line is not None and "\n" not in line
    assert "warning" in line and "51.7x" in line and "15.500 us" in line and "tls=shm" in line
    assert floor.warning({"median_ns": 15500.0 / REFERENCE_WARN_RATIO}) is None  # at the ratio: no warning
    assert floor.warning(None) is None  # no reference figures, nothing to compare


def test_no_warning_before_any_timed_block() -> None:
    assert Floor(HOST, 8).warning({"median_ns": 1.0}) is None


@pytest.mark.defect("controller tls=auto and coprocessor tls=tcp on one host never connected: the first round timed out")
@pytest.mark.parametrize("controller_tls, coprocessor_tls", [(None, "tcp"), ("tcp", None), ("shm", "tcp"), ("tcp", "shm")])
def test_ends_that_cannot_reach_each_other_are_refused_at_the_handshake(controller_tls: str | None,
                                                                         coprocessor_tls: str | None) -> None:
    with pytest.raises(PeerError, match="UCX cannot connect them on one host; give both ends the same tls") as info:
        with deploy(placement(free_port(HOST), controller_tls, coprocessor_tls), in_bytes=1, out_bytes=1) as d:
            d.session("dec").round(bytes([1]))
    assert f"tls={controller_tls or 'auto'}" in str(info.value) and f"tls={coprocessor_tls or 'auto'}" in str(info.value)
