"""Parallel windows with the workers on another "host": ``backline executor serve`` in network namespace
B, ``backline qec stream --parallel-windows --placement P.json`` in namespace A with two workers placed
in that executor over ucx ``tls=tcp`` (docs/streaming.md, "Workers on another host"). Needs root and
iproute2; the namespaces (and the veth with them), the executor and its sessions go at the end."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stim

from backline_core import Controller, Coprocessor, Endpoint, Placement, plugins
from backline_core.sdk import ChildProcess
from backline_core.testing import test_secret, two_namespaces
from backline_qec.cli import read_b8, write_b8
from backline_qec.stream import stream

#: where the executor listens in namespace B (fresh: any port is free there); worker i at PORT + 1 + i
PORT = 18800

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="creates network namespaces: needs root and iproute2 (`ip`)"),
    pytest.mark.skipif("ucx" not in plugins.names("transport") or not plugins.names("executor")
                       or importlib.util.find_spec("backline_compiler") is None,
                       reason="needs the ucx transport, an executor plugin and the compiler (an executor runs "
                              "compiled code)"),
]


def test_workers_in_an_executor_in_another_namespace_predict_as_workers_in_local_processes(tmp_path: Path) -> None:
    from backline_executor_orc import Executor

    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=12,
                                     after_clifford_depolarization=0.003, before_measure_flip_probability=0.003)
    dets, obs = circuit.compile_detector_sampler(seed=3).sample(40, separate_observables=True)
    (tmp_path / "c.stim").write_text(str(circuit))
    write_b8(str(tmp_path / "d.b8"), dets)
    local = stream(circuit, "bposd", detectors=dets, observables=obs, window=7, commit=3, parallel_windows=True,
                   workers=2, runs_in="process", reference=False)
    secret = test_secret()  # mode 0600 in a private folder, removed when this process exits
    with two_namespaces("10.214.0") as pair:
        executor = Executor.attach(f"{pair.address_b}:{PORT}", secret)  # options only: it starts nothing
        args = {"tls": "tcp", "secret_file": secret}
        placement = Placement(controller=Controller(init_args=args), transport="ucx", coprocessors=[
            Coprocessor(name=f"worker-{i}", coprocessor_fn="echo", executor=executor,
                        endpoint=Endpoint(host=pair.address_b, port=PORT + 1 + i), init_args=args) for i in range(2)])
        (tmp_path / "p.json").write_text(placement.to_json())
        serve = [*pair.exec_in(pair.b), sys.executable, "-P", "-m", "backline_core", "executor", "serve", "--bind",
                 executor.address, "--allow-remote", "--secret-file", secret, "--parent-pid", str(os.getpid())]
        with ChildProcess(serve, name="the executor in namespace B", ready=r"backline-executor ready") as child:
            child.wait_ready(120)
            run = subprocess.run([*pair.exec_in(pair.a), sys.executable, "-P", "-m", "backline_core", "qec", "stream",
                                  "c.stim", "--decoder", "bposd", "--detectors", "d.b8", "--window", "7", "--commit",
                                  "3", "--parallel-windows", "--placement", "p.json", "--round-timeout-ms", "10000",
                                  "--predictions", "p.b8", "--json", "r.json"],
                                 cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        # the executor stopped its sessions (the workers) before it exited
        assert pair.pids(pair.a) == [] and pair.pids(pair.b) == []
    assert run.returncode == 0, run.stdout + run.stderr
    # every worker's session crossed the veth: namespace A has no other way to B
    assert run.stderr.count(f"UCX transports: tcp/{pair.veth_a}") == 2, run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["placement"]["transport"] == "ucx" and report["placement"]["runs_in"] == "executor"
    assert sorted(report["windows_per_worker"]) == ["worker-0", "worker-1"]
    assert sum(report["windows_per_worker"].values()) == len(dets) * report["windows_per_shot"]
    assert report["worker_failures"] == [] and report["deadline_misses"] == 0
    remote = read_b8(str(tmp_path / "p.b8"), circuit.num_observables, "predictions")
    assert np.array_equal(remote, local.predictions)
