"""The ucx transport for the conformance suite (test_conformance.py): over UCX shared memory and
over TCP on this host, every coprocessor a real `backline coprocessor serve --transport ucx`."""

from __future__ import annotations

import pytest

from backline_core.testing import TransportUnderTest

#: the transports UCX may use, as the ucx transport names them (its ``tls`` key)
TLS = ["shm", "tcp"]


@pytest.fixture(params=TLS)
def backline_transport(request: pytest.FixtureRequest) -> TransportUnderTest:
    return TransportUnderTest(
        "ucx", init_args={"tls": request.param}, id=request.param,
        peer_gone=("closed", "UCX"),  # the connection's closing, or UCX's endpoint error
        bad_values=[({"tls": value}, [f"tls={value}", "shm", "tcp"]) for value in ("udp", "SHM", "shm,tcp")])
