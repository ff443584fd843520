"""``backline executor bench``: what an executor costs, measured against a baseline in the same run.

Prints, for a local executor (and one reached over SSH with ``--ssh``):

* time from ``Executor.local()`` (or ``.ssh()``) to its ready line;
* open (connect + mutual authentication) + send_binary (ELF checks + ORC JIT link) of an object;
* a synchronous ``launch`` round trip of ``i64 add1(i64)`` (8 bytes in, 8 out) against a direct
  call of the same machine code JIT-linked in this process, both through cffi: median, P99 and
  the ratio; and against a bare loopback TCP ping-pong between two Python processes, the
  floor of any request/reply over a socket on this machine.

No threshold is asserted: the report is the product (the machines here are shared and noisy).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Sequence
from typing import Any

from backline_core.sdk import check, exit_on_stop_signals, ffi, lib, private_tempdir, summary

from .api import open_session
from .handle import Executor

_IR = """
define i64 @add1(i64 %x) {
  %r = add i64 %x, 1
  ret i64 %r
}
"""


def _object(path: str) -> bytes:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default")
    data = machine.emit_object(llvm.parse_assembly(_IR))
    with open(path, "wb") as fh:
        fh.write(data)
    return data


def _local_call(data: bytes, rounds: int) -> list[float]:
    """The baseline: the same object JIT-linked here, called through cffi like the client is."""
    import llvmlite.binding as llvm

    jit = llvm.create_lljit_compiler()
    tracker = llvm.JITLibraryBuilder().add_object_img(data).export_symbol("add1").link(jit, "bench-local")
    fn = ffi.cast("int64_t (*)(int64_t)", tracker["add1"])
    out = []
    for i in range(rounds):
        t0 = time.perf_counter_ns()
        r = fn(i)
        out.append((time.perf_counter_ns() - t0) / 1000)
        assert r == i + 1
    del tracker
    return out


def _launches(session: Any, obj: str, rounds: int) -> list[float]:
    arg = ffi.new("int64_t *")
    res = ffi.new("int64_t *")
    args = ffi.new("void *[1]", [arg])
    results = ffi.new("void *[1]", [res])
    sym, path, sig = b"add1", obj.encode(), b"i64 (i64)"
    out = []
    for i in range(rounds):
        arg[0] = i
        t0 = time.perf_counter_ns()
        check(lib.bl_executor_launch(session, sym, path, sig, args, 1, results, 1))
        out.append((time.perf_counter_ns() - t0) / 1000)
        if res[0] != i + 1:
            raise AssertionError(f"add1({i}) came back as {res[0]}")
    return out


def _tcp_floor(rounds: int) -> list[float]:
    """A bare loopback TCP ping-pong of 20 bytes with a forked echo process (Python both sides):
    the wake-ups every executor request pays, without the protocol or the call."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    address = server.getsockname()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the echo child
        try:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(64):
                conn.sendall(data)
        finally:
            os._exit(0)
    server.close()
    out = []
    try:
        with socket.create_connection(address, timeout=10) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                conn.sendall(b"x" * 20)
                conn.recv(64)
                out.append((time.perf_counter_ns() - t0) / 1000)
    finally:  # a closed connection ends the echo child; one never made leaves it in accept()
        if not out:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return out


def _decoder_object(executor: Executor, workspace: str) -> str | None:
    """The object deploy ships for a steane coprocessor over memcpy (None without an object builder,
    which backline-compiler registers)."""
    from backline_core import Controller, Coprocessor, Placement, plugins, resolve

    from .api import build_object

    if not list(plugins.names("builder")):
        return None
    node = Coprocessor(name=f"bench-exec-{os.getpid()}", coprocessor_fn="steane", executor=executor)
    resolved = resolve(Placement(controller=Controller(), transport="memcpy", coprocessors=[node]))
    path, _ = build_object(resolved.coprocessors[0], in_bytes=1, out_bytes=1, workspace=workspace)
    return path


def _shipped(address: str, path: str, rounds: int = 0) -> tuple[float, float, list[float]]:
    """Open a session, send ``path`` and (``rounds``) launch add1: (open s, send+link s, launch µs)."""
    t0 = time.perf_counter()
    session = open_session(address)
    t1 = time.perf_counter()
    try:
        check(lib.bl_executor_send_binary(session, path.encode()))
        t2 = time.perf_counter()
        launches = _launches(session, path, rounds) if rounds else []
    finally:
        check(lib.bl_executor_close(session))
    return t1 - t0, t2 - t1, launches


def measure(executor: Executor, label: str, rounds: int, obj: str, data: bytes, ready_s: float) -> list[str]:
    """The report lines for one executor."""
    lines = []
    workspace = private_tempdir("backline-exec-bench-")
    try:
        decoder = _decoder_object(executor, workspace)
        if decoder is not None:
            opened, sent, _ = _shipped(executor.address, decoder)
            lines.append(f"{label}: decoder object (steane coprocessor over memcpy, {os.path.getsize(decoder)} B): "
                         f"open {1e3 * opened:.2f} ms + send_binary and link {1e3 * sent:.2f} ms")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    opened, sent, remote = _shipped(executor.address, obj, rounds)
    local = _local_call(data, rounds)
    floor = _tcp_floor(rounds)
    r, lc, f = summary(remote, ""), summary(local, ""), summary(floor, "")
    med_r, med_l, med_f = r["median"], lc["median"], f["median"]
    return [
        f"{label}: ready in {ready_s:.3f} s; open (connect + authenticate) {1e3 * opened:.2f} ms; "
        f"send_binary + link {1e3 * sent:.2f} ms ({len(data)} B object)",
        *lines,
        f"{label}: sync launch i64 add1(i64), {rounds} rounds: median {med_r:.1f} us, P99 {r['p99']:.1f} us; "
        f"direct local call median {med_l:.2f} us, P99 {lc['p99']:.2f} us; ratio (median) {med_r / med_l:.0f}x",
        f"{label}: bare loopback TCP ping-pong (Python both sides) median {med_f:.1f} us, P99 {f['p99']:.1f} us; "
        f"launch / ping-pong (median) {med_r / med_f:.2f}x",
    ]


def main(argv: Sequence[str]) -> int:
    from .cli import _Parser  # its error() is one line, exit status 2 (cli.main prints it)

    parser = _Parser(prog="backline executor bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--ssh", metavar="[USER@]HOST", help="also measure an executor started over SSH")
    parser.add_argument("--ssh-port", type=int, default=22)
    parser.add_argument("--identity-file")
    parser.add_argument("--ssh-python", default="python3",
                        help="the remote interpreter (3.11+ with cffi, numpy, pluggy, stevedore, llvmlite)")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                        help="passed to ssh as -o OPT (repeatable)")
    args = parser.parse_args(list(argv))
    if args.rounds < 10:
        parser.error("--rounds must be at least 10")
    # SIGTERM/SIGHUP unwind the bench like Ctrl-C; the folder goes even if this process is killed
    exit_on_stop_signals()
    tmp = private_tempdir("backline-exec-bench-")
    try:
        obj = os.path.join(tmp, "add1.o")
        data = _object(obj)
        t0 = time.perf_counter()
        with Executor.local() as ex:
            ready = time.perf_counter() - t0
            for line in measure(ex, "local", args.rounds, obj, data, ready):
                print(line, flush=True)
        if args.ssh:
            user, _, host = args.ssh.rpartition("@")
            options = [o for opt in args.ssh_option for o in ("-o", opt)]
            t0 = time.perf_counter()
            with Executor.ssh(host, user=user or None, port=args.ssh_port, identity_file=args.identity_file,
                              ssh_options=options, python=args.ssh_python) as ex:
                ready = time.perf_counter() - t0
                for line in measure(ex, f"ssh {args.ssh}", args.rounds, obj, data, ready):
                    print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0
