"""The cuqr transport against an independent in-test CUQR server (conftest.py), against
`backline decoding-server` as a process, and its faults: no server, non-OK statuses, junk and
stale replies, bad configuration, and the places resolution refuses."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from backline_core import (Controller, Coprocessor, DeadlineError, Endpoint, Placement, PlacementError, Session,
                           TransportError, UnknownDecoderError, connect_controller, deploy, plugins, resolve)
from backline_core.sdk import dem_matrices
from backline_core.testing import ReadyProcess

BACKLINE = str(Path(sys.executable).with_name("backline"))
DEADLINE_S = 60.0  # the server's READY line and its exit: generous, the machine is shared
SHORT_MS = 300     # the round deadline of the tests that wait it out


def placement(port: int, *, runs_in: str | None = None, **init_args) -> Placement:
    return Placement(controller=Controller(), transport="cuqr",
                     coprocessors=[Coprocessor(name="server", coprocessor_fn="decoding-server", runs_in=runs_in,
                                               init_args=init_args, endpoint=Endpoint(host="127.0.0.1", port=port))])


def connect(port: int, in_bytes: int = 2, out_bytes: int = 1, **init_args) -> Session:
    return connect_controller(placement(port, **init_args), "server", in_bytes=in_bytes, out_bytes=out_bytes)


# ---- (a) the in-test server --------------------------------------------------------------------

def test_rounds_carry_the_shot_and_return_its_flips(kit, mini_server):
    server = mini_server()
    session = connect(server.port, in_bytes=2, out_bytes=1, return_size=3)
    try:
        rng = random.Random(7)
        for _ in range(50):
            bits = [rng.randint(0, 1) for _ in range(16)]
            reply = session.round(kit.pack(bits))
            assert kit.unpack(reply, 3) == kit.parity_rule(bits, 3)
            assert reply[0] >> 3 == 0  # padding bits stay clear
        fns = [fn for fn, _ in server.requests]
        # the first round resets the decoder, then enqueue and get alternate
        assert fns[0] == kit.CUQR.CUQR_FN_RESET_DECODER
        assert fns[1:] == [kit.CUQR.CUQR_FN_ENQUEUE_SYNDROMES, kit.CUQR.CUQR_FN_GET_CORRECTIONS] * 50
        enqueues = [args for fn, args in server.requests if fn == kit.CUQR.CUQR_FN_ENQUEUE_SYNDROMES]
        assert [a[1] for a in enqueues] == list(range(1, 51))  # counter: the round's sequence
        assert {(a[0], a[2], a[3]) for a in enqueues} == {(0, 0, 16)}  # decoder 0, mapping 0, 16 bits
        gets = {args for fn, args in server.requests if fn == kit.CUQR.CUQR_FN_GET_CORRECTIONS}
        assert gets == {(0, 3, 1)}  # reset=1: each reply is that shot's flips alone
    finally:
        session.destroy()


def test_keys_choose_decoder_bits_and_slot(kit, mini_server):
    server = mini_server(slot=128, decoders=4)
    session = connect(server.port, in_bytes=2, out_bytes=1, return_size=2, num_syndromes=11, decoder_id=3,
                      slot_size=128)
    try:
        bits = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
        assert kit.unpack(session.round(kit.pack(bits), decoder_id=1), 2) == kit.parity_rule(bits, 2)
        enqueue = next(args for fn, args in server.requests if fn == kit.CUQR.CUQR_FN_ENQUEUE_SYNDROMES)
        assert enqueue[0] == 3 and enqueue[3] == 11  # the key's decoder, not the round's
    finally:
        session.destroy()


def test_without_decoder_id_each_round_goes_to_its_own(kit, mini_server):
    server = mini_server(decoders=2)
    session = connect(server.port, in_bytes=1, out_bytes=1, return_size=1)
    try:
        for did in (0, 1, 1, 0):
            assert session.round(bytes([0b111]), decoder_id=did) == bytes([1])
        enqueued = [args[0] for fn, args in server.requests if fn == kit.CUQR.CUQR_FN_ENQUEUE_SYNDROMES]
        assert enqueued == [0, 1, 1, 0]
        resets = [args[0] for fn, args in server.requests if fn == kit.CUQR.CUQR_FN_RESET_DECODER]
        assert resets == [0, 1]  # once per decoder
    finally:
        session.destroy()


def test_pipelined_rounds_come_back_in_order(kit, mini_server):
    server = mini_server()
    session = connect(server.port, in_bytes=1, out_bytes=1, return_size=1)
    try:
        for value in range(8):
            session.stage_payload(bytes([value]))
            session.post()
        assert [session.collect() for _ in range(8)] == [bytes([bin(v).count("1") % 2]) for v in range(8)]
    finally:
        session.destroy()


# ---- (b) backline decoding-server ---------------------------------------------------------------

def _sparse(m: np.ndarray) -> str:
    out: list[int] = []
    for row in m:
        out += [int(i) for i in np.flatnonzero(row)] + [-1]
    return "[" + ", ".join(map(str, out)) + "]"


def test_backline_decoding_server_decodes_as_the_lut_offline(tmp_path):
    stim = pytest.importorskip("stim", reason="the surface code's circuit comes from stim (backline-qec's tests)")
    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=2,
                                     after_clifford_depolarization=0.01)
    m = dem_matrices(circuit.detector_error_model(decompose_errors=True))
    h, o = (m.h != 0).astype(np.uint8), (m.o != 0).astype(np.uint8)
    config = tmp_path / "config.yaml"
    config.write_text(f"decoders:\n  - id: 0\n    type: single_error_lut\n    block_size: {h.shape[1]}\n"
                      f"    syndrome_size: {h.shape[0]}\n    H_sparse: {_sparse(h)}\n    O_sparse: {_sparse(o)}\n"
                      f"    D_sparse: {_sparse(np.eye(h.shape[0], dtype=np.uint8))}\n")
    dets, _ = circuit.compile_detector_sampler(seed=11).sample(60, separate_observables=True)
    dets = dets.astype(np.uint8)
    offline = np.asarray(plugins.get("decoder", "lut").build_from_matrices(h, o, depth=1).decode_batch(dets))
    n_det, n_obs = h.shape[0], o.shape[0]
    server = ReadyProcess([BACKLINE, "decoding-server", "--config", str(config), "--transport", "udp", "--port", "0",
                           "--timeout", "300"], "QEC_DECODING_SERVER_READY ", timeout=DEADLINE_S)
    try:
        session = connect(int(server.fields["port"]), in_bytes=(n_det + 7) // 8, out_bytes=(n_obs + 7) // 8,
                          num_syndromes=n_det, return_size=n_obs, timeout_ms=10000)
        try:
            replies = [session.round(np.packbits(shot, bitorder="little").tobytes()) for shot in dets]
        finally:
            session.destroy()
    finally:
        server.kill()
    got = np.array([np.unpackbits(np.frombuffer(r, np.uint8), bitorder="little")[:n_obs] for r in replies])
    want = offline[:, :n_obs]  # decode_batch: 0/1 per bit, observable flips first
    assert got.shape == want.shape and (got == want).all()
    assert got.any()  # the shots are not all trivial: some rounds flip an observable


# ---- (c) faults -----------------------------------------------------------------------------

def test_no_server_is_a_timeout_naming_host_and_port(backline_free_port):
    session = connect(backline_free_port, return_size=1, timeout_ms=SHORT_MS)
    try:
        with pytest.raises(DeadlineError, match=rf"the decoding server at 127\.0\.0\.1:{backline_free_port} did not "
                                                r"answer reset_decoder .*within timeout_ms=300"):
            session.round(b"\x01\x00")
    finally:
        session.destroy()


def test_invalid_decoder_is_a_round_error_naming_the_status(mini_server):
    server = mini_server(decoders=2)
    session = connect(server.port, return_size=1, decoder_id=3)
    try:
        with pytest.raises(UnknownDecoderError, match=r"answered INVALID_DECODER \(1\) to reset_decoder for decoder 3"):
            session.round(b"\x01\x00")
    finally:
        session.destroy()


def test_a_failed_get_is_an_error_and_the_next_round_resets_first(kit, mini_server):
    server = mini_server(misbehave=("status", kit.CUQR.CUQR_FN_GET_CORRECTIONS, kit.CUQR.CUQR_INTERNAL_ERROR))
    session = connect(server.port, return_size=1)
    try:
        for _ in range(2):
            with pytest.raises(TransportError, match=r"answered INTERNAL_ERROR \(3\) to get_corrections for decoder 0 "
                                                     r"\(round \d\)"):
                session.round(b"\x01\x00")
        assert [fn for fn, _ in server.requests].count(kit.CUQR.CUQR_FN_RESET_DECODER) == 2
    finally:
        session.destroy()


@pytest.mark.parametrize("misbehave", ["wrong_id", "junk"])
def test_wrong_ids_and_junk_are_ignored_until_the_deadline(mini_server, misbehave):
    server = mini_server(misbehave=misbehave)
    session = connect(server.port, return_size=1, timeout_ms=SHORT_MS)
    try:
        with pytest.raises(DeadlineError, match=rf"127\.0\.0\.1:{server.port} did not answer reset_decoder"):
            session.round(b"\x01\x00")
    finally:
        session.destroy()


def test_junk_and_a_stale_reply_before_the_right_one_are_skipped(kit, mini_server):
    server = mini_server(misbehave="junk_then_right")
    session = connect(server.port, in_bytes=1, return_size=1)
    try:
        for value in (0b1, 0b11, 0b111):
            assert session.round(bytes([value])) == bytes([bin(value).count("1") % 2])
    finally:
        session.destroy()


def test_round_payload_against_num_syndromes(mini_server):
    server = mini_server()
    session = connect(server.port, in_bytes=4, return_size=1, num_syndromes=12)
    try:
        with pytest.raises(TransportError, match=r"payload has 3 bytes; num_syndromes=12 takes 2"):
            session.round(b"\x01\x02\x03")
    finally:
        session.destroy()


@pytest.mark.parametrize("args, words", [
    ({}, "cuqr needs return_size"),
    ({"return_size": 0}, "return_size"),
    ({"return_size": 1, "decoder_id": 32}, "decoder_id"),
    ({"return_size": 1, "slot_size": 40}, "slot_size"),
    ({"return_size": 1, "slot_size": 70000}, "slot_size"),
    ({"return_size": 1, "num_syndromes": 1601}, "num_syndromes"),  # 256 - 24 - 32 = 200 bytes: 1600 bits
    ({"return_size": 1, "num_syndromes": "many"}, "num_syndromes"),
    ({"return_size": 1, "greeting": "hi"}, "greeting"),
])
def test_bad_configuration_is_one_clear_error(args, words):
    with pytest.raises(PlacementError) as info:
        connect(9, **args)
    text = str(info.value)
    assert words in text and "\n" not in text


def test_return_size_must_fit_the_sessions_reply_slot():
    with pytest.raises(PlacementError, match="return_size"):
        connect_controller(Placement(controller=Controller(init_args={"slot_bytes": 64}), transport="cuqr",
                                     coprocessors=[Coprocessor(name="server", coprocessor_fn="decoding-server",
                                                               init_args={"return_size": 33 * 8},
                                                               endpoint=Endpoint(host="127.0.0.1", port=9))]),
                           "server", in_bytes=1, out_bytes=1)


def test_the_coprocessor_side_and_other_places_are_refused(backline_free_port):
    p = placement(backline_free_port, return_size=1)
    for call in (lambda: resolve(p), lambda: deploy(p, in_bytes=1, out_bytes=1)):
        with pytest.raises(PlacementError, match=r"has no backend for cpu/coprocessor.*connect_controller"):
            call()
    with pytest.raises(PlacementError, match=r"has no backend for cpu/coprocessor"):
        Session.open("cuqr", "coprocessor", "server", config=f"host=127.0.0.1;port={backline_free_port}")
    for runs_in in ("thread", "controller-thread"):
        with pytest.raises(PlacementError, match=rf"reaches coprocessors in process, not '{runs_in}'"):
            connect_controller(placement(backline_free_port, runs_in=runs_in, return_size=1), "server",
                               in_bytes=1, out_bytes=1)
    with pytest.raises(PlacementError, match="has no Endpoint"):
        connect_controller(Placement(controller=Controller(), transport="cuqr",
                                     coprocessors=[Coprocessor(name="server", coprocessor_fn="x")]),
                           "server", in_bytes=1, out_bytes=1)


def test_a_session_opened_by_hand_needs_the_port_and_defaults_to_loopback(kit, mini_server):
    with pytest.raises(TransportError, match="needs the decoding server's port"):
        Session.open("cuqr", "controller", "by-hand", config="return_size=1", in_bytes=1, out_bytes=1)
    server = mini_server()
    with Session.open("cuqr", "controller", "by-hand", config=f"port={server.port};return_size=1",
                      in_bytes=1, out_bytes=1) as session:
        assert session.round(b"\x03") == b"\x00"
