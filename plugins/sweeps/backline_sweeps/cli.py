"""``backline collect``: a threshold sweep on Dask distributed, rows mergeable with sinter's.

    backline collect --circuits GLOB... --decoders backline:NAME[,...] [--metadata-from-filename]
        --max-shots N [--max-errors K] [--save-resume-filepath stats.csv]
        [--scheduler tcp://HOST:PORT | --workers N] [--placement P.json] [--dashboard [ADDR]]
        [--plot FILE.png [--plot-x KEY]] [--seed S] [--connect-timeout S] [--no-progress]

Rows are sinter's CSV (docs/sweeps.md). Errors are one line on stderr and exit status 2;
Ctrl-C saves the rows gathered so far, shuts down the cluster it started and exits 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from backline_core import BacklineError, InvalidArgumentError
from backline_core.sdk import Parser, read_input_text, run_command

#: the largest placement file read
MAX_PLACEMENT_BYTES = 1 << 20


def _positive(text: str) -> int:
    try:
        value = int(float(text)) if any(c in text for c in "eE.") else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 or more")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give more than 0 and at most 3600 seconds")
    return value


def _names(values: Sequence[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        names.extend(n.strip() for n in value.split(",") if n.strip() and n.strip() not in names)
    return names


def plot(stats: Sequence[Any], path: str, x_key: str) -> None:
    """Logical error rate against ``x_key`` of the metadata, one curve per decoder and other metadata."""
    missing = [s for s in stats if not isinstance(s.json_metadata, dict) or x_key not in s.json_metadata]
    if missing:
        meta = missing[0].json_metadata
        raise InvalidArgumentError(f"--plot: the metadata {meta!r} has no {x_key!r} to plot against; name "
                                   f"circuits like p=0.001,d=3.stim with --metadata-from-filename, or give --plot-x KEY")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BacklineError("--plot needs matplotlib: pip install 'backline-sweeps[plot]'") from None
    import sinter

    def curve(s: Any) -> str:
        rest = ", ".join(f"{k}={v}" for k, v in sorted(s.json_metadata.items()) if k not in (x_key, "path"))
        return f"{s.decoder} {rest}".strip()

    fig, ax = plt.subplots(1, 1, figsize=(7, 5))
    sinter.plot_error_rate(ax=ax, stats=stats, x_func=lambda s: s.json_metadata[x_key], group_func=curve)
    ax.loglog()
    ax.grid(which="both", alpha=0.3)
    ax.set(xlabel=x_key, ylabel="logical error rate (per shot)", title="logical error rate")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


class _DeferInterrupt:
    """Holds a Ctrl-C while the cluster starts, so it is never left half made; it is raised after."""

    def __enter__(self) -> _DeferInterrupt:
        self.hit = False
        self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, *_: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self.old)


def _cmd_collect(args: argparse.Namespace) -> int:
    from .tasks import check_decoders, read_tasks

    decoders = _names(args.decoders)
    if not decoders:
        raise InvalidArgumentError("--decoders: give at least one decoder, e.g. backline:pymatching")
    placement_json = None
    if args.placement:
        from backline_core import Placement

        text = read_input_text(args.placement, what="--placement", limit=MAX_PLACEMENT_BYTES)
        placement = Placement.from_json(text)  # a malformed one is refused here, not on every worker
        if len(placement.coprocessors) != 1:
            raise InvalidArgumentError(f"--placement {args.placement}: has {len(placement.coprocessors)} "
                                       "coprocessors; a batch streams to one")
        placement_json = placement.to_json()
    from .cluster import LocalStart, open_cluster, prepare_local_workers
    from .collect import collect, existing_rows
    from .progress import SweepProgress

    progress = SweepProgress(None if args.no_progress else sys.stderr)
    with _DeferInterrupt() as held:
        starting = None
        if not args.scheduler:
            # the workers' imports (in the fork server) and the local cluster's start run while the
            # tasks are read and checked here; bad input then shuts down what started, and is reported
            prepare_local_workers(decoders)
            starting = LocalStart(workers=args.workers, dashboard=args.dashboard, timeout=args.connect_timeout)
        try:
            check_decoders(decoders, placement=placement_json is not None)
            tasks = read_tasks(args.circuits, decoders, metadata_from_filename=args.metadata_from_filename)
            if args.save_resume_filepath:
                existing_rows(args.save_resume_filepath)  # a file that is not sinter's CSV: refused before any batch
        except BaseException:
            if starting is not None:
                starting.discard()
            raise
        if starting is not None:
            cluster = starting.result()
        else:
            cluster = open_cluster(scheduler=args.scheduler, workers=args.workers, dashboard=args.dashboard,
                                   timeout=args.connect_timeout)
    interrupted = held.hit
    totals: list[Any] = []
    with cluster:
        workers = cluster.worker_addresses()
        where = (f"scheduler {cluster.address}, workers {', '.join(workers)}" if args.scheduler else
                 f"a local cluster of {args.workers} worker process{'es' if args.workers > 1 else ''}")
        progress.note(f"backline collect: {len(tasks)} task{'s' if len(tasks) != 1 else ''} on {where}"
                      + (f", placement {args.placement}" if args.placement else ""))
        dashboard = cluster.dashboard if args.dashboard or args.scheduler else None
        if dashboard:
            progress.note(f"Dask dashboard: {dashboard}")
        elif args.dashboard:
            progress.note("backline collect: no Dask dashboard: it needs bokeh (pip install 'bokeh>=3.1')")
        if not interrupted:
            try:
                totals = collect(tasks, cluster, max_shots=args.max_shots, max_errors=args.max_errors,
                                 save_path=args.save_resume_filepath, placement_json=placement_json,
                                 seed=args.seed, progress=progress)
            except KeyboardInterrupt:
                interrupted = True
        if interrupted:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
    if interrupted:
        saved = f"; the rows so far are in {args.save_resume_filepath}" if args.save_resume_filepath else ""
        print(f"backline collect: interrupted{saved}", file=sys.stderr)
        return 130
    if args.plot:
        import sinter

        stats = sinter.read_stats_from_csv_files(args.save_resume_filepath) if args.save_resume_filepath else totals
        plot(stats, args.plot, args.plot_x)
    return 0


def parser() -> Parser:
    p = Parser(prog="backline collect",
               description="Sample and decode sinter's tasks on a Dask cluster; write sinter's CSV rows.")
    p.add_argument("--circuits", nargs="+", required=True, metavar="GLOB",
                   help="stim circuit files (globs are expanded, e.g. 'circuits/*.stim')")
    p.add_argument("--decoders", nargs="+", required=True, metavar="NAME[,NAME]",
                   help="backline:NAME (backline plugins) or one of sinter's built-in decoders")
    p.add_argument("--metadata-from-filename", action="store_true",
                   help="metadata from key=value pairs of the file name (sinter's --metadata_func auto); "
                        "default: {'path': PATH}, as sinter's default")
    p.add_argument("--max-shots", type=_positive, required=True, help="stop a task at this many shots")
    p.add_argument("--max-errors", type=_positive, default=sys.maxsize,
                   help="stop a task at this many errors (batches in flight still count, as in sinter)")
    p.add_argument("--save-resume-filepath", metavar="CSV",
                   help="append rows here; rows already there count toward the limits (default: stdout)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="a running `dask scheduler` with its workers")
    where.add_argument("--workers", type=_positive, default=os.cpu_count() or 1,
                       help="worker processes of the embedded local cluster (default: the CPUs)")
    p.add_argument("--placement", metavar="P.json",
                   help="decode each batch by streaming it to this placement's coprocessor (docs/streaming.md)")
    p.add_argument("--dashboard", nargs="?", const=":8787", default=None, metavar="ADDR",
                   help="serve the local cluster's Dask dashboard (default address :8787)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the logical error rate against noise, per decoder")
    p.add_argument("--plot-x", default="p", metavar="KEY", help="the metadata key the plot's x axis is (default p)")
    p.add_argument("--seed", type=int, default=None, help="seed of the run's batches (default: random)")
    p.add_argument("--connect-timeout", type=_seconds, default=30.0, metavar="S",
                   help="seconds to reach the scheduler and find a worker there (default 30)")
    p.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    p.set_defaults(func=_cmd_collect)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``backline collect ARGS``."""
    return run_command(parser(), sys.argv[1:] if argv is None else argv)
