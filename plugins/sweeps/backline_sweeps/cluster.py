"""The Dask cluster a sweep runs on: an embedded LocalCluster, or a running scheduler and its workers."""

from __future__ import annotations

import logging
import time
from typing import Any

from backline_core import BacklineError, InvalidArgumentError

#: seconds to reach a scheduler, and for its first worker to be there
CONNECT_TIMEOUT_S = 30.0


class Cluster:
    """A Dask client and, for the embedded default, the LocalCluster it started (``close`` stops it)."""

    def __init__(self, client: Any, local: Any | None, address: str) -> None:
        self.client, self.local, self.address = client, local, address

    @property
    def dashboard(self) -> str | None:
        """The dashboard's address, when the scheduler serves one (it needs bokeh)."""
        import urllib.error
        import urllib.request

        try:
            link = str(self.client.dashboard_link)
            with urllib.request.urlopen(link, timeout=2) as reply:  # the scheduler's HTTP server says 404 without it
                return link if reply.status == 200 else None
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def slots(self) -> int:
        """Worker threads the scheduler has now (each runs one batch at a time)."""
        info = self.client.scheduler_info(n_workers=-1)
        return sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())

    def worker_addresses(self) -> list[str]:
        """The workers' addresses, as the scheduler knows them."""
        return sorted(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def close(self) -> None:
        """Disconnect; shut down the cluster this process started (its worker processes with it)."""
        try:
            self.client.close(timeout=10)
        except Exception:  # closing a client whose scheduler went away is not an error of the sweep
            pass
        if self.local is not None:
            try:
                self.local.close(timeout=20)
            except Exception:
                pass

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quiet_dask() -> None:
    """Dask logs its own warnings (a worker lost, a stream closed); the sweep reports what matters."""
    for name in ("distributed", "distributed.client", "distributed.scheduler", "distributed.worker",
                 "distributed.nanny", "distributed.core", "distributed.comm", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def open_cluster(*, scheduler: str | None = None, workers: int = 1, dashboard: str | None = None,
                 timeout: float = CONNECT_TIMEOUT_S) -> Cluster:
    """``scheduler`` given: a client of that running scheduler, with a worker there within ``timeout``;
    otherwise a LocalCluster of ``workers`` processes, one thread each (``dashboard``: its address, e.g. ':8787')."""
    quiet_dask()
    from distributed import Client, LocalCluster

    if scheduler is not None:
        address = scheduler if "://" in scheduler else f"tcp://{scheduler}"
        try:
            client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise BacklineError(f"--scheduler {scheduler}: no Dask scheduler answered within {timeout:g} s "
                                f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
        cluster = Cluster(client, None, address)
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (OSError, TimeoutError):
            cluster.close()
            raise BacklineError(f"--scheduler {scheduler}: no worker joined within {timeout:g} s (start one: "
                                f"dask worker {address} --nthreads 1)") from None
        return cluster
    if workers < 1:
        raise InvalidArgumentError(f"--workers {workers}: give 1 or more")
    t0 = time.monotonic()
    try:
        local = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                             dashboard_address=dashboard, silence_logs=logging.CRITICAL)
    except Exception as exc:  # Dask says why in a chain of RuntimeErrors: the first line of the first is enough
        raise BacklineError(f"could not start a local Dask cluster of {workers} workers: "
                            f"{(str(exc) or type(exc).__name__).splitlines()[0]}") from None
    try:
        client = Client(local, timeout=max(timeout - (time.monotonic() - t0), 1.0), set_as_default=False)
    except BaseException:
        local.close()
        raise
    return Cluster(client, local, str(local.scheduler_address))
