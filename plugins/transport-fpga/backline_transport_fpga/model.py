"""The engine model as a process: ``python -m backline_transport_fpga.model`` (``backline fpga model``),
and :class:`EngineModel`, which starts one for a bench or a test and leaves nothing behind.

The model stands in for the FPGA's programmable logic (docs/transport-fpga.md). It shares only
its window file with the driver.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from typing import Any

from backline_core import BacklineError, DeadlineError
from backline_core.sdk import ChildProcess, child_environment, describe_exit, from_status, interpreter, parent_pid

from .native import default_window

#: the model's default window: what the backend's `window` key defaults to
DEFAULT_WINDOW = default_window()


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The model's options (``backline fpga model`` and ``python -m backline_transport_fpga.model``)."""
    p.description = "Run the HWHS engine model: create the register window and serve it until SIGTERM or SIGINT."
    p.add_argument("--window", default=DEFAULT_WINDOW, help=f"window file to create (default {DEFAULT_WINDOW})")
    p.add_argument("--device", default="", help="verbs device of the ERNIC part (default: the first with an "
                   "active port)")
    p.add_argument("--ib-port", type=int, default=0, help="its port, from 1 (default: the first active one)")
    p.add_argument("--gid-index", type=int, default=-1, help="GID index (default: the first RoCE v2 GID with an "
                   "IPv4-mapped address)")
    p.add_argument("--mem-mib", type=int, default=16, help="DMA memory in MiB (default 16)")
    p.add_argument("--cpu", type=int, default=-1, help="pin the model's thread to this CPU")
    p.add_argument("--parent-pid", type=parent_pid, default=0, help="stop when this process exits")
    return p


def run(args: argparse.Namespace) -> int:
    """Run the model in this process until it is signalled; raise BacklineError if it cannot start."""
    if not 1 <= args.mem_mib <= 4096:
        raise BacklineError(f"--mem-mib {args.mem_mib}: give 1 to 4096")
    if not -1 <= args.gid_index <= 65535 or not 0 <= args.ib_port <= 255:
        raise BacklineError("--ib-port must be 0-255 and --gid-index -1-65535")
    if args.cpu != -1 and args.cpu not in os.sched_getaffinity(0):
        raise BacklineError(f"--cpu {args.cpu}: not a CPU this process may run on")
    from .native import model

    ffi, lib = model()
    cfg = ffi.new("hwhs_model_config *")
    window, device = ffi.new("char[]", os.fsencode(args.window)), ffi.new("char[]", args.device.encode())
    cfg.window, cfg.device = window, device
    cfg.ib_port, cfg.gid_index, cfg.mem_bytes = args.ib_port, args.gid_index, args.mem_mib << 20
    cfg.cpu, cfg.parent_pid = args.cpu, args.parent_pid
    err = ffi.new("char[512]")
    rc = lib.hwhs_model_run(cfg, err, len(err))
    if rc:
        raise from_status(rc, ffi.string(err).decode(errors="replace"))
    return 0


def main(argv: list[str] | None = None) -> int:
    from backline_core.sdk import Parser

    args = add_arguments(Parser(prog="python -m backline_transport_fpga.model")).parse_args(argv)
    return run(args)


class _ModelChild(ChildProcess):
    """The model's process: a failed start is the model's own one-line error."""

    def __init__(self, command: list[str], window: str) -> None:
        self.window = window
        super().__init__(command, name="the engine model", env=child_environment())

    def start_error(self) -> Exception:
        said = self.last_line().removeprefix("backline: error: ")
        return BacklineError(f"the engine model did not start: "
                             f"{said or f'it {describe_exit(self.proc.returncode)} and printed nothing'}")

    def deadline_error(self, timeout: float) -> DeadlineError:
        return DeadlineError(f"the engine model ({self.window}) was not ready within {timeout:g} s")


class EngineModel:
    """An engine model process with its own window, for as long as the ``with`` block runs.

    ``window`` defaults to a fresh /dev/shm name of this process's; ``device``, ``ib_port`` and
    ``gid_index`` choose the ERNIC part's verbs port, ``cpu`` pins it. Entering waits up to
    ``start_timeout`` s for its ``ready`` line (its error if it dies first); leaving stops it
    (SIGTERM, then SIGKILL) and removes a window it left.
    """

    def __init__(self, window: str | None = None, *, device: str = "", ib_port: int = 0, gid_index: int = -1,
                 mem_mib: int = 16, cpu: int | None = None, start_timeout: float = 60.0) -> None:
        self.window = window or f"/dev/shm/backline-hwhs-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.command = [*interpreter(), "-m", "backline_transport_fpga.model", "--window", self.window,
                        "--ib-port", str(ib_port), "--gid-index", str(gid_index), "--mem-mib", str(mem_mib),
                        "--parent-pid", str(os.getpid())]
        if device:
            self.command += ["--device", device]
        if cpu is not None:
            self.command += ["--cpu", str(cpu)]
        self.start_timeout = start_timeout
        self.child: ChildProcess | None = None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.child.proc if self.child is not None else None

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    def __enter__(self) -> EngineModel:
        self.child = _ModelChild(self.command, self.window)
        try:
            self.child.wait_ready(self.start_timeout)
        except BaseException:
            self.__exit__()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s; its exit status."""
        return self.child.terminate(timeout) if self.child is not None else None

    def __exit__(self, *exc: Any) -> None:
        if self.child is None:
            return
        self.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.window)  # a killed model cannot remove it


if __name__ == "__main__":
    from backline_core.sdk import one_line

    try:
        sys.exit(main())
    except BacklineError as exc:
        print(f"backline: error: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
