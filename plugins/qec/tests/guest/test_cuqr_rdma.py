"""CUDA-Q's RPC framing over rdma (the coprocessor in a process, as rdma places it), in the Soft-RoCE guest:
a shot's corrections equal the decoder's offline answer.

Skips without a verbs device; fails instead under BACKLINE_REQUIRE_RDMA=1 (CI's guest stage runs this
folder so). Run here with ``plugins/transport-rdma/guest/run-in-guest '.venv/bin/python -m pytest
plugins/qec/tests/guest'``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backline_core import Controller, Coprocessor, Endpoint, Placement, deploy
from backline_core.sdk import free_port

HERE = "plugins/qec/tests/guest"
CONFIG = Path(__file__).parent.parent / "cudaq" / "data" / "surface_d3_r2_cudaq.yaml"
SLOT = 256


@pytest.fixture(scope="module")
def rdma_device() -> str:
    testing = pytest.importorskip("backline_transport_rdma.testing",
                                  reason="the rdma transport plugin (plugins/transport-rdma) is not installed")
    return testing.require_device(HERE)


def test_cuqr_requests_over_rdma_decode_as_the_decoder_offline(rdma_device: str) -> None:
    from backline_qec.cudaq.config import read_config
    from backline_qec.cudaq.replay import SessionClient
    from backline_qec.cudaq.session import SessionDecoder, session_function, with_slot_bytes

    config = read_config(str(CONFIG))[0]  # single_error_lut
    m = (np.random.default_rng(3).random((30, config.num_measurements)) < 0.05).astype(np.uint8)
    dets = m if config.D is None else (m @ config.D.T.astype(np.int64) % 2).astype(np.uint8)
    offline = np.asarray(config.build().decode_batch(dets))
    # Soft-RoCE works in the guest's kernel, whose softirqs compete with the spinning ends for the
    # guest's emulated CPUs: a round may stall past the default deadline there
    args = with_slot_bytes({"device": rdma_device, "timeout_ms": 10000}, SLOT)
    placement = Placement(controller=Controller(init_args=args), transport="rdma", coprocessors=[
        Coprocessor(name="cuqr", runs_in="process", init_args=args,
                    coprocessor_fn=session_function([SessionDecoder.from_config(config)], SLOT),
                    endpoint=Endpoint(host="127.0.0.1", port=free_port("127.0.0.1")))])
    with deploy(placement, in_bytes=SLOT, out_bytes=SLOT) as d:
        client = SessionClient(d.session(), slot_size=SLOT)
        for shot, want in zip(m, offline):
            client.enqueue(config.id, shot)
            assert client.get_corrections(config.id, config.num_observables, reset=True).tolist() == list(want)
