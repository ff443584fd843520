"""Two hosts' worth of network: the controller and the coprocessor in two network namespaces
joined by a veth pair, rounds over UCX's TCP transport between the addresses this test gives
them. Needs root and iproute2; the namespaces (and the veth with them) go at the end however
the test went."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from backline_core.testing import ServeProcess, test_secret, two_namespaces

ROUNDS = 2000
PORT = 18600

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="creates network namespaces: needs root and iproute2 (`ip`)")

CONTROLLER = """
import sys, time
from backline_core import Session
table = [0x00, 0x01, 0x10, 0x02, 0x40, 0x08, 0x20, 0x04]
s = Session.open("ucx", "controller", "dec", in_bytes=1, out_bytes=1,
                 config="host={host};port={port};tls=tcp;timeout_ms=10000;connect_timeout_ms=60000;secret_file={secret}")
rtt = []
for i in range({rounds}):
    assert s.round(bytes([i & 7])) == bytes([table[i & 7]]), i
    rtt.append(s.last_rtt_ns)
s.destroy()
rtt.sort()
print(f"two-namespace rounds ok: {rounds} steane rounds over tcp, RTT median {{rtt[len(rtt) // 2] / 1e3:.1f}} us, "
      f"P99 {{rtt[int(len(rtt) * 0.99)] / 1e3:.1f}} us", flush=True)
"""


def test_rounds_cross_two_network_namespaces_over_tcp() -> None:
    with two_namespaces("10.203.0") as pair:
        host_b = pair.address_b
        with ServeProcess("ucx", PORT, "steane", host=host_b, wrapper=pair.exec_in(pair.b), tls="tcp"):
            code = CONTROLLER.format(host=host_b, port=PORT, rounds=ROUNDS, secret=test_secret())
            ctl = subprocess.run([*pair.exec_in(pair.a), sys.executable, "-c", code], capture_output=True,
                                 text=True, timeout=300)
        print(ctl.stdout)
        assert ctl.returncode == 0, ctl.stdout + ctl.stderr
        assert "two-namespace rounds ok" in ctl.stdout
        # The controller's namespace cannot reach the coprocessor's loopback: only the veth joins them.
        assert f"UCX transports: tcp/{pair.veth_a}" in ctl.stderr, ctl.stderr


def test_bench_with_a_peer_in_the_other_namespace() -> None:
    # What `backline bench --peer` needs on the peer's host: the coprocessor (key "bench") on PORT
    # and the floor's responder on PORT + 1.
    from backline_core.sdk import FLOOR_PORT_OFFSET, PEER_KEY, ChildProcess

    with two_namespaces("10.204.0") as pair:
        a, b, host_b = pair.a, pair.b, pair.address_b
        with ServeProcess("ucx", PORT, "steane", key=PEER_KEY, host=host_b, wrapper=["ip", "netns", "exec", b],
                          tls="tcp"):
            floor = ChildProcess(["ip", "netns", "exec", b, sys.executable, "-P", "-m",
                                  "backline_transport_ucx.floor", "serve", "--host", host_b, "--port",
                                  str(PORT + FLOOR_PORT_OFFSET), "--tls", "tcp", "--wait-ms", "120000"],
                                 name="the floor responder in the other namespace")
            try:
                floor.wait_ready(120)
                bench = subprocess.run(["ip", "netns", "exec", a, sys.executable, "-m", "backline_core", "bench",
                                        "--transport", "ucx", "--transport-arg", "tls=tcp", "--transport-arg",
                                        f"secret_file={test_secret()}", "--peer",
                                        f"{host_b}:{PORT}", "--coprocessor-fn", "steane", "--payload-bytes", "1",
                                        "--rounds", "5000", "--no-progress"], capture_output=True, text=True,
                                       timeout=300)
                print(bench.stdout)
                assert bench.returncode == 0, bench.stderr
                assert "lost: 0  mismatched replies: 0" in bench.stdout
                assert "floor (bare UCX active-message ping-pong)" in bench.stdout
                assert floor.wait(60) == 0, floor.output_tail()  # its initiator disconnected: it is done
            finally:
                floor.terminate()
