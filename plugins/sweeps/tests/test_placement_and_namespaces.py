"""Batches streamed through a placement (the same error counts as offline for the same shots), and a
sweep whose worker is in another network namespace than its scheduler."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sinter

from backline_core import Controller, Coprocessor, Placement
from backline_core.testing import two_namespaces
from backline_sweeps.batches import Batch, run_batch
from backline_sweeps.tasks import read_tasks
from backline_sweeps.testing import DaskCluster, netns_permitted, run_collect


def memcpy_thread() -> str:
    return Placement(controller=Controller(hardware="cpu"), transport="memcpy",
                     coprocessors=[Coprocessor(name="dec", hardware="cpu", coprocessor_fn="echo",
                                               runs_in="thread")]).to_json()


@pytest.mark.parametrize("decoder", ["backline:pymatching", "backline:lut"])
def test_a_batch_streamed_through_a_placement_counts_the_offline_errors(circuits: Path, decoder: str) -> None:
    placement = memcpy_thread()
    for spec in read_tasks([str(circuits / "d=*.stim")], [decoder], metadata_from_filename=True):
        batch = Batch(batch_id=5, strong_id=spec.strong_id, shots=2000, seed=1234)
        offline, streamed = run_batch(spec, batch, None), run_batch(spec, batch, placement)
        assert streamed.shots == offline.shots == 2000
        assert streamed.errors == offline.errors > 0, (spec.path, streamed, offline)


def test_collect_with_a_placement(circuits: Path) -> None:
    (circuits / "p.json").write_text(memcpy_thread())
    r = run_collect("--circuits", "d=*.stim", "--decoders", "backline:lut", "--metadata-from-filename", "--max-shots",
                    "2000", "--save-resume-filepath", "stats.csv", "--workers", "2", "--placement", "p.json",
                    cwd=circuits)
    assert r.returncode == 0, r.stderr
    assert "placement p.json" in r.stderr
    stats = sinter.read_stats_from_csv_files(circuits / "stats.csv")
    assert sum(s.shots for s in stats) == 4000  # two workers of this host, each its own memcpy key
    r = run_collect("--circuits", "d=*.stim", "--decoders", "pymatching", "--max-shots", "10", "--placement", "p.json",
                    cwd=circuits)
    assert r.returncode == 2 and "--placement streams to Backline decoders only" in r.stderr


@pytest.mark.skipif(shutil.which("ip") is None or not netns_permitted(),
                    reason="creates network namespaces: needs root and iproute2 (`ip`)")
def test_a_worker_in_another_network_namespace(circuits: Path) -> None:
    with two_namespaces("10.207.0") as pair:
        cluster = DaskCluster(host=pair.address_a, wrap_scheduler=pair.exec_in(pair.a))
        try:
            cluster.start()
            cluster.add_worker(wrapper=pair.exec_in(pair.b), host=pair.address_b)
            r = run_collect("--circuits", "d=*.stim", "--decoders", "backline:pymatching", "--metadata-from-filename",
                            "--max-shots", "3000", "--save-resume-filepath", "stats.csv", "--scheduler",
                            cluster.address, wrapper=pair.exec_in(pair.a), cwd=circuits)
        finally:
            cluster.stop()
    assert r.returncode == 0, r.stderr
    # the only worker is B's: every batch crossed the veth pair
    assert "workers tcp://10.207.0.2:" in r.stderr, r.stderr
    stats = sinter.read_stats_from_csv_files(circuits / "stats.csv")
    assert sum(s.shots for s in stats) == 6000
