"""CUDA-Q's RPC framing over Backline's transports: the CUQR session function on a coprocessor,
requests as rounds (replay.SessionClient); a shot's corrections equal the decoder's offline answer
on every placement here."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from backline_core import Controller, Coprocessor, Endpoint, Placement, deploy, plugins
from backline_core.sdk import free_port, local_executor
from backline_qec.cudaq import wire
from backline_qec.cudaq.config import read_config
from backline_qec.cudaq.replay import RpcError, SessionClient
from backline_qec.cudaq.session import SessionDecoder, session_function, with_slot_bytes
from backline_qec.cudaq.wire import Status

CONFIG = Path(__file__).parent / "data" / "surface_d3_r2_cudaq.yaml"
SLOT = 256


def places() -> list[tuple[str, str, dict[str, str]]]:
    out = [("memcpy", "thread", {}), ("memcpy", "process", {})]
    if plugins.names("executor") and importlib.util.find_spec("backline_compiler"):  # it runs compiled code
        out.append(("memcpy", "executor", {}))
    if "ucx" in plugins.names("transport"):
        out += [("ucx", "process", {"tls": "shm"}), ("ucx", "process", {"tls": "tcp"})]
    return out


@contextlib.contextmanager
def session_on(function, transport: str, runs_in: str, args: dict[str, str]):
    """A controller session whose coprocessor runs ``function`` there."""
    with contextlib.ExitStack() as stack:
        endpoint = None
        if plugins.transport_backend(transport, "cpu", "coprocessor").needs_endpoint:
            endpoint = Endpoint(host="127.0.0.1", port=free_port("127.0.0.1"))
        executor = stack.enter_context(local_executor()) if runs_in == "executor" else None
        init = with_slot_bytes(args, SLOT)
        placement = Placement(controller=Controller(init_args=init), transport=transport, coprocessors=[
            Coprocessor(name="cuqr", coprocessor_fn=function, runs_in=runs_in, endpoint=endpoint, executor=executor,
                        init_args=init)])
        yield stack.enter_context(deploy(placement, in_bytes=SLOT, out_bytes=SLOT)).session()


def shots_and_offline(config, n: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Random measurements and the decoder's own answer for each: D m mod 2, decoded offline."""
    m = (np.random.default_rng(3).random((n, config.num_measurements)) < 0.05).astype(np.uint8)
    dets = m if config.D is None else (m @ config.D.T.astype(np.int64) % 2).astype(np.uint8)
    return m, np.asarray(config.build().decode_batch(dets))


def check_shots(client: SessionClient, config, m: np.ndarray, offline: np.ndarray) -> None:
    n_obs = config.num_observables
    with pytest.raises(RpcError, match="NOT_READY"):
        client.get_corrections(config.id, n_obs)
    for shot, want in zip(m, offline):
        half = len(shot) // 2
        client.enqueue(config.id, shot[:half])  # a shot over two enqueues
        client.enqueue(config.id, shot[half:])
        assert client.get_corrections(config.id, n_obs, reset=True).tolist() == list(want)
    header, _ = client.call(7, wire.RESET_DECODER, wire.encode_reset(7), ptp_timestamp=2**64 - 1)
    assert (header.status, header.ptp_timestamp) == (Status.INVALID_DECODER, 2**64 - 1)


@pytest.mark.parametrize("transport, runs_in, args", places(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_shot_over_a_transport_equals_the_decoder_offline(transport: str, runs_in: str, args: dict[str, str]):
    config = read_config(str(CONFIG))[0]  # single_error_lut: native, so an executor runs it too
    m, offline = shots_and_offline(config)
    function = session_function([SessionDecoder.from_config(config)], SLOT)
    assert not function.is_python
    with session_on(function, transport, runs_in, args) as session:
        check_shots(SessionClient(session, slot_size=SLOT), config, m, offline)


@pytest.mark.parametrize("runs_in", ["thread", "process"])
def test_a_python_inner_decoder_is_bound_where_the_session_runs(runs_in: str):
    pytest.importorskip("backline_decoder_pymatching", reason="the pymatching decoder plugin is not installed")
    config = next(c for c in read_config(str(CONFIG)) if c.decoder == "pymatching")
    m, offline = shots_and_offline(config)
    function = session_function([SessionDecoder.from_config(config)], SLOT)
    assert function.is_python
    with session_on(function, "memcpy", runs_in, {}) as session:
        check_shots(SessionClient(session, slot_size=SLOT), config, m, offline)


def test_junk_over_a_transport_fails_the_round_and_the_session_serves_on():
    config = read_config(str(CONFIG))[0]
    m, offline = shots_and_offline(config, 3)
    with session_on(session_function([SessionDecoder.from_config(config)], SLOT), "memcpy", "thread", {}) as s:
        with pytest.raises(Exception, match="function"):
            s.round(b"junk")  # no CUQR header: the function refuses the round (no reply to give)
        check_shots(SessionClient(s, slot_size=SLOT), config, m, offline)
