"""Listing 3 with the decoder in an executor reached over SSH; only the placement changes.

``Executor.ssh`` logs in (key login only), deploys wheels of backline-core,
backline-executor-orc and the memcpy transport into a fresh remote workspace, starts
``backline executor serve`` there and forwards a local port to it. The compiled program ships
the decoder's code to it. Over SSH to this machine (``--host 127.0.0.1``) the memcpy
transport still joins the two processes; for another machine use a transport that crosses
machines. The samples must equal the in-process run's.

    python examples/ghz_executor_ssh.py --host 127.0.0.1 --user root --port 22 \\
        --identity-file ~/.ssh/id_ed25519 --remote-python "$(command -v python)"

The remote interpreter needs Python 3.11+ with the core's and llvmlite's dependencies
(llvmlite, cffi, numpy, pluggy, stevedore); the wheels the handle ships are installed
without dependencies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from backline_compiler.demos.ghz_steane import device, run
from backline_executor_orc.handle import Executor

MEMCPY = Path(__file__).resolve().parents[1] / "plugins" / "transport-memcpy"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user")
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--identity-file")
    parser.add_argument("--ssh-arg", action="append", default=[], metavar="ARG",
                        help="passed to ssh as is, e.g. --ssh-arg=-F --ssh-arg=CONFIG (repeatable)")
    parser.add_argument("--remote-python", default="python3",
                        help="the remote interpreter (3.11+, with llvmlite, cffi, numpy, pluggy, stevedore)")
    parser.add_argument("--shots", type=int, default=10)
    args = parser.parse_args(argv)
    here = run(device("null.qubit"), args.shots)
    with Executor.ssh(args.host, user=args.user, port=args.port, identity_file=args.identity_file,
                      ssh_options=args.ssh_arg, python=args.remote_python, packages=[str(MEMCPY)]) as ex:
        print(f"executor on {ex.host} through {ex.address}, ready in {ex.ready_seconds:.1f} s")
        there = run(device("null.qubit", executor=ex), args.shots)
    print("samples in process:    ", here.samples.tolist())
    print("samples in the executor:", there.samples.tolist())
    print(f"decoder over SSH: {there.rtt_text}")
    same = np.array_equal(here.samples, there.samples)
    print("samples identical" if same else "samples DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
