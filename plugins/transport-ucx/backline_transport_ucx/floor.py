"""The bare UCX floor of ``backline bench --transport ucx`` (native/floor.c), and its responder process.

The bench gets a :class:`Floor` from :func:`bench_floor`: a responder child process echoes
active messages on the coprocessor's CPU through a worker on the same UCX transports
(``tls``), this process sends and times them, and :meth:`Floor.reference` runs
``ucx_perftest -t ucp_am_lat`` on the same transports. The responder is this module run as a
program::

    python -P -m backline_transport_ucx.floor serve --host H --port P [--tls shm|tcp|auto --cpu C
        --timeout-ms T --wait-ms W --parent-pid PID]

It prints one ``ready port=P pid=N`` line once it listens (port 0: any free port, the one
it took), waits for one initiator, serves it until it disconnects, and exits on SIGTERM,
SIGINT or SIGHUP or when ``--parent-pid`` exits. The process handling, the initiator's Python
side and the tool runner are the core's floor kit (:mod:`backline_core.sdk`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from typing import Any

from backline_core.sdk import (
    DEFAULT_TIMEOUT_MS,
    READY_TIMEOUT_S,
    FloorLibrary,
    NativeFloor,
    Responder,
    floor_settings,
    parse_responder_args,
    responder_parser,
    run_tool_pair,
    serve_responder,
)

from . import get_library

LABEL = "floor (bare UCX active-message ping-pong)"
REFERENCE_LABEL = "ucx_perftest ucp_am_lat (2 x one-way)"
#: ucx_perftest's iterations per run (it reports one percentile per run: median, P99, P99.9 take three)
PERFTEST_MAX_ROUNDS = 100_000
#: ucx_perftest computes its percentile over its last this many iterations (libperf's TIMING_QUEUE_SIZE)
PERFTEST_WINDOW = 2048
#: a floor median this many times ucx_perftest's means the two did not run over the same UCX transports
REFERENCE_WARN_RATIO = 5.0
NAME = "backline-transport-ucx"

LIBRARY = FloorLibrary(os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "floor.h"), get_library,
                       "bl_ucx_floor", NAME)


def native() -> tuple[Any, Any]:
    """(ffi, lib) of the floor's functions in the ucx plugin's library (loaded once)."""
    return LIBRARY.ffi, LIBRARY.lib


def ucx_tls(tls: str) -> str | None:
    """The UCX_TLS list a ``tls`` value stands for ("" for auto: UCX's own choice), None for no such value
    (the backend's table, worker.c)."""
    text = LIBRARY.lib.bl_ucx_floor_tls(tls.encode())
    return None if text == LIBRARY.ffi.NULL else LIBRARY.ffi.string(text).decode()


# -- the responder process ----------------------------------------------------------------------

def serve(host: str, port: int, tls: str = "auto", cpu: int = -1, timeout_ms: int = DEFAULT_TIMEOUT_MS,
          parent_pid: int | None = None, wait_ms: int = 0) -> int:
    """The responder: listen, print ``ready``, serve one initiator; 0 when it is done or a stop came."""
    return serve_responder(
        LIBRARY, lambda out, err, n: LIBRARY.lib.bl_ucx_floor_listen(host.encode(), port, tls.encode(), cpu,
                                                                     timeout_ms, out, err, n),
        wait_ms=wait_ms, parent_pid=parent_pid)


def main(argv: list[str] | None = None) -> int:
    parser, s = responder_parser("backline_transport_ucx.floor", "The bench floor's UCX active-message responder.")
    s.add_argument("--tls", default="auto", help="UCX transports: shm, tcp or auto (the transport's tls key)")
    args = parse_responder_args(parser, argv)
    return serve(args.host, args.port, args.tls, args.cpu, args.timeout_ms, args.parent_pid, args.wait_ms)


# -- the bench's side ---------------------------------------------------------------------------

def responder(host: str, port: int = 0, *, tls: str = "auto", cpu: int | None = None,
              timeout_ms: int = DEFAULT_TIMEOUT_MS, wait_ms: int = 0,
              ready_timeout: float = READY_TIMEOUT_S) -> Responder:
    """This module's responder as a child process, listening on ``host:port`` (0: a free port)."""
    args = ["--host", host, "--port", str(port), "--tls", tls, "--cpu", str(-1 if cpu is None else cpu),
            "--timeout-ms", str(timeout_ms), "--wait-ms", str(wait_ms)]
    return Responder("backline_transport_ucx.floor", args, NAME, ready_timeout=ready_timeout)


class Floor(NativeFloor):
    """The bare UCX active-message ping-pong between this process and a responder on the
    coprocessor's CPU, on the UCX transports ``tls`` chooses; :meth:`reference` runs
    ``ucx_perftest`` on the same. See :class:`~backline_core.sdk.NativeFloor`."""

    label = LABEL

    def __init__(self, host: str, payload_bytes: int, *, tls: str = "auto",
                 reference_rounds: int = PERFTEST_MAX_ROUNDS, **kwargs: Any) -> None:
        super().__init__(host, payload_bytes, reference_rounds=reference_rounds, **kwargs)
        self.tls = tls
        self._block_medians: list[float] = []  # of the timed blocks, for the warning after the reference

    def library(self) -> FloorLibrary:
        return LIBRARY

    def check(self) -> None:
        from backline_core import BacklineError, TransportError

        if not os.path.isfile(get_library()):
            raise TransportError("the ucx floor has no library: libucp's headers were missing when "
                                 "backline-transport-ucx was installed (apt-get install libucx-dev, then reinstall it)")
        if ucx_tls(self.tls) is None:
            raise BacklineError(f"init_args tls={self.tls!r}: choose shm (UCX shared memory), tcp, or auto (UCX's own "
                                "choice)")

    def start_responder(self) -> Responder:
        return responder(self.host, tls=self.tls, cpu=self.cpu, timeout_ms=self.timeout_ms,
                         ready_timeout=self.ready_timeout)

    def open(self, out: Any, err: Any, n: int) -> int:
        return int(LIBRARY.lib.bl_ucx_floor_open(self.host.encode(), self.port, self.tls.encode(), self.payload_bytes,
                                                 self.timeout_ms, out, err, n))

    def run(self, first: int, out: Any) -> None:
        super().run(first, out)
        if len(out):
            import numpy as np

            self._block_medians.append(float(np.median(out)))

    def warning(self, figures: dict[str, Any] | None) -> str | None:
        """One line when this floor's median is over :data:`REFERENCE_WARN_RATIO` times ucx_perftest's
        (they did not run over the same UCX transports), else None."""
        if not figures or not self._block_medians:
            return None
        import numpy as np

        mine, theirs = float(np.median(self._block_medians)), float(figures["median_ns"])
        if mine <= REFERENCE_WARN_RATIO * theirs:
            return None
        return (f"backline bench: warning: the ucx floor's median round trip ({mine / 1e3:.3f} us; {self.description}) "
                f"is {mine / theirs:.1f}x ucx_perftest's ({theirs / 1e3:.3f} us): the nodes did not use the UCX "
                "transports ucx_perftest chose (try --transport-arg tls=shm on one host)")

    def reference(self) -> dict[str, Any] | None:
        """``ucx_perftest -t ucp_am_lat`` on this floor's UCX transports with its payload: round trips in
        ns (2 x its one-way figures), or None (:attr:`reference_note` says why). A floor far slower than
        it is warned about on stderr (:meth:`warning`)."""
        figures = self._reference()
        line = self.warning(figures)
        if line:
            print(line, file=sys.stderr, flush=True)
        return figures

    def _reference(self) -> dict[str, Any] | None:
        if self._handle is None:
            self.reference_note = "ucx_perftest not run: the floor is not started"
            return None
        if self.peer is not None:
            self.reference_note = ("ucx_perftest not run: its server would have to run on the peer's host; run "
                                   "`ucx_perftest` there and `ucx_perftest -t ucp_am_lat HOST` here to compare")
            return None
        rounds = max(1, min(self.reference_rounds, PERFTEST_MAX_ROUNDS))
        figures, note = ucx_perftest_am_lat(self.tls, self.payload_bytes, rounds, self.host,
                                            server_cpu=self.cpu, client_cpu=self.controller_cpu)
        self.reference_note = note
        return figures


def bench_floor(cfg: Any, init_args: dict[str, Any]) -> Floor:
    """The Transport record's ``bench_floor``: a :class:`Floor` for the bench's configuration, on the
    UCX transports (``tls``) and CPU of the coprocessor's ``init_args``; with ``--peer``, the peer's responder."""
    return Floor(tls=str(init_args.get("tls") or "auto"), **floor_settings(cfg, init_args))


# -- ucx_perftest -------------------------------------------------------------------------------

def parse_perftest_csv(text: str) -> dict[str, float] | None:
    """ucx_perftest's ``-f -v`` result row as {column: value}: iterations, N_percentile_lat, avg_lat, ... (one-way
    latencies in usec). None without one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for k, line in enumerate(lines[:-1]):
        if line.startswith("iterations,") and "_percentile_lat" in line:
            names, values = line.split(","), lines[k + 1].split(",")
            try:
                return {name: float(value) for name, value in zip(names, values)}
            except ValueError:
                return None
    return None


def ucx_perftest_am_lat(tls: str, payload_bytes: int, rounds: int, host: str, *, server_cpu: int | None = None,
                        client_cpu: int | None = None) -> tuple[dict[str, Any] | None, str]:
    """Run ``ucx_perftest -t ucp_am_lat`` server and client here, once per percentile (50, 99, 99.9: it
    reports one per run); (round-trip figures in ns, a note saying what ran or why not)."""
    from backline_core import BacklineError
    from backline_core.sdk import free_port  # numpy: not for the responder, which starts fast

    exe = shutil.which("ucx_perftest")
    if exe is None:
        return None, "ucx_perftest not run: it is not on PATH (Debian: apt-get install ucx-utils)"
    env = dict(os.environ)
    chosen = ucx_tls(tls)
    if chosen is None:
        return None, f"ucx_perftest not run: tls={tls!r} is not shm, tcp or auto"
    if chosen:
        env["UCX_TLS"] = chosen
    else:
        env.pop("UCX_TLS", None)
    figures: dict[str, Any] = {"name": REFERENCE_LABEL, "rounds": rounds}
    shown = ""
    for key, rank in (("median_ns", "50"), ("p99_ns", "99"), ("p999_ns", "99.9")):
        try:
            port = free_port(host)
        except BacklineError as exc:
            return None, f"ucx_perftest not run: {exc}"
        server = [exe, "-p", str(port)]
        client = [exe, "-p", str(port), "-t", "ucp_am_lat", "-s", str(payload_bytes), "-n", str(rounds), "-R", rank,
                  "-f", "-v", host]
        tls_shown = f"UCX_TLS={env['UCX_TLS']} " if "UCX_TLS" in env else ""
        shown = tls_shown + " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(client))
        out, status, why = run_tool_pair(server, client, port, server_cpu=server_cpu, client_cpu=client_cpu,
                                         timeout=60.0 + rounds * 0.0002, env=env)
        if out is None:
            return None, f"ucx_perftest failed: {why}"
        row = parse_perftest_csv(out)
        column = next((name for name in (row or {}) if name.endswith("_percentile_lat")), None)
        if status != 0 or row is None or column is None:
            last = [line for line in out.strip().splitlines() if line.strip()][-1:] or ["no output"]
            return None, f"ucx_perftest failed: `{shown}` exited with status {status} ({last[0].strip()})"
        figures[key] = 2 * 1000.0 * row[column]  # one-way usec -> round trip ns
        if key == "median_ns":
            figures["mean_ns"] = 2 * 1000.0 * row.get("avg_lat", math.nan)
    if not all(math.isfinite(figures[k]) and figures[k] > 0 for k in ("median_ns", "p99_ns", "p999_ns")):
        return None, f"ucx_perftest's figures are not finite or not positive ({figures}): `{shown}`"
    figures["command"] = re.sub(r"-R \S+", "-R 50|99|99.9", shown)
    return figures, (f"ucx_perftest ran after the last block, the bench's nodes stopped, once per percentile (its "
                     f"percentiles cover its last {PERFTEST_WINDOW} iterations only): `{figures['command']}`")


if __name__ == "__main__":
    sys.exit(main())
