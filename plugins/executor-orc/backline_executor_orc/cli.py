"""``backline executor serve ...``: start the executor server (see :mod:`.server`).

Every user error (bad option, a non-loopback bind without ``--allow-remote``, an
unusable secret, a library that does not load, an address in use) is one line on
stderr and exit status 2. Once ready, the server prints one line on stdout::

    backline-executor ready address=127.0.0.1:45123 pid=1234 protocol=1 triple=x86_64-unknown-linux-gnu
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import logging
import os
import re
import shutil
import socket
import stat
import sys

PROG = "backline executor"
DEFAULT_BIND = "127.0.0.1:0"


class UsageError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run compiled code shipped by Backline programs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser(
        "serve",
        help="serve executor sessions on a TCP address",
        description="Serve executor sessions: authenticate each connection with the shared secret, "
        "then run the objects it sends in a session process of its own.",
    )
    serve.add_argument("--bind", default=DEFAULT_BIND, metavar="HOST:PORT",
                       help=f"address to listen on (default {DEFAULT_BIND}; port 0 = a free port; IPv6 as [::1]:PORT)")
    serve.add_argument("--secret-file", metavar="F",
                       help="file holding the shared secret (mode 600); default: env BACKLINE_EXECUTOR_SECRET")
    serve.add_argument("--preload", action="append", default=[], metavar="LIB",
                       help="shared library to load (RTLD_GLOBAL) for objects' undefined symbols and CALL; repeatable")
    serve.add_argument("--allow-remote", action="store_true",
                       help="allow binding a non-loopback address (anyone who can reach it may try to authenticate)")
    serve.add_argument("--parent-pid", type=__import__("backline_core.sdk", fromlist=["parent_pid"]).parent_pid, metavar="PID", help="stop when this process exits")
    serve.add_argument("--max-sessions", type=int, default=64, metavar="N",
                       help="most sessions at once (default 64)")
    serve.add_argument("--log-file", metavar="F", help="append the log here instead of stderr")
    serve.add_argument("--remove-at-exit", metavar="DIR",
                       help="a private folder of yours (mode 700) to remove when the server stops, however it is "
                            "told to (Executor.local's folder: its secret and log)")
    sub.add_parser("bench", help="measure an executor against a direct call (backline executor bench --help)",
                   add_help=False)
    return parser


def parse_bind(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` or ``"[V6]:PORT"`` -> (host, port); UsageError otherwise."""
    m = re.fullmatch(r"\[([^\[\]]+)\]:(\d{1,5})", text) or re.fullmatch(r"([^:\[\]]+):(\d{1,5})", text)
    if not m:
        raise UsageError(f"--bind {text!r}: give HOST:PORT (IPv6 in brackets, e.g. [::1]:9000)")
    host, port = m.group(1), int(m.group(2))
    if port > 65535:
        raise UsageError(f"--bind {text!r}: port {port} is not in 0..65535")
    return host, port


def resolve_bind(host: str, port: int) -> tuple[int, tuple]:
    """(address family, socket address) to bind; UsageError if the host does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise UsageError(f"--bind {host}: cannot resolve the host ({exc.strerror})") from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def is_loopback(sockaddr: tuple) -> bool:
    """Whether a resolved address is a loopback one."""
    try:
        return ipaddress.ip_address(sockaddr[0].split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _preload(paths: list[str]) -> dict[str, ctypes.CDLL]:
    """Load libbackline and each ``--preload`` RTLD_GLOBAL; name -> handle for CALL."""
    from backline_core import get_library

    libraries: dict[str, ctypes.CDLL] = {}
    core = ctypes.CDLL(get_library(), mode=ctypes.RTLD_GLOBAL)  # global: objects' bl_* symbols resolve
    for name in ("libbackline", get_library(), os.path.basename(get_library())):
        libraries[name] = core
    for path in paths:
        try:
            handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise UsageError(f"--preload {path}: cannot load it ({exc})") from None
        for name in (path, os.path.abspath(path), os.path.basename(path)):
            libraries.setdefault(name, handle)
    return libraries


def _logging(log_file: str | None) -> list[int]:
    """Set up the log (stderr or the file); the descriptors session processes must keep."""
    if log_file:
        try:
            handler: logging.Handler = logging.FileHandler(log_file, mode="a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--log-file {log_file}: cannot open it ({exc.strerror or exc})") from None
        keep = [handler.stream.fileno()]
    else:
        handler, keep = logging.StreamHandler(sys.stderr), []
    handler.setFormatter(logging.Formatter("%(asctime)s backline-executor[%(process)d] %(message)s"))
    log = logging.getLogger("backline.executor")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    return keep


def serve(args: argparse.Namespace) -> int:
    """Set everything up (any failure is a UsageError), print the ready line, serve."""
    host, port = parse_bind(args.bind)
    family, sockaddr = resolve_bind(host, port)
    if not is_loopback(sockaddr) and not args.allow_remote:
        raise UsageError(f"--bind {args.bind} is not a loopback address; anyone who can reach it may try to "
                         "authenticate: pass --allow-remote to serve other hosts")
    if args.max_sessions < 1:
        raise UsageError(f"--max-sessions {args.max_sessions}: give at least 1")
    if args.parent_pid is not None:
        if args.parent_pid <= 0:
            raise UsageError(f"--parent-pid {args.parent_pid}: not a process id")
        try:
            os.kill(args.parent_pid, 0)
        except ProcessLookupError:
            raise UsageError(f"--parent-pid {args.parent_pid}: no such process") from None
        except PermissionError:
            pass

    from backline_core.sdk import lib

    from .secret import SecretError, load_secret

    try:
        key = load_secret(args.secret_file)
    except SecretError as exc:
        raise UsageError(str(exc)) from None
    libraries = _preload(args.preload)
    keep = _logging(args.log_file)

    import llvmlite.binding as llvm

    from . import server  # imports the session code too, before any fork

    try:
        server.session.host_machine()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(sockaddr)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise UsageError(f"--bind {args.bind}: cannot listen there ({exc.strerror or exc})") from None
    bound = listener.getsockname()
    supervisor = server.Supervisor(listener, key, libraries, parent_pid=args.parent_pid,
                                   max_sessions=args.max_sessions, keep_fds=keep)
    address = server.format_address(bound[0], bound[1])
    logging.getLogger("backline.executor").info(
        "listening on %s (protocol %d, %d preloaded libraries)", address, lib.BL_EXECUTOR_PROTOCOL_VERSION,
        len(args.preload))
    line = (f"backline-executor ready address={address} pid={os.getpid()} "
            f"protocol={lib.BL_EXECUTOR_PROTOCOL_VERSION} triple={llvm.get_process_triple()}")
    try:
        return supervisor.run(on_ready=lambda: print(line, flush=True))
    finally:
        if args.remove_at_exit:
            remove_private_dir(args.remove_at_exit)


def remove_private_dir(path: str) -> None:
    """Remove ``path`` if it is a real directory owned by this user with no group/other access."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # already gone (the handle's close got there first)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
        shutil.rmtree(path, ignore_errors=True)
    else:
        logging.getLogger("backline.executor").warning(
            "--remove-at-exit %s: not a private folder of this user; left in place", path)


def main(argv: list[str]) -> int:
    """``backline executor ARGS``; returns the exit status (2 for a user error, printed as one line)."""
    where = f"{PROG} serve" if list(argv[:1]) == ["serve"] else PROG
    try:
        if list(argv[:1]) == ["bench"]:
            from .bench import main as bench

            return bench(list(argv[1:]))
        args = _parser().parse_args(argv)
        if args.command != "serve":
            raise UsageError("give a command: serve or bench (see --help)")
        return serve(args)
    except UsageError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr)
        return 2
