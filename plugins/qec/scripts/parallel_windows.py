"""Parallel windows: windows per second on N = 1, 2, ... coprocessor processes, and the LER against
sequential sliding windows on the same shots.

    .venv/bin/python plugins/qec/scripts/parallel_windows.py [--shots N] [--workers 1 2] [--cases colour surface]
        [--transport memcpy] [--transport-arg K=V]... [--executor HOST:PORT --secret-file F | --across-namespaces]

Cases (stim's generated circuits, 10 d rounds, the same noise p on every channel):
- ``colour``: colour code (``color_code:memory_xyz``) d = 5, p = 0.002, ``bposd`` (decoder-dominated);
- ``surface``: rotated surface code d = 7, p = 0.003, ``pymatching``.
Layer-A windows of 3d rounds commit their middle d (surface: 13 rounds committing 5); the sequential
reference is sliding windows of 2d rounds committing d, decoded in this process on the same shots. Each run is ``backline qec stream
--parallel-windows`` through its API (memcpy, workers in processes by default).

Workers on another host: ``--executor HOST:PORT --secret-file F`` places the N workers in the executor
that ``backline executor serve --bind HOST:PORT --allow-remote --secret-file F`` runs there, worker i
listening at HOST:PORT+1+i over the transport (e.g. ``--transport ucx --transport-arg tls=tcp``);
native decoders only (an executor runs compiled code), so the ``colour`` case.
``--across-namespaces`` (root, iproute2) makes that other host here: two network namespaces joined
by a veth pair, the executor in B, a fresh secret (0600), and this script re-run in A with
``--executor`` over ucx ``tls=tcp``; all of it is gone at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys

import stim

from backline_core import Controller, Coprocessor, Endpoint, Placement
from backline_qec import SlidingWindowDecoder
from backline_qec.stream import stream

#: name: (stim's circuit, d, p, decoder, layer-A window, its commit)
CASES = {
    "colour": ("color_code:memory_xyz", 5, 0.002, "bposd", 15, 5),
    # 13/5, not 21/7: a Python decoder's windows travel to a worker process in one function file, which
    # the core caps at 16 MiB, and pymatching's d = 7 window DEMs of 21 rounds come to 21 MB
    "surface": ("surface_code:rotated_memory_z", 7, 0.003, "pymatching", 13, 5),
}


def circuit(kind: str, d: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated(kind, distance=d, rounds=10 * d, after_clifford_depolarization=p,
                                  before_measure_flip_probability=p, after_reset_flip_probability=p,
                                  before_round_data_depolarization=p)


#: decoders that run in Python: a worker in an executor (compiled code only) cannot run them
PYTHON_DECODERS = {"pymatching"}
#: --across-namespaces: namespace B's address block, and where the executor listens there (B is fresh: any port is free)
SUBNET, EXECUTOR_PORT = "10.213.0", 18700
#: the longest the run in namespace A, or the executor's start, may take
RUN_TIMEOUT_S, READY_TIMEOUT_S = 3600.0, 120.0


def executor_placement(address: str, secret_file: str, workers: int, transport: str,
                       transport_args: dict[str, str]) -> Placement:
    """``workers`` coprocessors in the executor at ``address`` (HOST:PORT), worker i at HOST:PORT+1+i;
    ``stream()`` gives each the window function."""
    from backline_executor_orc import Executor

    executor = Executor.attach(address, secret_file)  # its options only: attaching starts and stops nothing
    host, port = executor.host, int(address.rsplit(":", 1)[1])
    args = {**transport_args, "secret_file": secret_file}  # both ends of each session authenticate with it
    return Placement(controller=Controller(init_args=args), transport=transport, coprocessors=[
        Coprocessor(name=f"worker-{i}", coprocessor_fn="echo", executor=executor,
                    endpoint=Endpoint(host=host, port=port + 1 + i), init_args=args)
        for i in range(workers)])


def across_namespaces(argv: list[str]) -> int:
    """Run this script in namespace A with its workers in an executor in namespace B (see the module)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        sys.exit("--across-namespaces creates network namespaces: run it as root, with iproute2 (`ip`)")
    from backline_core.sdk import ChildProcess, DeploymentSecret
    from backline_core.testing import two_namespaces

    with DeploymentSecret() as secret, two_namespaces(SUBNET) as pair:
        address = f"{pair.address_b}:{EXECUTOR_PORT}"
        serve = [*pair.exec_in(pair.b), sys.executable, "-P", "-m", "backline_core", "executor", "serve", "--bind",
                 address, "--allow-remote", "--secret-file", secret.path, "--parent-pid", str(os.getpid())]
        with ChildProcess(serve, name="the executor in namespace B", ready=r"backline-executor ready") as executor:
            executor.wait_ready(READY_TIMEOUT_S)
            print(f"controller in network namespace {pair.a} ({pair.address_a}); workers in the executor at "
                  f"{address} in {pair.b}, over ucx tls=tcp", flush=True)
            inner = [*pair.exec_in(pair.a), sys.executable, __file__, *argv, "--executor", address, "--secret-file",
                     secret.path, "--transport", "ucx", "--transport-arg", "tls=tcp"]
            return subprocess.run(inner, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S).returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shots", type=int, default=300)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=None,
                    help="default: every case (with --executor: those with a native decoder)")
    ap.add_argument("--transport", default="memcpy")
    ap.add_argument("--runs-in", default="process")
    ap.add_argument("--transport-arg", action="append", default=[], metavar="K=V")
    ap.add_argument("--executor", metavar="HOST:PORT", help="place the workers in this executor (another host)")
    ap.add_argument("--secret-file", help="with --executor: the secret it and the workers were given (mode 0600)")
    ap.add_argument("--across-namespaces", action="store_true",
                    help="the controller in one network namespace, the workers in an executor in another, over ucx tcp")
    args = ap.parse_args()
    if args.across_namespaces:
        if args.executor or args.secret_file or args.transport_arg or args.transport != "memcpy":
            ap.error("--across-namespaces chooses the executor, secret and transport itself")
        sys.exit(across_namespaces([a for a in sys.argv[1:] if a != "--across-namespaces"]))
    if bool(args.executor) != bool(args.secret_file):
        ap.error("--executor and --secret-file go together")
    native = [name for name, case in CASES.items() if case[3] not in PYTHON_DECODERS]
    if args.cases is None:
        args.cases = native if args.executor else sorted(CASES)
    elif args.executor and set(args.cases) - set(native):
        ap.error(f"--executor runs native decoders only: choose from {', '.join(native)}")
    transport_args = dict(kv.split("=", 1) for kv in args.transport_arg)
    print(f"{'case':8} {'decoder':10} {'N':>2} {'windows/s':>10} {'window p50 us':>13} {'LER parallel':>13} "
          f"{'LER sliding':>12} {'z':>6}")
    for name in args.cases:
        kind, d, p, decoder, window, commit = CASES[name]
        c = circuit(kind, d, p)
        dets, obs = c.compile_detector_sampler(seed=7).sample(args.shots, separate_observables=True)
        seq = SlidingWindowDecoder(c, decoder, window=2 * d, commit=d).decode_batch(dets)
        b = int((seq != obs).any(axis=1).sum())
        for n in args.workers:
            where = (dict(placement=executor_placement(args.executor, args.secret_file, n, args.transport,
                                                       transport_args)) if args.executor else
                     dict(workers=n, transport=args.transport, runs_in=args.runs_in, transport_args=transport_args))
            r = stream(c, decoder, detectors=dets, observables=obs, window=window, commit=commit, parallel_windows=True,
                       reference=False, round_timeout_ms=10000, **where).to_json()
            a, shots = r["logical_errors"], r["shots"]
            pooled = (a + b) / (2 * shots)
            z = 0.0 if pooled in (0, 1) else (a - b) / shots / math.sqrt(2 * pooled * (1 - pooled) / shots)
            print(f"{name:8} {decoder:10} {n:>2} {r['windows_per_s']:>10.0f} {r['latency_ns']['p50'] / 1e3:>13.1f} "
                  f"{a / shots:>13.4f} {b / shots:>12.4f} {z:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
