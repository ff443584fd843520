"""Backline threshold sweeps on Dask distributed: ``backline collect`` (docs/sweeps.md).

sinter's task model (circuit, decoder, json_metadata) and its CSV rows, so the output merges
with ``sinter collect``'s; the batches run on a Dask cluster, embedded or remote.
"""

from __future__ import annotations

__all__ = ["Batch", "BatchResult", "BatchSizer", "TaskSpec", "collect", "read_tasks", "run_batch"]


def __getattr__(name: str) -> object:
    # dask and stim load only when used: `backline --help` lists the command without them
    if name in ("TaskSpec", "read_tasks"):
        from . import tasks

        return getattr(tasks, name)
    if name in ("Batch", "BatchResult", "BatchSizer", "run_batch"):
        from . import batches

        return getattr(batches, name)
    if name == "collect":
        from .collect import collect

        return collect
    raise AttributeError(name)
