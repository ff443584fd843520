"""Behaviour of memcpy-transport sessions wherever the coprocessor runs (runs_in): dispatch by decoder_id,
buffers reused, geometry keys, deployments of placements and a bounded soak. Rounds of every syndrome and
payload size, pipelining and the coprocessor's geometry are the conformance suite's (test_conformance.py).

Faults and bad input are in test_faults.py; the ``backline`` command line in
test_bench_cli.py. Fixtures (unique keys, shared-memory checks, clean-up) are in conftest.py.
"""

from __future__ import annotations

import importlib
import os

import pytest

from backline_core._bench import config as bench_config, runner as bench_runner
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._deployment import CoprocessorProcess, deploy
from backline_core._errors import (
    PlacementError,
    TransportError,
)
from backline_core._abi import get_library
from backline_core._placement import Controller, Coprocessor, Placement
from backline_core._steane import STEANE_H

PLACES = ("controller-thread", "thread", "process")  # a coprocessor's runs_in
IN_PROCESS = ("controller-thread", "thread")

# The Steane [[7,1,3]] X-check matrix (backline/steane.h); corrections are derived from it
# here, not from the lookup table the decoder uses.
STEANE_HX = STEANE_H


def steane_expected(syndrome: int) -> int:
    """Correction mask (bit q = qubit q) for a packed syndrome (bit i = check i)."""
    bits = tuple((syndrome >> i) & 1 for i in range(3))
    if not any(bits):
        return 0
    (qubit,) = [q for q in range(7) if tuple(row[q] for row in STEANE_HX) == bits]
    return 1 << qubit


def reverse_bytes(decoder_id: int, payload: bytes) -> bytes:
    return payload[::-1]


def multi_functions(runs_in: str, request: pytest.FixtureRequest) -> list:
    """echo on decoder_id 0, reverse on 1, steane on 2 (echo binds 0 and 1; reverse overrides 1)."""
    if runs_in == "process":  # the serve child needs them by import path
        mod = request.getfixturevalue("fn_module")
        return ["echo", f"{mod}:reverse", f"{mod}:steane2"]
    return [
        "echo",
        CoprocessorFunction(name="reverse", python=reverse_bytes, decoder_ids=(1,)),
        CoprocessorFunction(name="steane2", library=get_library(), symbol="bl_fn_steane", decoder_ids=(2,)),
    ]


def test_steane_expectation_covers_each_qubit_once():
    masks = [steane_expected(s) for s in range(1, 8)]
    assert sorted(masks) == [1 << q for q in range(7)]
    assert steane_expected(0) == 0


# ---- rounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runs_in", PLACES)
def test_round_into_reuses_refilled_buffers(pair, runs_in):
    _, ctl = pair(runs_in, in_bytes=16, out_bytes=16)
    buf, out = bytearray(16), bytearray(16)
    for i in range(300):  # the same objects each round: their native views are reused
        buf[:] = (i.to_bytes(2, "little") * 8)
        n = ctl.round_into(buf, out)
        assert n == 16 and out == buf
    small = bytearray(b"xyz")
    assert ctl.round_into(small, out) == 3 and out[:3] == b"xyz"
    into = bytearray(16)
    ctl.stage_payload(b"collect-into")
    ctl.post()
    assert ctl.collect_into(into) == 12 and into[:12] == b"collect-into"


@pytest.mark.defect("a round with a payload or decoder_id of the wrong kind raised raw TypeError/OverflowError")
def test_a_round_of_the_wrong_kind_is_invalid_argument_and_the_session_rounds_on(pair):
    from backline_core import InvalidArgumentError

    _, ctl = pair("thread", in_bytes=4, out_bytes=4)
    for args, says in (((5,), "payload must be bytes-like"), (("text",), "payload must be bytes-like"),
                       ((None,), "payload must be bytes-like"), ((b"ab", 2**70), "decoder_id="),
                       ((b"ab", -1), "decoder_id=-1"), ((b"ab", "x"), "decoder_id='x'")):
        with pytest.raises(InvalidArgumentError, match=says):
            ctl.round(*args)
    with pytest.raises(InvalidArgumentError, match="writable bytes-like"):
        ctl.round_into(b"ab", 5)
    assert ctl.round(b"ab") == b"ab"


@pytest.mark.parametrize("runs_in", PLACES)
def test_functions_selected_by_decoder_id(pair, runs_in, request):
    _, ctl = pair(runs_in, multi_functions(runs_in, request), in_bytes=16, out_bytes=16)
    for i in range(20):
        payload = bytes(range(i, i + 1 + i % 16))[:16]
        assert ctl.round(payload, 0) == payload
        assert ctl.round(payload, 1) == payload[::-1]
        s = i % 8
        assert ctl.round(bytes([s]), 2) == bytes([steane_expected(s)])


@pytest.mark.parametrize("runs_in", PLACES)
def test_last_rtt_and_reply_slot(pair, runs_in):
    _, ctl = pair(runs_in, in_bytes=16, out_bytes=16)
    assert ctl.last_rtt_ns == 0  # nothing collected yet
    assert ctl.round(b"first") == b"first"
    assert ctl.last_rtt_ns > 0
    ctl.stage_payload(b"in place", decoder_id=0)
    ctl.post()
    view = ctl.reply_slot()
    assert isinstance(view, memoryview)
    assert len(view) == 8 and bytes(view) == b"in place"
    assert ctl.last_rtt_ns > 0


# ---- pipelining -------------------------------------------------------------------------------


# ---- geometry ----------------------------------------------------------------------------------


def test_controller_repeating_the_coprocessor_geometry_is_accepted(pair):
    _, ctl = pair("thread", cop_config="slots=8;slot_bytes=128", ctl_config="slots=8;slot_bytes=128")
    assert ctl.geometry["slots"] == 8 and ctl.round(b"same") == b"same"


@pytest.mark.parametrize("ctl_config", ["slots=8", "slot_bytes=128"])
def test_controller_giving_one_matching_geometry_key_is_accepted(pair, ctl_config):
    # The controller states only one geometry key, and it matches the coprocessor's ring;
    # the key it did not give must not be compared against its default.
    _, ctl = pair("thread", cop_config="slots=8;slot_bytes=128", ctl_config=ctl_config)
    assert ctl.geometry["slots"] == 8 and ctl.geometry["slot_bytes"] == 128
    assert ctl.round(b"same") == b"same"


# ---- placements and deploy ------------------------------------------------------------------


@pytest.mark.parametrize("runs_in", PLACES)
def test_deploy_single_coprocessor(key, runs_in, shm_path):
    placement = Placement(
        controller=Controller(),
        coprocessors=[Coprocessor(name=key, coprocessor_fn="steane", runs_in=runs_in, init_args={"slots": 16})],
    )
    with deploy(placement, in_bytes=1, out_bytes=1) as d:
        s = d.session()
        assert s is d.session(key)
        assert s.geometry["slots"] == 16
        for syndrome in range(8):
            assert s.round(bytes([syndrome])) == bytes([steane_expected(syndrome)])
        proc = d.processes.get(key)
        assert (proc is not None) == (runs_in == "process")
        if proc is not None:
            assert os.path.exists(shm_path(key))
    assert not d.controller_sessions and not d.coprocessor_sessions and not d.processes
    with pytest.raises(TransportError):
        s.round(b"\x01")  # destroyed with the deployment
    if proc is not None:
        assert proc.proc.returncode == 0, "the serve process should exit cleanly on SIGTERM"
    d.close()  # idempotent


@pytest.mark.parametrize("runs_in", IN_PROCESS)
def test_deploy_python_callable(key, runs_in):
    placement = Placement(controller=Controller(), coprocessors=[
        Coprocessor(name=key, coprocessor_fn=reverse_bytes, runs_in=runs_in)])
    with deploy(placement, in_bytes=8, out_bytes=8) as d:
        assert d.session().round(b"abcdef") == b"fedcba"


def test_deploy_two_coprocessors_needs_a_name(key, shm_path):
    a, b = f"{key}-a", f"{key}-b"
    placement = Placement(controller=Controller(), coprocessors=[
        Coprocessor(name=a, coprocessor_fn="echo", runs_in="thread"),
        Coprocessor(name=b, coprocessor_fn="steane", runs_in="process"),
    ])
    with deploy(placement, in_bytes=8, out_bytes=8) as d:
        with pytest.raises(PlacementError, match="2 coprocessors") as exc:
            d.session()
        assert a in str(exc.value) and b in str(exc.value)
        with pytest.raises(PlacementError, match="nosuch"):
            d.session("nosuch")
        assert d.session(a).round(b"to a") == b"to a"
        for syndrome in range(8):
            assert d.session(b).round(bytes([syndrome])) == bytes([steane_expected(syndrome)])
        assert d.session(a) is not d.session(b)
        assert os.path.exists(shm_path(b))


def test_deploy_process_python_function_keeps_its_decoder_ids(key, fn_module, monkeypatch, tmp_path):
    # A Python CoprocessorFunction bound to decoder_id 1, served by a child process: the
    # child must bind it to the same decoder_id as an in-process coprocessor would.
    monkeypatch.syspath_prepend(str(tmp_path))
    reverse = importlib.import_module(fn_module).reverse
    assert reverse.decoder_ids == (1,)
    placement = Placement(controller=Controller(), coprocessors=[
        Coprocessor(name=key, coprocessor_fn=reverse, runs_in="process")])
    with deploy(placement, in_bytes=8, out_bytes=8) as d:
        assert d.session().round(b"abc", decoder_id=1) == b"cba"


def test_coprocessor_process_serves_python_functions(key, fn_module, controller):
    proc = CoprocessorProcess("memcpy", key, ["echo", f"{fn_module}:reverse"])
    try:
        ctl = controller()
        assert ctl.round(b"abc", 0) == b"abc" and ctl.round(b"abc", 1) == b"cba"
        ctl.destroy()
    finally:
        assert proc.terminate() == 0


# ---- soak ---------------------------------------------------------------------------------------


def _bench_cpus() -> tuple[int | None, int | None]:
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)


@pytest.mark.parametrize("runs_in", ["thread", "process"])
def test_soak_200k_echo_rounds(runs_in, no_new_shm):
    ctl_cpu, cop_cpu = _bench_cpus()
    cfg = bench_config.BenchConfig(runs_in=runs_in, rounds=200_000, block=50_000, controller_cpu=ctl_cpu,
                            coprocessor_cpu=cop_cpu)
    result = bench_runner.run(cfg)
    assert result.lost == 0
    assert result.mismatched == 0
    assert result.framework.rtt_ns.size == 200_000 - 1
    assert result.floor.rtt_ns.size == 200_000 - 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to leave one to the poller")
def test_a_controller_thread_leaves_the_cpu_of_its_pinned_poller_and_gets_it_back():
    """Two threads spinning on one CPU took a scheduler slice (~8 ms) a round: the controller's
    thread leaves the CPU the in-process poller is pinned to while its session runs."""
    from backline_core import Controller, Coprocessor, Placement, deploy

    before = os.sched_getaffinity(0)
    cpu = max(before)
    p = Placement(controller=Controller(), transport="memcpy",
                  coprocessors=[Coprocessor(name=f"pin-{os.getpid()}", coprocessor_fn="steane", runs_in="thread",
                                            init_args={"cpu": cpu})])
    with deploy(p, in_bytes=1, out_bytes=1) as d:
        assert os.sched_getaffinity(0) == before - {cpu}
        assert d.session(f"pin-{os.getpid()}").round(bytes([0b001])) == bytes([0b001])
    assert os.sched_getaffinity(0) == before
