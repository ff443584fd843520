"""``backline decoding-server`` as a process, asked by a client written here from the spec with struct
(not wire.py); its corrections against the same Backline decoder run offline; replay; CLI errors."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stim

from backline_core import plugins
from backline_core.sdk import dem_matrices
from backline_core.testing import ReadyProcess

BACKLINE = str(Path(sys.executable).with_name("backline"))
SLOT = 256
ENQUEUE, GET, RESET = 0x7ED8BE82, 0x882D5BA1, 0x977A59CF
DEADLINE_S = 60.0  # the READY line and the exit: generous, the machine is shared


def _sparse(m: np.ndarray) -> str:
    out: list[int] = []
    for row in m:
        out += [int(i) for i in np.flatnonzero(row)] + [-1]
    return "[" + ", ".join(map(str, out)) + "]"


@pytest.fixture(scope="module")
def code(tmp_path_factory):
    """A distance-3 surface code's matrices, a config YAML of them (single_error_lut), and shots."""
    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=2,
                                     after_clifford_depolarization=0.01)
    m = dem_matrices(circuit.detector_error_model(decompose_errors=True))
    h, o = (m.h != 0).astype(np.uint8), (m.o != 0).astype(np.uint8)
    entry = (f"  - id: {{id}}\n    type: single_error_lut\n    block_size: {h.shape[1]}\n"
             f"    syndrome_size: {h.shape[0]}\n    H_sparse: {_sparse(h)}\n    O_sparse: {_sparse(o)}\n"
             f"    D_sparse: {_sparse(np.eye(h.shape[0], dtype=np.uint8))}\n")
    folder = tmp_path_factory.mktemp("cudaq")
    cfg = folder / "config.yaml"
    cfg.write_text("decoders:\n" + entry.format(id=0) + entry.format(id=1))
    dets, _ = circuit.compile_detector_sampler(seed=5).sample(40, separate_observables=True)
    offline = plugins.get("decoder", "lut").build_from_matrices(h, o, depth=1).decode_batch(dets.astype(np.uint8))
    return {"config": cfg, "dets": dets.astype(np.uint8), "offline": np.asarray(offline), "folder": folder,
            "entry": entry, "observables": o.shape[0]}


class Server(ReadyProcess):
    """The server as a subprocess, its READY line read with a deadline."""

    def __init__(self, *args: str) -> None:
        super().__init__([BACKLINE, "decoding-server", *args], "QEC_DECODING_SERVER_READY ", timeout=DEADLINE_S)
        self.rings = {int(k[4:]): int(v) for k, v in self.fields.items() if k.startswith("ring")}


class MiniClient:
    """The protocol from the spec alone: 24-byte headers, little-endian, one datagram a slot."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(10.0)
        self.next_id = 100

    def send_raw(self, data: bytes) -> None:
        self.sock.sendto(data, ("127.0.0.1", self.port))

    def call(self, function_id: int, payload: bytes, ptp: int = 0) -> tuple[int, bytes]:
        self.next_id += 1
        msg = struct.pack("<IIIIQ", 0x43555152, function_id, len(payload), self.next_id, ptp) + payload
        self.send_raw(msg + bytes(SLOT - len(msg)))
        data = self.sock.recv(65536)
        magic, status, n, rid, echoed = struct.unpack_from("<IiIIQ", data)
        assert (magic, rid, echoed, len(data)) == (0x43555153, self.next_id, ptp, SLOT)
        return status, data[24:24 + n]

    def enqueue(self, decoder_id: int, bits: np.ndarray) -> int:
        packed = np.packbits(bits, bitorder="little").tobytes()
        return self.call(ENQUEUE, struct.pack("<qqqq", decoder_id, 0, 0, len(bits)) + packed)[0]

    def get(self, decoder_id: int, n: int, reset: int = 1) -> tuple[int, bytes]:
        return self.call(GET, struct.pack("<qqB", decoder_id, n, reset), ptp=0x0123456789ABCDEF)

    def close(self) -> None:
        self.sock.close()


def test_server_decodes_as_the_decoder_offline_and_survives_junk(code):
    server = Server("--config", str(code["config"]), "--transport", "udp", "--port", "0", "--timeout", "300")
    clients = []
    try:
        assert server.fields["transport"] == "udp" and set(server.rings) == {0, 1}
        assert server.fields["port"] == str(server.rings[0])
        a, b = MiniClient(server.rings[0]), MiniClient(server.rings[1])
        clients += [a, b]
        n_obs = code["observables"]
        assert a.get(0, n_obs)[0] == 4  # NOT_READY before any shot
        for i, (det, want) in enumerate(zip(code["dets"], code["offline"])):
            client, did = (a, 0) if i % 2 == 0 else (b, 1)
            assert client.enqueue(did, det[:5]) == 0 and client.enqueue(did, det[5:]) == 0  # two rounds
            status, result = client.get(did, n_obs)
            assert status == 0
            assert np.unpackbits(np.frombuffer(result, np.uint8), count=n_obs, bitorder="little").tolist() == \
                list(want)
        assert a.call(RESET, struct.pack("<q", 7))[0] == 1  # INVALID_DECODER
        # junk: empty, short, wrong magic, oversized, a truncated payload, an unknown function
        a.send_raw(b"")
        a.send_raw(b"junk")
        a.send_raw(struct.pack("<IIIIQ", 0xBAD0BAD0, RESET, 8, 1, 0) + bytes(8))
        a.send_raw(bytes(SLOT + 1))
        a.send_raw(struct.pack("<IIIIQ", 0x43555152, 0x11111111, 8, 1, 0) + bytes(8))
        a.send_raw(struct.pack("<IIIIQ", 0x43555152, GET, 17, 9, 0) + bytes(4))  # answered BAD_REQUEST
        magic, status, _, rid, _ = struct.unpack_from("<IiIIQ", a.sock.recv(65536))
        assert (magic, status, rid) == (0x43555153, 2, 9)
        # the next valid request is answered
        assert a.enqueue(0, code["dets"][0]) == 0 and a.get(0, n_obs)[0] == 0
        rc, rest, err = server.stop(signal.SIGTERM)
        assert rc == 0, err
        assert f"QEC_DECODING_SERVER_RING decoder=0 dispatched={1 + 20 * 3 + 1 + 1 + 2}" in rest
        assert "QEC_DECODING_SERVER_RING decoder=1 dispatched=60" in rest
        assert "QEC_DECODING_SERVER_DROPPED truncated=2 oversized=1 magic=1 function=1" in rest
        assert "QEC_DECODING_SERVER_BAD_REQUESTS truncated=1 oversized=0 invalid=0" in rest
        assert err.count("\n") == 5 and "Traceback" not in err  # logged once a kind (4 dropped, 1 answered)
    finally:
        for c in clients:
            c.close()
        server.kill()


def test_sigint_stops_it_too(code):
    server = Server("--config", str(code["config"]), "--timeout", "300")
    try:
        rc, rest, err = server.stop(signal.SIGINT)
        assert rc == 0 and "QEC_DECODING_SERVER_RING decoder=1 dispatched=0" in rest, err
    finally:
        server.kill()


def _write_playback(path: Path, dets: np.ndarray, corrections: list[int]) -> None:
    lines = ["NUM_DATA 9", "NUM_LOGICAL 1"]
    count = 0
    for s, det in enumerate(dets):
        lines.append(f"SHOT_START {s}")
        for group in (det[:8], det[8:]):  # the second group byte-padded, MSB-first as their capture writes
            lines.append(f"ROUND_START {count}")
            lines += [str(int(b)) for b in group] + ["0"] * (-len(group) % 8)
            count += 1
    lines += ["CORRECTIONS_START", *map(str, corrections), "CORRECTIONS_END"]
    path.write_text("\n".join(lines) + "\n")


def test_replay_matches_and_reports_mismatches(code):
    cfg = code["folder"] / "one.yaml"
    cfg.write_text("decoders:\n" + code["entry"].format(id=0))
    dets = np.concatenate([code["dets"][:, :11], code["dets"][:, 11:]], axis=1)  # 16 bits: 8 + 8
    expected = [int(x) for x in code["offline"][:, 0]]
    good = code["folder"] / "good.txt"
    _write_playback(good, dets, expected)
    run = subprocess.run([BACKLINE, "decoding-server", "replay", str(good), "--config", str(cfg)],
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 0, run.stderr
    assert f"{len(dets)} shots, {len(dets)} matched, 0 mismatched" in run.stdout
    bad = code["folder"] / "bad.txt"
    _write_playback(bad, dets, [expected[0] ^ 1] + expected[1:])
    run = subprocess.run([BACKLINE, "decoding-server", "replay", str(bad), "--config", str(cfg)],
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 1 and "1 mismatched" in run.stdout and "shot 0: replayed" in run.stdout


@pytest.mark.parametrize("args, words", [
    (["--transport", "cpu_roce"], "udp only"),
    (["--host", "0.0.0.0"], "--allow-remote"),
    (["--port", "5000"], "--port 0"),  # two decoders need a port each
    (["--slot-size", "10"], "--slot-size"),
    (["--timeout", "-1"], "seconds"),
])
def test_cli_errors_are_one_line_exit_2(code, args, words):
    run = subprocess.run([BACKLINE, "decoding-server", "--config", str(code["config"]), *args],
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("backline: error:") and words in run.stderr


def test_more_decoders_than_the_limit_is_an_error(code):
    many = code["folder"] / "many.yaml"
    many.write_text("decoders:\n" + "".join(code["entry"].format(id=i) for i in range(33)))
    run = subprocess.run([BACKLINE, "decoding-server", "--config", str(many)], capture_output=True, text=True,
                         timeout=DEADLINE_S)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "32" in run.stderr


def test_replay_of_a_malformed_file_is_one_line(code, tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("NUM_DATA 9\nNUM_LOGICAL 1\nSHOT_START 0\nbanana\n")
    run = subprocess.run([BACKLINE, "decoding-server", "replay", str(bad), "--config", str(code["config"])],
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert run.returncode == 2 and "x.txt:4" in run.stderr and run.stderr.count("\n") == 1


def test_bench_measures_against_the_floor(code, tmp_path):
    from backline_qec.cudaq.bench import measure
    from backline_qec.cudaq.config import read_config

    report = measure(read_config(str(code["config"])), rounds=50, warmup=5)
    assert report["rounds"] == 50 and report["ratio_p50"] > 0
    assert os.path.exists(BACKLINE)
