"""What a bench run measured (:class:`BenchResult`, a :class:`Series` per path) and how it is
reported: the text `backline bench` prints, ``--json`` and ``--plot``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import BacklineError
from .code import first_line
from .config import BenchConfig
from .protocols import ControllerBenchResult
from .stats import summary

#: the shared-memory floor's row in the report (a transport's own floor names itself)
SHM_FLOOR_LABEL = "floor (bare shared-memory ping-pong)"


@dataclass
class Series:
    """Round-trip times of one path, in nanoseconds."""

    name: str
    rtt_ns: np.ndarray

    def stats(self) -> dict[str, float]:
        return summary(self.rtt_ns, "ns")


@dataclass
class BenchResult:
    """One run of `backline bench` on a CPU controller: round 0, then each path's steady state."""

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


def write_json(result: BenchResult | ControllerBenchResult, path: str) -> None:
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
            raise BacklineError(f"--plot needs matplotlib ({first_line(exc)}): "
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


def main_report(result: BenchResult | ControllerBenchResult, json_path: str | None, plot_path: str | None) -> str:
    """The text `backline bench` prints; writes ``--json`` and ``--plot`` (a controller's own
    bench has no plot)."""
    if not isinstance(result, BenchResult):
        if not isinstance(result, ControllerBenchResult):
            raise BacklineError(f"a controller's bench returned {type(result).__name__}, which lacks text(), "
                                "to_json(), lost or mismatched (Transport.controller_bench, docs/plugins.md)")
        text = str(result.text())
    else:
        text = format_report(result)
    if json_path:
        write_json(result, json_path)
    if plot_path and isinstance(result, BenchResult):
        plot(result, plot_path)
    return text
