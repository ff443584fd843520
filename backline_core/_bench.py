"""`backline bench`: round-trip latency of the framework against a bare floor, in one run.

Rounds are issued from native code (``bl_bench_rounds``) or, with ``driver="python"``,
from a Python loop through :meth:`Session.round_into`. The floor is a minimal native
shared-memory ping-pong between the same two CPUs (``bl_bench_floor``), or the transport's
own bare floor where its Transport record has ``bench_floor`` (rdma: RDMA WRITEs between two
processes). Framework and floor run in interleaved blocks so both see the same machine
state, and the report gives their ratio: absolute numbers on a shared VM move between
runs; ratios do not.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import numbers
import os
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _plugins as plugins
from ._bound_function import BoundFunction
from ._coprocessor_function import CoprocessorFunction
from ._deployment import connect_controller, deploy
from ._errors import BacklineError, from_status
from ._hookspecs import HARDWARE
from ._abi import ffi, last_error, lib
from ._placement import RUNS_IN, Controller, Coprocessor, Endpoint, Placement
from ._process import free_port, pause, resume
from ._resolution import resolve

PERCENTILES = (("p99", 99.0), ("p999", 99.9), ("p9999", 99.99), ("p99999", 99.999))
#: the shared-memory floor's row in the report (a transport's own floor names itself)
SHM_FLOOR_LABEL = "floor (bare shared-memory ping-pong)"
STEANE_TABLE = (-1, 6, 4, 5, 0, 3, 1, 2)
#: the session key of the coprocessor a bench peer serves (`--peer`)
PEER_KEY = "bench"


@dataclass
class BenchConfig:
    """What `backline bench` runs (its command-line options, one to one)."""

    transport: str = "memcpy"
    #: the controller's hardware: a controller part with its own bench (Transport.controller_bench,
    #: e.g. the FPGA engine) runs the bench when it is not "cpu"
    controller_hardware: str = "cpu"
    #: with such a controller: "sw" (a software kick per round) or "hw" (its hardware issues the rounds)
    loop: str = "sw"
    runs_in: str | None = None  # where the coprocessor runs; None: the transport's default
    coprocessor_fn: str = "echo"
    rounds: int = 1_000_000
    payload_bytes: int = 8
    cadence: str = "b2b"
    gap_ns: int = 2_000
    gap_span: int = 0x3FFF
    seed: int = 1
    controller_cpu: int | None = 0
    coprocessor_cpu: int | None = 1
    driver: str = "native"
    code: str | None = None
    error_rate: float = 0.05
    decoder_id: int = 0
    decoder_params: dict[str, str] = field(default_factory=dict)
    #: the transport's own init_args (its Transport record declares them), for both nodes
    transport_args: dict[str, str] = field(default_factory=dict)
    #: rounds per interleaved block: short, so that framework and floor both see each state a
    #: shared VM drifts through (its vCPUs' placement flips a shm round trip between ~0.4 and
    #: ~1 us for seconds at a time; 50,000-round blocks caught one mode each)
    block: int = 5_000
    warmup: int = 16
    progress: bool = False
    host: str = "127.0.0.1"  # where the coprocessor and the floor responder listen (transports that need an endpoint)
    #: "HOST:PORT" of a coprocessor served on another host (key PEER_KEY) and, for a transport
    #: with its own floor, that floor's responder beside it: nothing is started here
    peer: str | None = None

    def validate(self) -> None:
        """Refuse a configuration the bench cannot run, with the option to change (before anything starts).

        Every bound comes from the ABI (``backline_core._native.lib``) or this machine:
        payloads fit the largest slot, decoder ids are below ``BL_MAX_DECODERS``, the
        LFSR seed and span fit its 32 bits, CPUs are ones this process may run on, and
        the timing arrays and payload tables fit in half the memory available now.
        """
        for option, value in (("--transport", self.transport), ("--coprocessor-fn", self.coprocessor_fn),
                              ("--driver", self.driver), ("--cadence", self.cadence)):
            if not isinstance(value, str) or not value:
                raise BacklineError(f"{option} {value!r}: must be a non-empty name")
        if self.controller_hardware not in HARDWARE:
            raise BacklineError(f"--controller-hardware {self.controller_hardware!r}: choose one of "
                                f"{', '.join(HARDWARE)}")
        if self.loop not in ("sw", "hw"):
            raise BacklineError(f"--loop {self.loop!r}: choose sw (a software kick per round) or hw (the "
                                "controller's hardware issues the rounds)")
        if self.loop == "hw" and self.controller_hardware == "cpu":
            raise BacklineError("--loop hw: rounds issued by the controller's hardware need a controller that has "
                                "it, e.g. --controller-hardware fpga")
        if not isinstance(self.host, str) or not self.host.strip():
            raise BacklineError(f"--host {self.host!r}: give an address of this machine, e.g. 127.0.0.1")
        if self.runs_in is not None and self.runs_in not in RUNS_IN:
            raise BacklineError(f"--runs-in {self.runs_in!r}: choose one of {', '.join(RUNS_IN)}")
        if self.peer is not None:
            self.peer_address()
            if self.runs_in not in (None, "process"):
                raise BacklineError(f"--runs-in {self.runs_in}: with --peer the coprocessor is a process on the "
                                    "peer's host; leave --runs-in out")
        rounds = _integer("--rounds", self.rounds)
        if rounds < 2:
            raise BacklineError(f"--rounds {rounds}: need at least 2 (round 0 plus one steady-state round)")
        if self.cadence not in ("b2b", "random-delayed"):
            raise BacklineError(f"--cadence {self.cadence!r}: choose b2b or random-delayed")
        payload = _integer("--payload-bytes", self.payload_bytes)
        if payload < 1:
            raise BacklineError(f"--payload-bytes {payload}: must be at least 1")
        if payload > MAX_PAYLOAD_BYTES:
            raise BacklineError(f"--payload-bytes {payload}: at most {MAX_PAYLOAD_BYTES} (the largest slot, "
                                f"BL_MAX_SLOT_BYTES {lib.BL_MAX_SLOT_BYTES}, minus the "
                                f"{lib.BL_FRAME_HEADER_BYTES}-byte frame header)")
        seed = _integer("--seed", self.seed)
        if seed == 0:
            raise BacklineError("--seed 0 would lock the LFSR at zero; use any other value")
        if not 0 < seed <= LFSR_MAX:
            raise BacklineError(f"--seed {seed}: the LFSR state is {LFSR_MAX.bit_length()} bits; use 1 to {LFSR_MAX}")
        gap = _integer("--gap-ns", self.gap_ns)
        if not 0 <= gap <= MAX_GAP_NS:
            raise BacklineError(f"--gap-ns {gap}: must be from 0 to {MAX_GAP_NS:_} (1 s)")
        span = _integer("--gap-span", self.gap_span)
        if not 0 <= span <= LFSR_MAX:
            raise BacklineError(f"--gap-span {span}: a mask of the LFSR's state, from 0 to {LFSR_MAX:#x}")
        decoder_id = _integer("--decoder-id", self.decoder_id)
        if not 0 <= decoder_id < lib.BL_MAX_DECODERS:
            raise BacklineError(f"--decoder-id {decoder_id}: must be from 0 to {lib.BL_MAX_DECODERS - 1} "
                                "(BL_MAX_DECODERS)")
        block, warmup = _integer("--block", self.block), _integer("--warmup", self.warmup)
        if block < 1 or warmup < 0:
            raise BacklineError("--block must be >= 1 and --warmup >= 0")
        if not isinstance(self.error_rate, numbers.Real) or not (math.isfinite(self.error_rate)
                                                                 and 0 < self.error_rate < 1):
            raise BacklineError(f"--error-rate {self.error_rate}: must be a probability strictly between 0 and 1")
        for name in ("decoder_params", "transport_args"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise BacklineError(f"{name} must be a dict of str to str, not {value!r}")
        allowed = os.sched_getaffinity(0)
        for name, cpu in (("--controller-cpu", self.controller_cpu), ("--coprocessor-cpu", self.coprocessor_cpu)):
            if cpu is None or (self.peer is not None and name == "--coprocessor-cpu"):  # the peer pins its own
                continue
            cpu = _integer(name, cpu)
            if cpu not in allowed:
                raise BacklineError(f"{name} {cpu}: not a CPU this process may run on (it may use CPUs "
                                    f"{_cpu_ranges(allowed)}); or give none")
        if self.code is not None:
            hx, hz = load_code(self.code)
            if decoder_id not in (0, 1):
                raise BacklineError(f"--decoder-id {decoder_id}: with --code, 0 decodes Hx syndromes and 1 "
                                    "Hz syndromes")
            payload = _syndrome_bytes(hx if decoder_id == 0 else hz)
            if payload > MAX_PAYLOAD_BYTES:
                raise BacklineError(f"--code {self.code}: a syndrome of {payload} bytes does not fit the largest "
                                    f"slot's {MAX_PAYLOAD_BYTES}-byte payload")
        if self.code is None and self.coprocessor_fn == "steane" and payload != 1:
            raise BacklineError("--coprocessor-fn steane takes a 1-byte syndrome: use --payload-bytes 1")
        if self.driver not in ("native", "python"):
            plugins.get("driver", self.driver)  # an unknown name lists the installed drivers
        self._check_memory(rounds, payload)
        _check_floor(payload)

    def peer_address(self) -> tuple[str, int]:
        """``--peer`` as (host, port); a clear error when it is not HOST:PORT."""
        text = self.peer if isinstance(self.peer, str) else ""
        host, sep, port = text.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BacklineError(f"--peer {self.peer!r}: give HOST:PORT of a bench peer (`backline TRANSPORT "
                                "bench-peer` on that host prints it), e.g. 10.0.0.2:18515")
        return host, int(port)

    def memory_needed(self, payload_bytes: int | None = None) -> tuple[int, int]:
        """Bytes this run allocates: (timing arrays, payload tables and rings)."""
        payload = self.payload_bytes if payload_bytes is None else payload_bytes
        arrays = 2 if self.driver == "native" else 3  # framework + floor (+ native with another driver)
        timing = 8 * (arrays * (self.rounds - 1) + max(self.warmup, 1) + 1)
        ring = ring_geometry(payload, payload)
        buffers = 2 * ring["slots"] * ring["slot_bytes"]  # request and reply rings
        if self.code is not None or self.coprocessor_fn != "echo" or self.driver not in ("native", "python"):
            buffers += 3 * PAYLOAD_TABLE * payload  # requests and replies, native and Python copies
        elif self.driver == "python":
            buffers += min(self.block, self.rounds) * payload  # one block's payloads at a time
        return timing, buffers

    def _check_memory(self, rounds: int, payload: int) -> None:
        available = available_memory()
        if available is None:
            return
        budget = available // 2
        timing, buffers = self.memory_needed(payload)
        if timing + buffers <= budget:
            return
        per_round = timing // max(rounds - 1, 1)
        if timing > budget:
            fit = max(2, (budget - buffers) // max(per_round, 1))
            raise BacklineError(
                f"--rounds {rounds:,}: its round-trip times need {_bytes(timing)} ({per_round} B a round) but "
                f"{_bytes(available)} of memory is available and a run may use half; use at most {fit:,} rounds")
        raise BacklineError(
            f"--payload-bytes {payload}: its payload tables and rings need {_bytes(buffers)} but {_bytes(available)} "
            "of memory is available and a run may use half; use a smaller payload")


#: the largest payload a frame carries: the largest slot less the frame header (ABI constants)
MAX_PAYLOAD_BYTES = lib.BL_MAX_SLOT_BYTES - lib.BL_FRAME_HEADER_BYTES
#: the bench's LFSR state (bl_bench_config.lfsr, 32 bits): seeds and span masks fit in it
LFSR_MAX = (1 << (8 * ffi.sizeof(dict(ffi.typeof("bl_bench_config").fields)["lfsr"].type))) - 1
#: the longest base gap between random-delayed rounds (1 s)
MAX_GAP_NS = 1_000_000_000


def _check_floor(payload_bytes: int) -> None:
    """The floor runs every payload the framework does (its limit: BL_BENCH_MAX_PAYLOAD_BYTES)."""
    if payload_bytes > lib.BL_BENCH_MAX_PAYLOAD_BYTES:
        raise BacklineError(f"--payload-bytes {payload_bytes}: larger than the {lib.BL_BENCH_MAX_PAYLOAD_BYTES} bytes "
                            "the floor ping-pong (bl_bench_floor) carries, which every run measures against")


def _integer(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BacklineError(f"{option} {value!r}: must be an integer")
    return int(value)


def _cpu_ranges(cpus: set[int]) -> str:
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(run)
            run = []
        run.append(c)
    if run:
        out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def ring_geometry(in_bytes: int, out_bytes: int) -> dict[str, int]:
    """Slots for messages of these sizes: the default ring when its slots fit them; else
    slots just large enough (header included, aligned), fewer of them so that one ring
    stays within the default ring's bytes where it can (one round is in flight at a time)."""
    default = {"slots": lib.BL_DEFAULT_SLOTS, "slot_bytes": lib.BL_DEFAULT_SLOT_BYTES}
    need = lib.BL_FRAME_HEADER_BYTES + max(in_bytes, out_bytes, 1)
    if need <= lib.BL_DEFAULT_SLOT_BYTES:
        return default
    slot_bytes = -(-need // lib.BL_SLOT_ALIGN) * lib.BL_SLOT_ALIGN
    fit = max(1, (lib.BL_DEFAULT_SLOTS * lib.BL_DEFAULT_SLOT_BYTES) // slot_bytes)
    return {"slots": 1 << (fit.bit_length() - 1), "slot_bytes": slot_bytes}


def _syndrome_bytes(h: np.ndarray) -> int:
    return -(-h.shape[0] // 8)


def load_code(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(Hx, Hz) of the ``.npz`` archive at ``path``, checked: 2-D, non-empty, only 0 and 1, as many columns.

    Nothing is cast before it is checked: a NaN, a 2 or a 0.5 in a matrix is refused,
    naming the entry, instead of becoming some other code.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise BacklineError(f"--code {path!r}: must be the path of a .npz file")
    if not os.path.exists(path):
        raise BacklineError(f"--code {path}: no such file")
    if os.path.isdir(path):
        raise BacklineError(f"--code {path}: is a directory, not a .npz file")
    how = "save one with numpy.savez(path, Hx=..., Hz=...)"
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise BacklineError(f"--code {path}: cannot be read ({exc.strerror or exc})") from None
    if magic == b"\x93NUMPY":
        raise BacklineError(f"--code {path}: holds a single .npy array, not an .npz archive of Hx and Hz; {how}")
    if not magic.startswith(b"PK"):
        raise BacklineError(f"--code {path}: is not an .npz archive (a zip of .npy arrays); {how}")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise BacklineError(f"--code {path}: not a .npz archive of Hx and Hz ({_first_line(exc)}); {how}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise BacklineError(f"--code {path}: holds a single array, not an .npz archive of Hx and Hz; {how}")
    with data:
        missing = [name for name in ("Hx", "Hz") if name not in data.files]
        if missing:
            held = ", ".join(data.files) or "no arrays"
            raise BacklineError(f"--code {path}: has no {' or '.join(missing)} (it holds {held}); {how}")
        matrices = []
        for name in ("Hx", "Hz"):
            try:
                raw = data[name]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise BacklineError(f"--code {path}: {name} cannot be read as a numeric matrix "
                                    f"({_first_line(exc)}; a ragged list of rows is stored as objects)") from None
            matrices.append(_binary_matrix(path, name, raw))
    hx, hz = matrices
    if hx.shape[1] != hz.shape[1]:
        raise BacklineError(f"--code {path}: Hx has {hx.shape[1]} columns and Hz {hz.shape[1]}; both have one "
                            "column per qubit")
    return hx, hz


def _binary_matrix(path: str, name: str, raw: np.ndarray) -> np.ndarray:
    if raw.dtype.kind not in "biuf":
        raise BacklineError(f"--code {path}: {name} holds {raw.dtype} values; a parity-check matrix holds 0 and 1")
    if raw.ndim != 2 or 0 in raw.shape:
        raise BacklineError(f"--code {path}: {name} must be a non-empty 2-D parity-check matrix, got shape "
                            f"{raw.shape}")
    bad = np.argwhere(~((raw == 0) | (raw == 1)))  # NaN equals neither
    if bad.size:
        r, c = (int(i) for i in bad[0])
        value = raw[r, c].item()
        more = f" (and {len(bad) - 1} more such entries)" if len(bad) > 1 else ""
        raise BacklineError(f"--code {path}: {name}[{r}, {c}] is {value!r}{more}; a parity-check matrix holds "
                            "only 0 and 1")
    return np.ascontiguousarray(raw, dtype=np.uint8)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Series:
    """Round-trip times of one path, in nanoseconds."""

    name: str
    rtt_ns: np.ndarray

    def stats(self) -> dict[str, float]:
        x = self.rtt_ns
        out = {"rounds": int(x.size), "mean_ns": float(x.mean()), "median_ns": float(np.median(x)),
               "max_ns": float(x.max())}
        for key, q in PERCENTILES:
            out[f"{key}_ns"] = float(np.percentile(x, q))
        return out


@dataclass
class BenchResult:
    config: BenchConfig
    round0_ns: int
    framework: Series
    floor: Series
    native: Series | None = None  # with driver="python": the native driver in the same run
    lost: int = 0
    mismatched: int = 0
    timer_resolution_ns: float = 0.0
    #: another tool's round trips in the same run (the rdma floor's perftest figures: name, command,
    #: rounds, median_ns, p99_ns, p999_ns and perhaps mean_ns, min_ns, max_ns), or None
    reference: dict[str, Any] | None = None
    reference_note: str | None = None  # what the reference ran, or why there is none

    def to_json(self) -> dict[str, Any]:
        steady, floor = self.framework.stats(), self.floor.stats()
        out: dict[str, Any] = {
            "config": self.config.__dict__,
            "rounds": self.config.rounds,
            "round0_ns": self.round0_ns,
            "steady": steady,
            "floor": floor,
            "ratio": {"median": steady["median_ns"] / floor["median_ns"], "p99": steady["p99_ns"] / floor["p99_ns"],
                      "mean": steady["mean_ns"] / floor["mean_ns"]},
            "timer_resolution_ns": self.timer_resolution_ns,
            "lost": self.lost,
            "mismatched": self.mismatched,
        }
        if self.floor.name != SHM_FLOOR_LABEL:  # a transport's own floor
            out["floor_name"] = self.floor.name
        if self.reference is not None:
            out["reference"] = dict(self.reference)
            out["floor_to_reference"] = {key: floor[f"{key}_ns"] / self.reference[f"{key}_ns"]
                                         for key in ("median", "p99") if self.reference.get(f"{key}_ns")}
        if self.reference_note:
            out["reference_note"] = self.reference_note
        if self.native is not None:
            native = self.native.stats()
            out["native"] = native
            out["driver_adds_median_ns"] = steady["median_ns"] - native["median_ns"]
            out["driver_to_native_median"] = steady["median_ns"] / native["median_ns"]
        return out


def _expected_steane() -> tuple[bytes, bytes]:
    """All 8 syndromes and their corrections, computed from the Steane Hx (not the table)."""
    hx = np.array([[1, 1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 1, 0], [0, 0, 1, 1, 0, 1, 1]], dtype=np.uint8)
    syndromes, corrections = bytearray(), bytearray()
    for s in range(8):
        bits = np.array([(s >> i) & 1 for i in range(3)], dtype=np.uint8)
        mask = 0
        if bits.any():
            q = next(q for q in range(7) if np.array_equal(hx[:, q], bits))
            mask = 1 << q
        syndromes.append(int(np.packbits(bits, bitorder="little")[0]))
        corrections.append(mask)
    return bytes(syndromes), bytes(corrections)


class RoundRunner:
    """Issues a run's rounds (the native driver, the Python loop, a driver plugin, the shm floor) and
    counts lost and mismatched replies; holds the native buffers and the bench configuration struct."""

    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.c = ffi.new("bl_bench_config *")
        self.c.payload_bytes = cfg.payload_bytes
        self.c.cadence = 0 if cfg.cadence == "b2b" else 1
        self.c.lfsr = cfg.seed
        self.c.gap_base_ns = cfg.gap_ns
        self.c.gap_span_mask = cfg.gap_span
        self.res = ffi.new("bl_bench_result *")
        self.lost = self.mismatched = 0
        self.tables: list[Any] = []
        self.payloads: list[bytes] = []
        self.expected: list[bytes] = []
        self.c.decoder_id = cfg.decoder_id

    def set_table(self, payloads: bytes, expected: bytes, expected_bytes: int) -> None:
        p, e = ffi.new("uint8_t[]", payloads), ffi.new("uint8_t[]", expected)
        self.tables = [p, e]
        self.c.payloads, self.c.expected = p, e
        self.c.n_payloads = len(payloads) // self.cfg.payload_bytes
        self.c.expected_bytes = expected_bytes
        n = self.c.n_payloads
        self.payloads = [payloads[i * self.cfg.payload_bytes:(i + 1) * self.cfg.payload_bytes] for i in range(n)]
        self.expected = [expected[i * expected_bytes:(i + 1) * expected_bytes] for i in range(n)]

    def framework(self, session: Any, first: int, out: np.ndarray) -> None:
        self.c.first_round, self.c.rounds = first, out.size
        lib.bl_bench_rounds(session._s, self.c, ffi.from_buffer("uint64_t[]", out), self.res)
        self._account(out.size)

    def floor(self, first: int, out: np.ndarray) -> None:
        self.c.first_round, self.c.rounds = first, out.size
        cpu = -1 if self.cfg.coprocessor_cpu is None else self.cfg.coprocessor_cpu
        rc = lib.bl_bench_floor(self.c, cpu, ffi.from_buffer("uint64_t[]", out), self.res)
        if rc < 0 and not self.res.lost:  # refused outright (a payload it cannot carry, no memory, no thread)
            raise from_status(rc, f"the floor ping-pong (bl_bench_floor) could not run {self.cfg.payload_bytes}-byte "
                                  "payloads")
        if self.res.lost:
            raise BacklineError("the floor ping-pong timed out: is the responder CPU available?")

    def _account(self, n: int) -> None:
        self.lost += self.res.lost
        self.mismatched += self.res.mismatched
        if self.res.first_error:
            err = from_status(self.res.first_error, last_error())
            if self.res.lost == n:
                raise err

    def python(self, session: Any, first: int, out: np.ndarray) -> None:
        """The same rounds from a Python loop through the session API."""
        cfg = self.cfg
        gaps = self._gaps(out.size) if cfg.cadence == "random-delayed" else None
        reply = bytearray(max(cfg.payload_bytes, 1))
        payloads = self.payloads or [_index_payload(first + k, cfg.payload_bytes) for k in range(out.size)]
        n_pay = len(payloads)
        buf = bytearray(cfg.payload_bytes)  # refilled each round, as a syndrome buffer would be
        round_into, clock = session.round_into, time.perf_counter_ns
        times = [0] * out.size
        for k in range(out.size):
            i = first + k
            payload = payloads[i % n_pay] if self.payloads else payloads[k]
            buf[:] = payload
            if gaps is not None:
                until = clock() + gaps[k]
                while clock() < until:
                    pass
            t0 = clock()
            n = round_into(buf, reply, cfg.decoder_id)
            times[k] = clock() - t0
            want = self.expected[i % n_pay] if self.expected else payload
            if reply[:n] != want:
                self.mismatched += 1
        out[:] = times

    def use_plugin_driver(self, key: str, table: tuple[bytes, bytes, int] | None) -> None:
        """Rounds from a driver plugin (e.g. compiled code); replies are checked here."""
        cfg = self.cfg
        if cfg.cadence != "b2b":
            raise BacklineError(f"--driver {cfg.driver} issues back-to-back rounds only; use --cadence b2b")
        if table is None:  # echo: a table of index payloads, each echoed
            payloads = b"".join(_index_payload(i, cfg.payload_bytes) for i in range(PAYLOAD_TABLE))
            table = (payloads, payloads, cfg.payload_bytes)
        self._plugin_table = table
        make = plugins.get("driver", cfg.driver).load()
        self._plugin_run = make(key, cfg.decoder_id, table)

    def plugin(self, first: int, out: np.ndarray) -> None:
        payloads, expected, reply_bytes = self._plugin_table
        replies = np.zeros((out.size, reply_bytes), dtype=np.uint8)
        status = self._plugin_run(first, out, replies)
        if status:
            raise from_status(status, last_error())
        n = len(expected) // reply_bytes
        want = np.frombuffer(expected, dtype=np.uint8).reshape(n, reply_bytes)
        rows = (first + np.arange(out.size)) % n
        self.mismatched += int((replies != want[rows]).any(axis=1).sum())

    def _gaps(self, n: int) -> list[int]:
        gaps = []
        for _ in range(n):
            self.c.lfsr = lib.bl_lfsr_next(self.c.lfsr)
            gaps.append(self.cfg.gap_ns + (self.c.lfsr & self.cfg.gap_span))
        return gaps


def _index_payload(i: int, n: int) -> bytes:
    """The payload bl_bench_rounds sends for round i (see bench.c payload_for)."""
    return bytes(((i >> (8 * (b % 8))) & 0xFF) ^ (b // 8) & 0xFF for b in range(n))


PAYLOAD_TABLE = 1024  # distinct requests cycled through when replies must be precomputed


def _payloads(cfg: BenchConfig, function: CoprocessorFunction,
              code: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[bytes, bytes, int] | None:
    """Requests and the replies the function must give them; None for echo (index payloads).

    Steane's replies come from its Hx, not from the table under test; any other function's
    come from calling it locally (BoundFunction), so the run checks what the transport
    delivered, not the decoder itself."""
    rng = np.random.default_rng(cfg.seed)
    if code is not None:
        h = code[0] if cfg.decoder_id == 0 else code[1]
        errors = (rng.random((PAYLOAD_TABLE, h.shape[1])) < cfg.error_rate).astype(np.uint8)
        syndromes = (errors @ h.T) % 2
        requests = [np.packbits(row, bitorder="little").tobytes() for row in syndromes.astype(np.uint8)]
    elif cfg.coprocessor_fn == "echo":
        return None
    elif cfg.coprocessor_fn == "steane":
        return (*_expected_steane(), 1)
    else:
        requests = [rng.integers(0, 256, cfg.payload_bytes, dtype=np.uint8).tobytes() for _ in range(PAYLOAD_TABLE)]
    with BoundFunction(function) as local:
        replies = [local(cfg.decoder_id, r) for r in requests]
    sizes = {len(r) for r in replies}
    if len(sizes) != 1:
        raise BacklineError(f"{function.name} gives replies of several sizes {sorted(sizes)}; the bench needs one size")
    return b"".join(requests), b"".join(replies), sizes.pop()


def run(cfg: BenchConfig, report: Callable[[str], None] = lambda s: None) -> BenchResult:
    """Run the benchmark described by ``cfg``."""
    cfg.validate()
    decoder = plugins.get("decoder", cfg.coprocessor_fn)
    params: dict[str, Any] = dict(cfg.decoder_params)
    code = load_code(cfg.code) if cfg.code is not None else None
    if code is not None:
        params.update(hx=code[0], hz=code[1])
    try:
        inspect.signature(decoder.build).bind(**params)
    except TypeError as exc:
        given = ", ".join(sorted(params)) or "none"
        raise BacklineError(f"decoder {cfg.coprocessor_fn!r} does not take these parameters ({given}): {exc}"
                            + ("; --code needs a decoder built from Hx and Hz, such as bposd" if cfg.code else "")) from None
    function = decoder.build(**params)
    if cfg.decoder_id not in function.decoder_ids:
        raise BacklineError(f"--decoder-id {cfg.decoder_id}: {cfg.coprocessor_fn} serves decoder ids "
                            f"{', '.join(map(str, function.decoder_ids))}")
    table = _payloads(cfg, function, code)
    if table is not None and cfg.code is not None:
        cfg.payload_bytes = len(table[0]) // PAYLOAD_TABLE
    out_bytes = table[2] if table is not None else cfg.payload_bytes
    idle_spin_us = 200 if cfg.cadence == "b2b" else max(200, 4 * (cfg.gap_ns + cfg.gap_span) // 1000)
    init_args: dict[str, Any] = {"idle_spin_us": idle_spin_us}
    ring = ring_geometry(cfg.payload_bytes, out_bytes)
    if ring["slot_bytes"] != lib.BL_DEFAULT_SLOT_BYTES:  # messages past the default slot: slots that fit them
        init_args.update(ring)
    part = plugins.transport_backend(cfg.transport, "cpu", "coprocessor")
    unknown = sorted(set(cfg.transport_args) - set(part.init_args))
    if unknown:
        keys = ", ".join(sorted(part.init_args)) or "none"
        raise BacklineError(f"--transport-arg {unknown[0]}: not a key of transport {cfg.transport!r} (its keys: "
                            f"{keys})")
    init_args.update(cfg.transport_args)
    if cfg.controller_hardware != "cpu":
        ctl = plugins.transport_backend(cfg.transport, cfg.controller_hardware, "controller")
        if ctl.controller_bench is None:
            raise BacklineError(f"--controller-hardware {cfg.controller_hardware}: {ctl.distribution or 'its plugin'} "
                                f"has no bench of its own for a {cfg.controller_hardware} controller of transport "
                                f"{cfg.transport!r}")
        if cfg.peer is not None:
            raise BacklineError(f"--peer: a {cfg.controller_hardware} controller's bench starts its coprocessor here; "
                                "leave --peer out")
        return ctl.controller_bench(cfg, function=function, table=table, out_bytes=out_bytes,
                                    init_args=init_args, report=report)
    if cfg.peer is not None:
        return _run_with_peer(cfg, part, function, init_args, table, out_bytes, report)
    runs_in = cfg.runs_in or part.runs_in[0]
    # Only keys the transport declares: pinning is a transport's own setting, not the core's.
    if cfg.coprocessor_cpu is not None and "cpu" in part.init_args and runs_in != "controller-thread":
        init_args["cpu"] = cfg.coprocessor_cpu
    endpoint = Endpoint(host=cfg.host, port=free_port(cfg.host)) if part.needs_endpoint else None
    with contextlib.ExitStack() as stack:
        executor = stack.enter_context(_local_executor()) if runs_in == "executor" else None
        name = f"bench-{os.getpid()}"
        placement = Placement(
            controller=Controller(name="bench-controller", init_args=dict(cfg.transport_args)),
            coprocessors=[Coprocessor(name=name, coprocessor_fn=function, runs_in=runs_in, executor=executor,
                                      init_args=init_args, endpoint=endpoint)],
            transport=cfg.transport,
        )
        cfg.runs_in = resolve(placement).coprocessor(name).runs_in
        floor = None
        if part.bench_floor is not None:
            # Started before this thread is pinned (its responder must not inherit the controller's
            # CPU) and paused until its first block; the ExitStack stops it on every path.
            floor = stack.enter_context(part.bench_floor(cfg, dict(init_args)))
            floor.pause()
        old_affinity = os.sched_getaffinity(0)
        if cfg.controller_cpu is not None:
            os.sched_setaffinity(0, {cfg.controller_cpu})  # this thread only: it issues every round
        try:
            with deploy(placement, in_bytes=cfg.payload_bytes, out_bytes=out_bytes) as d:
                # A coprocessor that spins when idle would hold the floor's CPU: stopped during floor blocks.
                spinner = _StoppedProcess(d.processes[name].pid) if part.idle == "spins" and name in d.processes \
                    else None
                try:
                    return _measure(cfg, d.session(), report, table, floor=floor, spinner=spinner)
                finally:
                    if spinner is not None:
                        spinner.resume()  # a stopped process takes no SIGTERM: it must run to stop cleanly
        finally:
            os.sched_setaffinity(0, old_affinity)
    raise AssertionError("unreachable")  # the with block returns or raises


def _run_with_peer(cfg: BenchConfig, part: Any, function: CoprocessorFunction, init_args: dict[str, Any],
                   table: tuple[bytes, bytes, int] | None, out_bytes: int,
                   report: Callable[[str], None]) -> BenchResult:
    """The bench against a peer on another host: its coprocessor (key PEER_KEY) and its floor
    responder run there, each on a CPU of its own, so nothing is paused between blocks."""
    if not part.needs_endpoint or "process" not in part.runs_in:
        raise BacklineError(f"--peer: transport {cfg.transport!r} does not join processes on two hosts; --peer needs "
                            "one whose nodes have an Endpoint, such as rdma")
    host, port = cfg.peer_address()
    placement = Placement(
        controller=Controller(name="bench-controller", init_args=dict(cfg.transport_args)),
        coprocessors=[Coprocessor(name=PEER_KEY, coprocessor_fn=function, runs_in="process", init_args=init_args,
                                  endpoint=Endpoint(host=host, port=port))],
        transport=cfg.transport,
    )
    cfg.runs_in = "process"
    with contextlib.ExitStack() as stack:
        floor = stack.enter_context(part.bench_floor(cfg, dict(init_args))) if part.bench_floor is not None else None
        old_affinity = os.sched_getaffinity(0)
        if cfg.controller_cpu is not None:
            os.sched_setaffinity(0, {cfg.controller_cpu})
        try:
            session = connect_controller(placement, PEER_KEY, in_bytes=cfg.payload_bytes, out_bytes=out_bytes)
            stack.callback(session.destroy)
            return _measure(cfg, session, report, table, floor=floor)
        finally:
            os.sched_setaffinity(0, old_affinity)
    raise AssertionError("unreachable")  # the with block returns or raises


class _StoppedProcess:
    """A coprocessor process that spins when idle: paused (SIGSTOP) while the floor runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.paused = pid, False

    def pause(self) -> None:
        pause(self.pid)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            resume(self.pid)
            self.paused = False


def _local_executor() -> Any:
    """An executor on this machine from the installed executor plugin (``--runs-in executor``)."""
    names = plugins.names("executor")
    if not names:
        raise BacklineError("--runs-in executor needs an executor plugin: pip install backline-executor-orc")
    return plugins.get("executor", names[0]).load().local_executor()


def _measure(cfg: BenchConfig, session: Any, report: Callable[[str], None],
             table: tuple[bytes, bytes, int] | None, floor: Any = None,
             spinner: _StoppedProcess | None = None) -> BenchResult:
    """Round 0, then interleaved blocks of framework and floor rounds.

    ``floor`` is a transport's own floor (Transport.bench_floor's value; paused on entry), else
    the shared-memory one runs. ``spinner``, a coprocessor that spins when idle, is stopped
    during the floor's blocks and continued before the framework's (their warm-up rounds
    absorb its wake-up); the floor's responder is paused during the framework's. The caller
    continues the spinner afterwards, whatever happened."""
    runner = RoundRunner(cfg)
    run_floor = floor.run if floor is not None else runner.floor
    if table is not None:
        runner.set_table(*table)
    if cfg.driver not in ("native", "python"):
        runner.use_plugin_driver(session.key, table)
    steady = cfg.rounds - 1
    r0 = np.zeros(1, dtype=np.uint64)
    runner.framework(session, 0, r0)
    framework = np.zeros(steady, dtype=np.uint64)
    floor_ns = np.zeros(steady, dtype=np.uint64)
    native = np.zeros(steady, dtype=np.uint64) if cfg.driver != "native" else None
    warm = np.zeros(max(cfg.warmup, 1), dtype=np.uint64)
    done, first = 0, 1
    t_start = time.monotonic()
    while done < steady:
        n = min(cfg.block, steady - done)
        sl = slice(done, done + n)
        # Each block starts with unrecorded warm-up rounds, the same for every path:
        # the idle coprocessor sleeps (or is stopped) between blocks so the floor has its CPU to itself.
        if spinner is not None:
            spinner.resume()
        if cfg.warmup:
            runner.framework(session, first, warm[:cfg.warmup])
        if cfg.driver == "python":
            runner.python(session, first, framework[sl])
            runner.framework(session, first, native[sl])
        elif cfg.driver != "native":
            runner.plugin(first, framework[sl])
            runner.framework(session, first, native[sl])
        else:
            runner.framework(session, first, framework[sl])
        if spinner is not None:
            spinner.pause()
        else:
            time.sleep(0.002)  # let the poller go idle before the floor borrows its CPU
        if floor is not None:
            floor.resume()
        if cfg.warmup:
            run_floor(first, warm[:cfg.warmup])
        run_floor(first, floor_ns[sl])
        if floor is not None:
            floor.pause()
        done += n
        first += n
        if cfg.progress:
            frac = done / steady
            bar = "#" * int(30 * frac)
            eta = (time.monotonic() - t_start) * (1 - frac) / frac
            report(f"\r[{bar:<30}] {100 * frac:5.1f}%  {done + 1:,}/{cfg.rounds:,} rounds  eta {eta:4.0f} s")
    if cfg.progress:
        report("\n")
    # Another tool's figures for the same path, with the coprocessor and the responder still stopped.
    reference = floor.reference() if floor is not None and hasattr(floor, "reference") else None
    return BenchResult(
        config=cfg,
        round0_ns=int(r0[0]),
        framework=Series(f"{cfg.transport}/{cfg.runs_in} ({cfg.driver} driver)", framework),
        floor=Series(getattr(floor, "label", SHM_FLOOR_LABEL) if floor is not None else SHM_FLOOR_LABEL, floor_ns),
        native=Series(f"{cfg.transport}/{cfg.runs_in} (native driver)", native) if native is not None else None,
        lost=runner.lost,
        mismatched=runner.mismatched,
        timer_resolution_ns=float(lib.bl_bench_timer_resolution_ns()),
        reference=reference,
        reference_note=getattr(floor, "reference_note", None) if floor is not None else None,
    )


def format_report(result: BenchResult) -> str:
    """The human-readable report `backline bench` prints."""
    cfg = result.config
    rows = [result.framework] + ([result.native] if result.native is not None else []) + [result.floor]
    lines = [
        f"backline bench: transport={cfg.transport} runs_in={cfg.runs_in} fn={cfg.coprocessor_fn} "
        + (f"code={os.path.basename(cfg.code)} p={cfg.error_rate} decoder_id={cfg.decoder_id} " if cfg.code else "")
        + "".join(f"{k}={v} " for k, v in sorted(cfg.transport_args.items()))
        + f"driver={cfg.driver} cadence={cfg.cadence} payload={cfg.payload_bytes} B rounds={cfg.rounds:,} "
        + (f"cpus={cfg.controller_cpu}->peer {cfg.peer}" if cfg.peer else
           f"cpus={cfg.controller_cpu}->{cfg.coprocessor_cpu}"),
        f"round 0: {result.round0_ns / 1000:.3f} us (set-up effects; excluded below)",
        f"steady state ({cfg.rounds - 1:,} rounds, us):",
        f"  {'path':<44}{'mean':>10}{'median':>10}{'P99':>10}{'P99.9':>10}{'P99.99':>10}{'P99.999':>10}{'max':>11}",
    ]
    for series in rows:
        s = series.stats()
        lines.append(
            f"  {series.name:<44}{s['mean_ns'] / 1e3:10.3f}{s['median_ns'] / 1e3:10.3f}{s['p99_ns'] / 1e3:10.3f}"
            f"{s['p999_ns'] / 1e3:10.3f}{s['p9999_ns'] / 1e3:10.3f}{s['p99999_ns'] / 1e3:10.3f}{s['max_ns'] / 1e3:11.3f}"
        )
    ref = result.reference
    if ref is not None:  # only what the tool reports; the rest is "-"
        cells = [f"{ref[k] / 1e3:{w}.3f}" if isinstance(ref.get(k), (int, float)) else f"{'-':>{w}}"
                 for k, w in (("mean_ns", 10), ("median_ns", 10), ("p99_ns", 10), ("p999_ns", 10), ("p9999_ns", 10),
                              ("p99999_ns", 10), ("max_ns", 11))]
        lines.append(f"  {str(ref.get('name', 'reference')):<44}{''.join(cells)}")
    data = result.to_json()
    lines.append(f"framework/floor: median {data['ratio']['median']:.3f}x, P99 {data['ratio']['p99']:.3f}x, "
                 f"mean {data['ratio']['mean']:.3f}x (timer resolution {result.timer_resolution_ns:.1f} ns)")
    if data.get("floor_to_reference"):
        ratios = ", ".join(f"{'P99' if k == 'p99' else k} {v:.3f}x" for k, v in data["floor_to_reference"].items())
        lines.append(f"floor/perftest: {ratios}")
    if result.reference_note:
        lines.append(result.reference_note)
    if "driver_adds_median_ns" in data:
        lines.append(f"{cfg.driver} driver adds {data['driver_adds_median_ns'] / 1e3:+.3f} us to the median over the "
                     f"native driver ({data['driver_to_native_median']:.3f}x)")
    lines.append(f"lost: {result.lost}  mismatched replies: {result.mismatched}  (every reply checked)")
    return "\n".join(lines)


def write_json(result: BenchResult, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(result.to_json(), fh, indent=2)


def plot(result: BenchResult, path: str) -> None:
    """Time series and CCDF of framework and floor (as the paper's Fig. 6 and Fig. 10)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BacklineError("--plot needs matplotlib: pip install 'backline-core[plot]'") from exc
    rows = [result.framework] + ([result.native] if result.native is not None else []) + [result.floor]
    fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(12, 4.5))
    for series in rows:
        us = series.rtt_ns / 1e3
        ax_t.plot(np.arange(1, us.size + 1), us, ",", alpha=0.5, label=series.name)
        xs = np.sort(us)
        ccdf = 1.0 - np.arange(xs.size) / xs.size
        ax_c.step(xs, ccdf, where="post", label=series.name)
    ax_t.set(xlabel="round", ylabel="round trip (us)", title="steady-state round trips", yscale="log")
    ax_c.set(xlabel="round trip (us)", ylabel="P(RTT > x)", title="CCDF", xscale="log", yscale="log")
    for ax in (ax_t, ax_c):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Refuse, before a run starts, a --json or --plot file that could not be written
    afterwards (and --plot without matplotlib), so a long run is not lost at its end."""
    for option, path in (("--json", json_path), ("--plot", plot_path)):
        if path:
            _check_writable(option, path)
    if plot_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise BacklineError(f"--plot needs matplotlib ({_first_line(exc)}): "
                                "pip install 'backline-core[plot]'") from None


def _check_writable(option: str, path: str) -> None:
    """Open ``path`` for appending (never truncating it); remove it again if this made it."""
    if os.path.isdir(path):
        raise BacklineError(f"{option} {path}: is a directory; give a file name")
    existed = os.path.lexists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        parent = os.path.dirname(os.path.abspath(path))
        if isinstance(exc, FileNotFoundError):
            reason = f"its directory {parent} does not exist"
        elif isinstance(exc, NotADirectoryError):
            reason = f"{parent} is not a directory" if os.path.exists(parent) else f"a part of {parent} is a file"
        raise BacklineError(f"{option} {path}: cannot be written ({reason})") from None
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass


def main_report(result: Any, json_path: str | None, plot_path: str | None) -> str:
    if not isinstance(result, BenchResult):  # a controller's own bench (Transport.controller_bench)
        if json_path:
            with open(json_path, "w") as fh:
                json.dump(result.to_json(), fh, indent=2)
        return str(result.text())
    text = format_report(result)
    if json_path:
        write_json(result, json_path)
    if plot_path:
        plot(result, plot_path)
    return text


def stderr_report(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
