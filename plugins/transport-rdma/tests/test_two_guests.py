"""Two hosts: the controller and the coprocessor in two QEMU guests on a virtual wire.

Each guest has its own kernel, its own Soft-RoCE device on its own virtio NIC and its own
address; QEMU joins the two NICs with a UDP socket netdev on the host's loopback (network
namespaces in one guest do not work for rxe, which is why it takes two guests). Real RoCE v2
frames cross that wire. Booting both takes about a minute, so this runs only when asked
(BACKLINE_REQUIRE_RDMA=1, which CI sets) and needs root and QEMU.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from backline_core.sdk import generate_secret_file

GUEST = Path(__file__).resolve().parents[1] / "guest" / "run-in-guest"
REPO = Path(__file__).resolve().parents[3]
PORT = 18515
ROUNDS = 2000
BENCH_ROUNDS = 5000
#: Where each guest keeps its copy of the two ends' secret (its own tmpfs, mode 0600).
SECRET = "/tmp/backline-two-guests.secret"

pytestmark = pytest.mark.skipif(
    os.environ.get("BACKLINE_REQUIRE_RDMA") != "1",
    reason="boots two QEMU guests (about a minute); set BACKLINE_REQUIRE_RDMA=1 to run it (CI does)",
)

CONTROLLER = f"""
import statistics, sys, time
from backline_core import Session
table = [0x00, 0x01, 0x10, 0x02, 0x40, 0x08, 0x20, 0x04]
t0 = time.monotonic()
s = Session.open("rdma", "controller", "bench", in_bytes=1, out_bytes=1,
                 config="host=10.99.0.2;port={PORT};timeout_ms=10000;connect_timeout_ms=240000;secret_file={SECRET}")
print(f"connected after {{time.monotonic() - t0:.1f}} s", flush=True)
rtt = []
for i in range({ROUNDS}):
    assert s.round(bytes([i & 7])) == bytes([table[i & 7]]), i
    rtt.append(s.last_rtt_ns)
s.destroy()
rtt.sort()
print(f"two-guest rounds ok: {ROUNDS} steane rounds, RTT median {{rtt[len(rtt) // 2] / 1e3:.1f}} us, "
      f"P99 {{rtt[int(len(rtt) * 0.99)] / 1e3:.1f}} us, max {{rtt[-1] / 1e3:.1f}} us", flush=True)
"""


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _guest(out: Path, mac: str, local: int, remote: int, command: str, smp: int = 1) -> subprocess.Popen[str]:
    env = {**os.environ, "GUEST_SMP": str(smp), "GUEST_MEM": "1G", "RXE_NETDEV": "eth0", "GUEST_OUT": str(out),
           "GUEST_TIMEOUT": "600",
           "QEMU_NET": f"-netdev socket,id=n0,udp=127.0.0.1:{remote},localaddr=127.0.0.1:{local} "
                       f"-device virtio-net-pci,netdev=n0,mac={mac},romfile="}
    return subprocess.Popen([str(GUEST), command], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # QEMU and the script's pipeline with it
    out, _ = proc.communicate(timeout=60)
    return out


def test_rounds_cross_two_guests_on_a_virtual_wire() -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail("the two-guest test needs root and apt-get (run-in-guest installs QEMU and boots Debian's kernel)")
    a_port, b_port = _free_udp_port(), _free_udp_port()
    scratch = Path(tempfile.mkdtemp(prefix="backline-two-guests-"))
    python = sys.executable
    # One secret for both ends, made here; each guest copies it into its own tmpfs, mode 0600
    # (the host's root filesystem is its read-only lower layer).
    generate_secret_file(str(scratch / "secret"))
    copy_secret = f"install -m 600 {scratch / 'secret'} {SECRET}"
    # Two CPUs in the coprocessor's guest: its poller and the floor responder each spin on one.
    serve = (f"ip addr add 10.99.0.2/24 dev eth0 && {copy_secret} && {python} -m backline_core rdma bench-peer "
             f"--host 10.99.0.2 --port {PORT} --fn steane --cpu 1 --floor-cpu 0 --duration 800 --secret-file {SECRET}")
    (scratch / "controller.py").write_text(CONTROLLER)
    control = (f"ip addr add 10.99.0.1/24 dev eth0 && {copy_secret} && "
               f"for i in $(seq 120); do busybox ping -c1 -W1 10.99.0.2 >/dev/null && break; done && "
               f"{python} {scratch / 'controller.py'} && "
               f"{python} -m backline_core bench --transport rdma --peer 10.99.0.2:{PORT} "
               f"--coprocessor-fn steane --payload-bytes 1 --rounds {BENCH_ROUNDS} --block 1000 --no-progress "
               f"--controller-cpu 0 --transport-arg secret_file={SECRET}")
    b = _guest(scratch / "b", "52:54:00:00:00:02", b_port, a_port, serve, smp=2)
    a = _guest(scratch / "a", "52:54:00:00:00:01", a_port, b_port, control)
    try:
        try:
            a_out, _ = a.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            a_out = _stop(a)
            pytest.fail(f"the controller guest did not finish in 900 s:\n{a_out}")
        print(a_out)
        assert a.returncode == 0, f"controller guest failed (status {a.returncode}):\n{a_out}\n--- coprocessor guest:\n" \
                                  f"{_stop(b)}"
        assert "two-guest rounds ok" in a_out
        for needle in ("cpus=0->peer 10.99.0.2", "framework/floor: median", "lost: 0  mismatched replies: 0"):
            assert needle in a_out, f"{needle!r} missing from the controller guest's output:\n{a_out}"
        try:  # the bench closed its floor: the peer's run is over and its guest powers off
            b_out, _ = b.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the coprocessor guest did not end after the bench:\n{_stop(b)}")
        assert b.returncode == 0 and "ready peer=10.99.0.2" in b_out, b_out
    finally:
        for proc in (b, a):
            if proc.returncode is None:
                _stop(proc)
        shutil.rmtree(scratch, ignore_errors=True)
