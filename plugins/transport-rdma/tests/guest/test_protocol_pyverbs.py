"""An independent check of the rdma wire protocol: a controller written with pyverbs from docs/rdma.md alone.

It shares no code with the backend (native/rdma.c): its own queue pair and registered memory
for the reply ring, the CHALLENGE / HELLO / OFFER / CONNECT / READY handshake packed with
``struct`` in network order (both ends' tags computed with the SDK's trust kit, backline/trust.h,
from the test process's secret file, which the coprocessor is given too), and each request frame (docs/wire-format.md: a little-endian 32-byte header,
then the payload) copied into the coprocessor's request ring with one RDMA WRITE_WITH_IMM:
bytes 8..32+len to slot+8, the low 32 bits of the sequence number as the immediate. Replies
arrive the same way: a receive completion whose immediate names the round. The peer is a real
``backline coprocessor serve --transport rdma`` process, shared by the tests of this module
(each test starts where the last left the round sequence, which the OFFER reports).
"""

from __future__ import annotations

import ipaddress
import os
import random
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backline_transport_rdma.devices import PyverbsUnavailable, load_pyverbs

from backline_core import Session
from backline_core.sdk import connection_addresses, lib, new_nonce, read_secret_file, tag, tags_equal
from backline_core.testing import ServeProcess, endpoint_config, free_port, test_secret

pytestmark = pytest.mark.usefixtures("rdma_device")

HOST = "127.0.0.1"
KEY = "dec"
#: Under TCG Python runs ~14x slower than on the host: generous deadlines, small tests.
START_S = 180.0
STEP_S = 30.0

# docs/rdma.md, "Handshake": every integer big-endian.
MAGIC, VERSION = 0x424C5244, 2
HELLO, OFFER, CONNECT, READY, CHALLENGE = 1, 2, 3, 4, 5
HEADER = struct.Struct(">IHHI")  # magic, version, type, body length
PEER = struct.Struct(">II16sQIII")  # qpn, psn, gid, ring address, rkey, mtu, reserved
NONCE_BYTES = TAG_BYTES = 32
ASK = struct.Struct(">I64sI")  # ABI version, key (NUL-padded), flags: what the controller asks for
HELLO_BODY = struct.Struct(f">72s{NONCE_BYTES}s{TAG_BYTES}s")  # the ask, the controller's nonce, its tag
OFFER_HEAD = struct.Struct(">iIIQ")  # status, slots, slot_bytes, rounds served
TEXT_BYTES = 160
READY_BODY = struct.Struct(f">i{TEXT_BYTES}s")
BODY_BYTES = {HELLO: 136, OFFER: 256, CONNECT: 44, READY: 164, CHALLENGE: 32}
PROTOCOL = "rdma"  # the transcript's protocol name
# docs/wire-format.md: the frame header, every field little-endian.
FRAME = struct.Struct("<QIIiIq")  # seq, len, decoder_id, status, flags, fn_status

STEANE = {0x00: 0x00, 0x01: 0x01, 0x02: 0x10, 0x03: 0x02, 0x04: 0x40, 0x05: 0x08, 0x06: 0x20, 0x07: 0x04}


def test_layouts_are_the_documented_sizes():
    assert HEADER.size == 12 and PEER.size == 44 and HELLO_BODY.size == BODY_BYTES[HELLO] and ASK.size == 72
    assert OFFER_HEAD.size + PEER.size + TEXT_BYTES + TAG_BYTES == BODY_BYTES[OFFER]
    assert (NONCE_BYTES, TAG_BYTES) == (lib.BL_TRUST_NONCE_BYTES, lib.BL_TRUST_TAG_BYTES) == (BODY_BYTES[CHALLENGE], 32)
    assert PEER.size == BODY_BYTES[CONNECT] and READY_BODY.size == BODY_BYTES[READY]
    assert FRAME.size == lib.BL_FRAME_HEADER_BYTES


# -- the handshake over TCP -------------------------------------------------------------------

def message(kind: int, body: bytes, *, version: int = VERSION) -> bytes:
    assert len(body) == BODY_BYTES[kind]
    return HEADER.pack(MAGIC, version, kind, len(body)) + body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the coprocessor closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_message(sock: socket.socket, kind: int) -> bytes:
    magic, version, got, length = HEADER.unpack(recv_exactly(sock, HEADER.size))
    assert (magic, version, got, length) == (MAGIC, VERSION, kind, BODY_BYTES[kind])
    return recv_exactly(sock, length)


def text(raw: bytes) -> str:
    assert len(raw) == TEXT_BYTES
    return raw.rstrip(b"\0").decode()


@dataclass(frozen=True)
class Peer:
    qpn: int
    psn: int
    gid: bytes
    ring: int
    rkey: int
    mtu: int

    @classmethod
    def unpack(cls, raw: bytes) -> Peer:
        qpn, psn, gid, ring, rkey, mtu, reserved = PEER.unpack(raw)
        assert reserved == 0
        return cls(qpn, psn, gid, ring, rkey, mtu)

    def pack(self) -> bytes:
        return PEER.pack(self.qpn, self.psn, self.gid, self.ring, self.rkey, self.mtu, 0)


@dataclass(frozen=True)
class Offer:
    status: int
    slots: int
    slot_bytes: int
    served: int
    peer: Peer
    text: str
    tag: bytes

    @classmethod
    def unpack(cls, raw: bytes) -> Offer:
        status, slots, slot_bytes, served = OFFER_HEAD.unpack_from(raw)
        peer = raw[OFFER_HEAD.size:OFFER_HEAD.size + PEER.size]
        at = OFFER_HEAD.size + PEER.size
        return cls(status, slots, slot_bytes, served, Peer.unpack(peer), text(raw[at:at + TEXT_BYTES]),
                   raw[at + TEXT_BYTES:])


def secret() -> bytes:
    """The secret the coprocessor was given (ServeProcess passes it the test process's file)."""
    return read_secret_file(test_secret())


@dataclass
class Connection:
    """One TCP connection to the coprocessor, past its CHALLENGE: the transcript's parts so far."""

    sock: socket.socket
    server_nonce: bytes
    client_nonce: bytes = b""
    ask: bytes = b""

    def transcript_tag(self, side: str, key: bytes) -> bytes:
        """``side``'s tag for this connection's handshake under ``key`` (backline/trust.h)."""
        client, server = connection_addresses(self.sock, server=False)
        return tag(key, side, PROTOCOL, self.server_nonce, self.client_nonce, client, server, context=self.ask)

    def hello(self, key: str = KEY, abi: int = lib.BACKLINE_ABI_VERSION, *, under: bytes | None = None) -> bytes:
        """A HELLO asking for ``key``, with this connection's tag under ``under`` (default: the secret)."""
        self.client_nonce, self.ask = new_nonce(), ASK.pack(abi, key.encode(), 0)
        proof = self.transcript_tag("client", secret() if under is None else under)
        return message(HELLO, HELLO_BODY.pack(self.ask, self.client_nonce, proof))

    def offer(self) -> Offer:
        return Offer.unpack(recv_message(self.sock, OFFER))

    def proves_the_secret(self, offer: Offer) -> bool:
        """Whether the OFFER's tag is the coprocessor's for this connection's HELLO."""
        return tags_equal(offer.tag, self.transcript_tag("server", secret()))


def dial(port: int) -> Connection:
    """Connect; the coprocessor speaks first: its CHALLENGE, the nonce the HELLO's tag covers."""
    sock = socket.create_connection((HOST, port), timeout=STEP_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Connection(sock, recv_message(sock, CHALLENGE))


def offer_for(port: int, **hello: Any) -> tuple[Offer, Connection]:
    """Send a HELLO (``hello``: its key, abi, under) on a new connection; the OFFER it gets, and the connection."""
    conn = dial(port)
    conn.sock.sendall(conn.hello(**hello))
    return conn.offer(), conn


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the coprocessor closes (or resets) this connection within STEP_S."""
    sock.settimeout(STEP_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# -- the controller: pyverbs --------------------------------------------------------------------

@pytest.fixture(scope="module")
def pyverbs(rdma_device: str) -> Any:
    try:
        return load_pyverbs()
    except PyverbsUnavailable as exc:
        if os.environ.get("BACKLINE_REQUIRE_RDMA") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


class VerbsController:
    """A controller from docs/rdma.md: one RC queue pair, a request staging area and a reply ring."""

    def __init__(self, device: str, port: int) -> None:
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.pd import PD

        self.e = e
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        self.rcq = CQ(self.ctx, 16)  # arrivals: one completion per reply
        self.ib_port = 1
        self.port_attr = self.ctx.query_port(self.ib_port)
        self.gid_index, self.gid = self._roce_v2_ipv4_gid()
        self.conn = dial(port)
        self.sock = self.conn.sock
        self.sock.sendall(self.conn.hello())
        self.offer = self.conn.offer()
        # docs/rdma.md: the controller believes no OFFER whose tag does not check
        assert self.conn.proves_the_secret(self.offer), self.offer
        self.seq = self.offer.served  # the last round's; this controller's are numbered after it

    def _roce_v2_ipv4_gid(self) -> tuple[int, bytes]:
        from pyverbs.pyverbs_error import PyverbsError

        for index in range(self.port_attr.gid_tbl_len):
            try:
                entry = self.ctx.query_gid_ex(self.ib_port, index)
            except PyverbsError:
                continue
            raw = struct.pack("=QQ", entry.gid_subnet_prefix, entry.gid_interface_id)
            if entry.gid_type == self.e.IBV_GID_TYPE_ROCE_V2 and ipaddress.IPv6Address(raw).ipv4_mapped:
                return index, raw
        pytest.fail("port 1 has no RoCE v2 GID with an IPv4-mapped address")

    def connect(self) -> None:
        """Connect this queue pair to the offered one (INIT, RTR, RTS), then CONNECT; READY must say 0."""
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.mr import MR
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        e, offer = self.e, self.offer
        assert offer.status == 0, offer
        ring_bytes = offer.slots * offer.slot_bytes
        self.replies = MR(self.pd, ring_bytes, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        self.replies.write(bytes(ring_bytes), ring_bytes, 0)
        self.requests = MR(self.pd, ring_bytes, e.IBV_ACCESS_LOCAL_WRITE)  # frames are staged here, then written
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.rcq, cap=cap, sq_sig_all=0))
        from pyverbs.wr import SGE, RecvWR

        # A WRITE_WITH_IMM consumes a receive entry but writes nothing into its buffer; pyverbs
        # wants one SGE per entry, so each names this small, never-written sink.
        self.sink = MR(self.pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        self.recv_wr = lambda: RecvWR(num_sge=1, sg=[SGE(self.sink.buf, 64, self.sink.lkey)])
        psn = random.getrandbits(24)
        dgid = GID(":".join(offer.peer.gid[i:i + 2].hex() for i in range(0, 16, 2)))
        attr = QPAttr(port_num=self.ib_port)
        attr.path_mtu = min(self.port_attr.active_mtu, offer.peer.mtu)
        attr.dest_qp_num = offer.peer.qpn
        attr.rq_psn = offer.peer.psn
        attr.sq_psn = psn
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        attr.ah_attr = AHAttr(is_global=1, port_num=self.ib_port,
                              gr=GlobalRoute(dgid=dgid, sgid_index=self.gid_index, hop_limit=64))
        self.qp.to_rts(attr)
        for _ in range(16):  # receives can be posted once the queue pair is past RESET
            self.qp.post_recv(self.recv_wr())
        mine = Peer(self.qp.qp_num, psn, self.gid, self.replies.buf, self.replies.rkey, self.port_attr.active_mtu)
        self.sock.sendall(message(CONNECT, mine.pack()))
        status, why = READY_BODY.unpack(recv_message(self.sock, READY))
        assert (status, text(why)) == (0, "")

    def post(self, payload: bytes, decoder_id: int = 0) -> int:
        """Copy the next round's frame into the coprocessor's request ring; its sequence number."""
        from pyverbs.wr import SGE, SendWR

        e, offer = self.e, self.offer
        self.seq += 1
        off = ((self.seq - 1) & (offer.slots - 1)) * offer.slot_bytes
        frame = FRAME.pack(self.seq, len(payload), decoder_id, 0, 0, 0) + payload
        self.requests.write(frame, len(frame), off)
        remote = offer.peer.ring + off
        wr = SendWR(wr_id=self.seq, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1,
                    imm_data=socket.htonl(self.seq & 0xFFFFFFFF),
                    sg=[SGE(self.requests.buf + off + 8, len(frame) - 8, self.requests.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(offer.peer.rkey, remote + 8)
        self.qp.post_send(wr)  # the frame less its sequence number, which is the immediate
        deadline = time.monotonic() + STEP_S
        while True:
            n, wcs = self.cq.poll(num_entries=1)
            if n:
                assert (wcs[0].status, wcs[0].wr_id) == (e.IBV_WC_SUCCESS, self.seq), wcs[0]
                return self.seq
            assert time.monotonic() < deadline, f"no completion for the WRITE of round {self.seq}"

    def reply(self, seq: int) -> tuple[tuple[int, ...], bytes]:
        """Wait for round ``seq``'s reply (its receive completion): (header fields, payload).

        The sequence number is the completion's immediate; the coprocessor does not write it."""
        e = self.e
        deadline = time.monotonic() + STEP_S
        while True:
            n, wcs = self.rcq.poll(num_entries=1)
            if n:
                break
            assert time.monotonic() < deadline, f"no reply to round {seq}"
        wc = wcs[0]
        assert (wc.status, wc.opcode, socket.ntohl(wc.imm_data)) == \
            (e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, seq & 0xFFFFFFFF), wc
        self.qp.post_recv(self.recv_wr())
        off = ((seq - 1) & (self.offer.slots - 1)) * self.offer.slot_bytes
        header = (seq, *FRAME.unpack(self.replies.read(FRAME.size, off))[1:])
        return header, self.replies.read(header[1], off + FRAME.size) if header[1] else b""

    def close(self) -> None:
        self.sock.close()
        self.ctx.close()  # and with it the queue pair, the memory regions, the CQ and the PD


# -- the coprocessor: a real `backline coprocessor serve` ----------------------------------------

@dataclass
class Coprocessor:
    proc: subprocess.Popen
    port: int
    stderr: Path
    served: int = 0  # rounds answered so far, as the next OFFER must say

    @property
    def config(self) -> str:
        return endpoint_config(HOST, self.port)  # with the secret file the coprocessor was given


@pytest.fixture(scope="module")
def coprocessor(pyverbs: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coprocessor]:
    port = free_port(HOST)
    stderr = tmp_path_factory.mktemp("rdma") / "coprocessor.stderr"
    with open(stderr, "w") as err, ServeProcess("rdma", port, "steane", key=KEY, host=HOST, stderr=err,
                                                start_timeout=START_S) as serve:
        assert serve.ready.startswith(f"ready key={KEY} "), (serve.ready, stderr.read_text())
        yield Coprocessor(serve.proc, port, stderr)


@pytest.fixture
def controller(coprocessor: Coprocessor, rdma_device: str) -> Iterator[VerbsController]:
    ctl = VerbsController(rdma_device, coprocessor.port)
    try:
        yield ctl
    finally:
        ctl.close()


# -- the tests ----------------------------------------------------------------------------------

def test_steane_rounds_through_pyverbs(coprocessor, controller):
    offer = controller.offer
    assert (offer.status, offer.text) == (0, "")
    assert (offer.slots, offer.slot_bytes) == (64, 256)  # the coprocessor's geometry: the defaults
    assert offer.served == coprocessor.served
    assert offer.peer.mtu in range(1, 6) and offer.peer.rkey and offer.peer.ring % 64 == 0
    assert ipaddress.IPv6Address(offer.peer.gid).ipv4_mapped == ipaddress.IPv4Address(HOST)
    controller.connect()
    # all eight in flight at once (slots 0..7 of both rings), on decoder ids 0 and 1
    rounds = [(controller.post(bytes([s]), decoder_id=s & 1), s) for s in STEANE]
    for seq, syndrome in rounds:
        header, payload = controller.reply(seq)
        assert header == (seq, 1, syndrome & 1, 0, 0, 0), syndrome
        assert payload == bytes([STEANE[syndrome]]), syndrome
    # a reply's status and fn_status: steane returns 2 for a 2-byte request; nothing serves decoder 9
    seq = controller.post(b"\x01\x00")
    assert controller.reply(seq) == ((seq, 0, 0, lib.BL_EFN, 0, 2), b"")
    seq = controller.post(b"\x01", decoder_id=9)
    assert controller.reply(seq) == ((seq, 0, 9, lib.BL_EDECODER, 0, 0), b"")
    coprocessor.served = controller.seq


def test_a_non_backline_peer_is_dropped_and_the_coprocessor_serves_on(coprocessor):
    conn = dial(coprocessor.port)
    with conn.sock:
        conn.sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert closed_by_peer(conn.sock)
    assert coprocessor.proc.poll() is None
    session = Session.open("rdma", "controller", KEY, config=coprocessor.config, in_bytes=1, out_bytes=1)
    try:
        assert session.round(b"\x02") == b"\x10"
    finally:
        session.destroy()
    coprocessor.served += 1
    log = coprocessor.stderr.read_text()
    assert 'not a Backline rdma controller (it sent "GET / HTTP/1")' in log, log


@pytest.mark.parametrize("hello, status, says", [
    ({"key": "other"}, lib.BL_ENOTFOUND, "this port does not serve key 'other'"),
    ({"abi": 999}, lib.BL_EABI, "ABI 999"),
], ids=["another-key", "another-abi"])
def test_a_controller_it_cannot_serve_is_refused_with_a_reason_it_can_believe(coprocessor, hello, status, says):
    offer, conn = offer_for(coprocessor.port, **hello)
    with conn.sock:
        assert offer.status == status
        assert says in offer.text, offer.text
        assert f"'{KEY}'" not in offer.text  # what the port serves is told to no one
        assert conn.proves_the_secret(offer)  # an authenticated controller's refusal is signed
        assert closed_by_peer(conn.sock)


def test_another_handshake_version_is_refused_before_its_body_is_read(coprocessor):
    conn = dial(coprocessor.port)
    with conn.sock:
        conn.sock.sendall(HEADER.pack(MAGIC, 1, HELLO, 72))  # version 1's HELLO header
        offer = conn.offer()
        assert offer.status == lib.BL_EABI
        assert "version 1 of the rdma handshake, this coprocessor version 2" in offer.text, offer.text
        assert offer.tag == bytes(TAG_BYTES)  # unauthenticated: nothing to sign
        assert closed_by_peer(conn.sock)


def test_a_controller_without_the_secret_is_refused_and_told_nothing(coprocessor):
    offer, conn = offer_for(coprocessor.port, under=b"not the coprocessor's secret, 32+ bytes long")
    with conn.sock:
        assert offer.status == lib.BL_EAUTH
        assert "authentication failed" in offer.text and "secret_file" in offer.text, offer.text
        assert (offer.slots, offer.slot_bytes, offer.served, offer.tag) == (0, 0, 0, bytes(TAG_BYTES))
        assert offer.peer == Peer(0, 0, bytes(16), 0, 0, 0)
        assert closed_by_peer(conn.sock)


def test_a_hello_replayed_on_another_connection_is_refused(coprocessor):
    # A relay that saw one connection's HELLO cannot reuse it: the tag covers the nonce and the
    # addresses of the connection it was made for.
    first = dial(coprocessor.port)
    with first.sock:
        seen = first.hello()
        second = dial(coprocessor.port)
        with second.sock:
            second.sock.sendall(seen)
            offer = second.offer()
            assert offer.status == lib.BL_EAUTH, offer
            assert closed_by_peer(second.sock)


def test_a_second_controller_is_busy_while_one_is_connected(coprocessor, controller):
    assert controller.offer.served == coprocessor.served
    controller.connect()
    offer, conn = offer_for(coprocessor.port)
    with conn.sock:
        assert offer.status == lib.BL_EBUSY, offer
        assert "another controller" in offer.text
        assert conn.proves_the_secret(offer)
        assert closed_by_peer(conn.sock)
    seq = controller.post(b"\x07")  # the first one is still served
    assert controller.reply(seq) == ((seq, 1, 0, 0, 0, 0), b"\x04")
    coprocessor.served = controller.seq
