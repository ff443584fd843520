"""The Dask cluster a sweep runs on: an embedded LocalCluster, or a running scheduler and its workers."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
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


#: the environment variable naming the decoders the fork server builds once (``_warm``), comma separated
WARM_ENV = "BACKLINE_SWEEPS_WARM_DECODERS"
#: whether this process started multiprocessing's fork server for the local cluster's workers
_fork_server = False


def prepare_local_workers(decoders: Sequence[str]) -> None:
    """Start multiprocessing's fork server now, in the background, importing what a worker needs
    (Dask, stim, the sweep's decoders: ``_warm``), so that the LocalCluster's workers fork from it
    ready to decode while this process reads the tasks, rather than each spawning a fresh Python
    that imports them all after the cluster is up (1.0 s of start-up and 0.7 s to the first batch
    with one worker here). The fork server is this process's child and exits with it (it also
    ignores Ctrl-C); the workers are stopped by the cluster's shutdown. Where there is no fork
    server (Windows), the workers are spawned as before."""
    global _fork_server
    import multiprocessing
    from multiprocessing import forkserver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    os.environ[WARM_ENV] = ",".join(decoders)  # read by _warm in the fork server, which inherits it
    try:
        multiprocessing.get_context("forkserver").set_forkserver_preload(["backline_sweeps._warm"])
        forkserver.ensure_running()
    except (OSError, ValueError):
        return
    _fork_server = True


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
    if _fork_server:
        import dask

        # the fork server is running already: Dask's own preload list for it is not used
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
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


#: seconds to wait for a local cluster starting in the background (Dask bounds its own start; a backstop)
LOCAL_START_DEADLINE_S = 120.0


class LocalStart:
    """``open_cluster(workers=…)`` in a thread, so the local cluster starts while the caller reads the tasks."""

    def __init__(self, *, workers: int, dashboard: str | None, timeout: float) -> None:
        self._cluster: Cluster | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(workers, dashboard, timeout), daemon=True,
                                        name="backline-local-cluster-start")
        self._thread.start()

    def _run(self, workers: int, dashboard: str | None, timeout: float) -> None:
        try:
            self._cluster = open_cluster(workers=workers, dashboard=dashboard, timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def result(self, deadline: float = LOCAL_START_DEADLINE_S) -> Cluster:
        """The started cluster (the caller closes it), or the error that stopped its start."""
        self._thread.join(deadline)
        if self._thread.is_alive():
            raise BacklineError(f"the local Dask cluster did not start within {deadline:g} s")
        if self._error is not None:
            raise self._error
        assert self._cluster is not None
        return self._cluster

    def discard(self) -> None:
        """Wait for the start to end and shut down what it started (the caller is failing for another reason)."""
        try:
            self.result().close()
        except Exception:
            pass
