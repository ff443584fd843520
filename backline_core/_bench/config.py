"""What a bench run is: :class:`BenchConfig`, the one source of its defaults, its checks, and
the ``backline bench`` options derived from its fields."""

from __future__ import annotations

import argparse
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from .._abi import ffi, lib
from .._cli import _integer_any_base, _whole_number, cpu_or_none
from .._errors import BacklineError
from .._hookspecs import HARDWARE, RUNS_IN

#: the session key of the coprocessor a bench peer serves (`--peer`)
PEER_KEY = "bench"
#: the largest payload a frame carries: the largest slot less the frame header (ABI constants)
MAX_PAYLOAD_BYTES = lib.BL_MAX_SLOT_BYTES - lib.BL_FRAME_HEADER_BYTES
#: the bench's LFSR state (bl_bench_config.lfsr, 32 bits): seeds and span masks fit in it
LFSR_MAX = (1 << (8 * ffi.sizeof(dict(ffi.typeof("bl_bench_config").fields)["lfsr"].type))) - 1
#: the longest base gap between random-delayed rounds (1 s)
MAX_GAP_NS = 1_000_000_000
#: distinct requests cycled through when replies must be precomputed
PAYLOAD_TABLE = 1024


def _option(default: Any = MISSING, help: str = "", *, factory: Callable[[], Any] | None = None,
            type: Callable[[str], Any] | None = None, choices: tuple[str, ...] | None = None,
            metavar: str | None = None, option: str | None = None) -> Any:
    """A field of BenchConfig and its command-line option (``--name-with-dashes`` unless ``option``)."""
    metadata = {"help": help, "type": type, "choices": choices, "metavar": metavar, "option": option}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class BenchConfig:
    """What `backline bench` runs: each field is one of its options (`backline bench --help`)."""

    transport: str = _option("memcpy", "the transport plugin")
    controller_hardware: str = _option(
        "cpu", "the controller's hardware; a controller part with its own bench (Transport.controller_bench, "
        "e.g. fpga: the engine's, backline-transport-fpga) runs the bench when it is not cpu", choices=HARDWARE)
    loop: str = _option("sw", "with such a controller: a software kick per round (sw) or its hardware issues the "
                        "rounds (hw)", choices=("sw", "hw"))
    runs_in: str | None = _option(None, "where the coprocessor runs (default: the transport's first choice); "
                                  "executor: in a local executor (needs backline-executor-orc)", choices=RUNS_IN)
    coprocessor_fn: str = _option("echo", "decoder plugin name; every reply is checked")
    rounds: int = _option(1_000_000, "at least 2; at most what fits in half the available memory (8 B a round "
                          "per path)", type=_whole_number)
    payload_bytes: int = _option(8, f"1 to {MAX_PAYLOAD_BYTES} (the largest slot less its header)", type=_whole_number)
    cadence: str = _option("b2b", "back to back, or a random gap before each round", choices=("b2b", "random-delayed"))
    gap_ns: int = _option(2_000, "random-delayed: base gap between rounds, 0 to 1e9 (1 s)", type=_whole_number)
    gap_span: int = _option(0x3FFF, "random-delayed: gap += LFSR & span (ns), 0 to 0xffffffff", type=_integer_any_base)
    seed: int = _option(1, "LFSR seed, 1 to 0xffffffff (also seeds the decoders' payloads)", type=_whole_number)
    controller_cpu: int | None = _option(0, "CPU for the issuing thread, or none", type=cpu_or_none)
    coprocessor_cpu: int | None = _option(1, "CPU for the coprocessor and the floor responder, or none",
                                          type=cpu_or_none)
    #: where the coprocessor and the floor responder listen (transports that need an endpoint)
    host: str = _option("127.0.0.1", "address the coprocessor and the floor responder listen on (transports that "
                        "need an endpoint)")
    #: "HOST:PORT" of a coprocessor served on another host (key PEER_KEY) and, for a transport
    #: with its own floor, that floor's responder beside it: nothing is started here
    peer: str | None = _option(None, "run against a bench peer on another host (`backline rdma bench-peer` there): "
                               "its coprocessor and floor responder; nothing is started here", metavar="HOST:PORT")
    driver: str = _option("native", "native, python, or a driver plugin such as compiled (backline-compiler)")
    code: str | None = _option(None, "CSS code (Hx, Hz: 0/1 matrices in an .npz) for a decoder such as bposd, "
                               "passed to its build(hx=, hz=); its payloads follow the code", metavar="NPZ")
    error_rate: float = _option(0.05, "a decoder's payloads: independent bit-flip probability, strictly between "
                                "0 and 1", type=float)
    decoder_id: int = _option(0, f"decoder_id of every round, 0 to {lib.BL_MAX_DECODERS - 1}", type=_whole_number)
    decoder_params: dict[str, str] = _option(help="passed to the decoder plugin's build() (repeatable)", factory=dict,
                                             metavar="KEY=VALUE", option="--decoder-param")
    #: the transport's own init_args (its Transport record declares them), for both nodes
    transport_args: dict[str, str] = _option(
        help="one of the transport's own init_args (`backline plugins` lists them), given to the controller and the "
        "coprocessor, e.g. tls=shm for ucx (repeatable)", factory=dict, metavar="KEY=VALUE", option="--transport-arg")
    #: rounds per interleaved block: short, so that framework and floor both see each state a
    #: shared VM drifts through (its vCPUs' placement flips a shm round trip between ~0.4 and
    #: ~1 us for seconds at a time; 50,000-round blocks caught one mode each)
    block: int = _option(5_000, "rounds per interleaved block (a few thousand, so that both paths see the same "
                         "machine state)", type=_whole_number)
    warmup: int = _option(16, "unrecorded rounds at the start of each block", type=_whole_number)
    progress: bool = _option(True, "no progress on stderr (drawn on a terminal only; a few plain lines in a log)",
                             option="--no-progress")

    def validate(self) -> None:
        """Refuse a configuration the bench cannot run, with the option to change (before anything starts).

        Every bound comes from the ABI (``backline_core._native.lib``) or this machine:
        payloads fit the largest slot, decoder ids are below ``BL_MAX_DECODERS``, the
        LFSR seed and span fit its 32 bits, CPUs are ones this process may run on, and
        the timing arrays and rings fit in half the memory available now. (A decoder's
        payloads are checked when they are made: :func:`backline_core._bench.payloads.payload_table`.)
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
            from .code import load_code

            load_code(self.code)  # a bad file is refused before anything starts
        if self.driver not in ("native", "python"):
            from .. import _plugins as plugins

            plugins.get("driver", self.driver)  # an unknown name lists the installed drivers
        check_floor(payload)
        self.check_memory()

    def peer_address(self) -> tuple[str, int]:
        """``--peer`` as (host, port); a clear error when it is not HOST:PORT."""
        text = self.peer if isinstance(self.peer, str) else ""
        host, sep, port = text.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BacklineError(f"--peer {self.peer!r}: give HOST:PORT of a bench peer (`backline TRANSPORT "
                                "bench-peer` on that host prints it), e.g. 10.0.0.2:18515")
        return host, int(port)

    def memory_needed(self, table_bytes: int | None = None) -> tuple[int, int]:
        """Bytes this run allocates: (timing arrays, payload tables and rings); ``table_bytes``:
        a decoder's requests and replies (None: none, the bench's own payloads)."""
        arrays = 2 if self.driver == "native" else 3  # framework + floor (+ native with another driver)
        timing = 8 * (arrays * (self.rounds - 1) + max(self.warmup, 1) + 1)
        ring = ring_geometry(self.payload_bytes, self.payload_bytes)
        buffers = 2 * ring["slots"] * ring["slot_bytes"]  # request and reply rings
        if table_bytes is not None:
            buffers += 3 * table_bytes  # the table, its native copy and the Python one of the replies' checks
        elif self.driver == "python":
            buffers += min(self.block, self.rounds) * self.payload_bytes  # one block's payloads at a time
        elif self.driver != "native":
            buffers += 3 * PAYLOAD_TABLE * self.payload_bytes  # a driver plugin's table of index payloads
        return timing, buffers

    def check_memory(self, table_bytes: int | None = None) -> None:
        """Refuse a run whose arrays, rings and tables need more than half the memory available now."""
        available = available_memory()
        if available is None:
            return
        budget = available // 2
        timing, buffers = self.memory_needed(table_bytes)
        if timing + buffers <= budget:
            return
        per_round = timing // max(self.rounds - 1, 1)
        if timing > budget:
            fit = max(2, (budget - buffers) // max(per_round, 1))
            raise BacklineError(
                f"--rounds {self.rounds:,}: its round-trip times need {_bytes(timing)} ({per_round} B a round) but "
                f"{_bytes(available)} of memory is available and a run may use half; use at most {fit:,} rounds")
        raise BacklineError(
            f"--payload-bytes {self.payload_bytes}: its payload tables and rings need {_bytes(buffers)} but "
            f"{_bytes(available)} of memory is available and a run may use half; use a smaller payload")


# -- the command line, from the fields ----------------------------------------------------------

def option_name(f: Field[Any]) -> str:
    return f.metadata.get("option") or "--" + f.name.replace("_", "-")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default, where it has one to show (not None, not a flag's)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`BenchConfig`, its default the field's."""
    for f in fields(BenchConfig):
        md, name = f.metadata, option_name(f)
        if f.default_factory is not MISSING:  # a dict: repeatable KEY=VALUE
            parser.add_argument(name, dest=f.name, action="append", default=None, metavar=md["metavar"],
                                help=md["help"])
        elif isinstance(f.default, bool):
            parser.add_argument(name, dest=f.name, action="store_false" if f.default else "store_true",
                                help=md["help"])
        else:
            extra = {k: md[k] for k in ("type", "choices", "metavar") if md[k] is not None}
            parser.add_argument(name, dest=f.name, default=f.default, help=md["help"], **extra)


def from_args(args: argparse.Namespace) -> BenchConfig:
    """The configuration ``add_arguments``' options parsed into ``args``."""
    from .._config import parse_config

    values: dict[str, Any] = {}
    for f in fields(BenchConfig):
        value = getattr(args, f.name)
        if f.default_factory is not MISSING:
            try:
                value = parse_config(";".join(value or []))
            except ValueError as exc:
                raise BacklineError(f"{option_name(f)}: {exc}") from None
        values[f.name] = value
    return BenchConfig(**values)


# -- bounds of this machine and of the ABI ------------------------------------------------------

def check_floor(payload_bytes: int) -> None:
    """The floor runs every payload the framework does (its limit: BL_BENCH_MAX_PAYLOAD_BYTES)."""
    if payload_bytes > lib.BL_BENCH_MAX_PAYLOAD_BYTES:
        raise BacklineError(f"--payload-bytes {payload_bytes}: larger than the {lib.BL_BENCH_MAX_PAYLOAD_BYTES} bytes "
                            "the floor ping-pong (bl_bench_floor) carries, which every run measures against")


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


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
