"""One authenticated client's session: runs in its own process, forked by the supervisor.

The session owns an llvmlite ORC LLJIT. Each shipped object becomes its own JIT library
(so two objects may define the same names); launched and called functions go through a
wrapper generated per signature (:func:`.signature.build_wrapper`). A shipped object is
checked (:func:`.elf.read`) and then trial-linked in a short-lived forked child before it is
linked here, because LLVM's linker aborts (or hangs) on some malformed objects that no
structural check catches: such an object is an ERROR reply, not the session's end. Requests are served
one at a time, in order, each answered by exactly one reply; a malformed request is
answered with ERROR and ends the session. Code that crashes kills only this process; the
supervisor tells the client (CRASHED).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import select
import shutil
import signal
import socket
import stat
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm

from backline_core.sdk import ffi, lib, signal_name

from . import elf, signature, wire
from .wire import ProtocolError

log = logging.getLogger("backline.executor")

#: Undefined names the JIT linker provides itself (they are not looked up in the process).
JIT_PROVIDED = frozenset({"_GLOBAL_OFFSET_TABLE_", "__dso_handle"})
_WRAP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_ASYNC = ctypes.CFUNCTYPE(ctypes.c_int32)
#: the trial link's deadline: a base, and more for a larger object (linking runs at well over 10 MB/s)
TRIAL_LINK_BASE_S = 10.0
TRIAL_LINK_PER_MIB_S = 0.5
_TRIAL_OUTPUT_BYTES = 65536  # what is kept of the trial child's messages (LLVM's, on stderr): its end
_PR_SET_PDEATHSIG = 1
_MACHINES = {"x86_64": elf.EM_X86_64, "amd64": elf.EM_X86_64, "aarch64": elf.EM_AARCH64, "arm64": elf.EM_AARCH64}


def host_machine(triple: str | None = None) -> int:
    """ELF e_machine of the code this process runs; ValueError on an unsupported host."""
    triple = triple or llvm.get_process_triple()
    arch = triple.split("-", 1)[0]
    if arch not in _MACHINES:
        raise ValueError(f"the executor runs on x86-64 and aarch64 hosts; this one is {triple}")
    return _MACHINES[arch]


class SessionError(Exception):
    """A request that failed: answered with ERROR ``status`` and the message; the session goes on."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Object:
    name: str
    library: str  # the JIT library's unique name
    info: elf.ElfInfo
    link: Any  # the ResourceTracker of the link: keeps the library alive
    symbols: dict[str, tuple[Any, int]] = field(default_factory=dict)  # symbol -> (lookup tracker, address)


@dataclass
class _Launch:
    symbol: str
    object: str
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 0
    message: str = ""
    failure: str = ""  # set when the server itself failed around the call


def _shorten(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _last_error() -> str:
    text = lib.bl_last_error()
    return "" if text == ffi.NULL else ffi.string(text).decode("utf-8", errors="replace")


class Session:
    """The state of one session; :meth:`serve` runs it to its end on ``sock``.

    ``libraries`` maps every name a CALL may use for a loaded library (its ``--preload``
    path, its file name, ``"libbackline"``) to its ctypes handle. ``asset_dir`` is a
    private directory for assets: CLOSE removes it (the supervisor does too, however the
    session ends).
    """

    def __init__(self, sock: socket.socket, *, libraries: Mapping[str, ctypes.CDLL], asset_dir: str) -> None:
        self.sock = sock
        self.libraries = dict(libraries)
        self.asset_dir = asset_dir
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.triple = llvm.get_process_triple()
        self.machine = host_machine(self.triple)
        self.jit = llvm.create_lljit_compiler(suppress_errors=True)
        self.data_layout = str(self.jit.target_data)
        self.process = ctypes.CDLL(None)
        self.names: set[str] = set()
        self.objects: dict[str, _Object] = {}
        self.assets: dict[str, str] = {}
        self.wrappers: dict[str, tuple[Any, Callable]] = {}
        self.launches: dict[int, _Launch] = {}
        self.next_token = 1
        self.serial = 0
        self.handlers: dict[int, Callable[[bytes], tuple[int, bytes]]] = {
            lib.BL_EXEC_SEND_BINARY: self.send_binary,
            lib.BL_EXEC_LAUNCH: self.launch,
            lib.BL_EXEC_LAUNCH_ASYNC: self.launch_async,
            lib.BL_EXEC_AWAIT: self.await_,
            lib.BL_EXEC_CALL: self.call,
        }

    # -- the loop ---------------------------------------------------------------------

    def serve(self) -> int:
        """Serve requests until CLOSE, EOF or a protocol error; returns the exit status for the process."""
        try:
            while True:
                try:
                    frame_type, body = wire.read_frame(self.sock)
                except wire.PeerClosed:
                    return 0
                except ProtocolError as exc:
                    self._final_error(exc.status, str(exc))
                    return 0
                if frame_type == lib.BL_EXEC_CLOSE:
                    return self.close(body)
                handler = self.handlers.get(frame_type)
                if handler is None:
                    self._final_error(lib.BL_EINVAL, f"{wire.type_name(frame_type)} is not a request of "
                                      f"protocol version {lib.BL_EXECUTOR_PROTOCOL_VERSION}")
                    return 0
                try:
                    reply = handler(body)
                except SessionError as exc:
                    reply = (lib.BL_EXEC_ERROR, wire.error_body(exc.status, str(exc)))
                except ProtocolError as exc:  # a malformed body: answer, then end the session
                    self._final_error(exc.status, f"malformed {wire.type_name(frame_type)} request: {exc}")
                    return 0
                except Exception as exc:  # never die silently: the client hears about it
                    what = wire.type_name(frame_type)
                    log.error("session %d: %s failed:\n%s", os.getpid(), what, traceback.format_exc())
                    reply = (lib.BL_EXEC_ERROR, wire.error_body(
                        lib.BL_EBACKEND, f"the executor failed serving {what}: {type(exc).__name__}: {exc}"))
                try:
                    wire.send_frame(self.sock, *reply)
                except OSError:
                    return 0  # the client went away or stopped reading
        finally:
            if not any(not launch.done.is_set() for launch in self.launches.values()):
                self.drop()  # with launches running their code must stay mapped; the process exit frees it

    def _final_error(self, status: int, message: str) -> None:
        """ERROR as the session's last word (best effort), then a short drain so the client can read it."""
        try:
            wire.send_frame(self.sock, lib.BL_EXEC_ERROR, wire.error_body(status, message), timeout_s=1.0)
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 1.0
            drained = 0
            while drained < (1 << 24) and time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass

    def drop(self) -> None:
        """Release the JIT libraries and the JIT (launched code must not be running)."""
        trackers = [t for obj in self.objects.values() for t in [*(t for t, _ in obj.symbols.values()), obj.link]]
        trackers += [t for t, _ in self.wrappers.values()]
        self.objects.clear()
        self.wrappers.clear()
        for tracker in trackers:
            try:
                tracker.close()
            except RuntimeError as exc:  # the process ends soon anyway; say so, do not stop here
                log.warning("session %d: dropping JIT library %s failed: %s", os.getpid(), tracker.name, exc)
        if not self.jit.closed:
            self.jit.close()

    def _unique(self, stem: str) -> str:
        self.serial += 1
        return f"{stem}-{self.serial}"

    # -- requests ---------------------------------------------------------------------

    def send_binary(self, body: bytes) -> tuple[int, bytes]:
        r = wire.Reader(body, "SEND_BINARY")
        kind = r.u8("kind")
        name = r.str("name")
        data = r.rest()
        if not name:
            raise SessionError(lib.BL_EINVAL, "SEND_BINARY with an empty name")
        if name in self.names:
            raise SessionError(lib.BL_ESTATE, f"{name} was already sent on this session (each name at most once)")
        if len(data) > lib.BL_EXECUTOR_MAX_OBJECT_BYTES:
            raise SessionError(lib.BL_ETOOBIG,
                               f"{name} is {len(data)} bytes; at most {lib.BL_EXECUTOR_MAX_OBJECT_BYTES}")
        if kind == lib.BL_EXEC_KIND_OBJECT:
            self.objects[name] = self._link(name, data)
        elif kind == lib.BL_EXEC_KIND_ASSET:
            self.assets[name] = self._store_asset(name, data)
        else:
            raise SessionError(lib.BL_EINVAL, f"SEND_BINARY of {name}: unknown kind {kind} "
                               f"({lib.BL_EXEC_KIND_OBJECT} = object, {lib.BL_EXEC_KIND_ASSET} = asset)")
        self.names.add(name)
        return lib.BL_EXEC_OK, b""

    def _check_object(self, name: str, data: bytes) -> elf.ElfInfo:
        here = elf.machine_name(self.machine)
        try:
            head = elf.read_header(data)
        except ValueError as exc:
            raise SessionError(lib.BL_EINVAL, f"object {name} is not a valid ELF object: {exc}") from None
        if head.elf_class != 2:
            raise SessionError(lib.BL_EINVAL, f"object {name} is a 32-bit ELF file ({head.machine_name}); "
                               f"this executor runs 64-bit {here} code")
        if not head.little_endian:
            raise SessionError(lib.BL_EINVAL, f"object {name} is big-endian ({head.machine_name}); "
                               f"this executor runs {here} code")
        if head.machine != self.machine:
            raise SessionError(lib.BL_EINVAL, f"object {name} is for {head.machine_name} (ELF machine {head.machine}); "
                               f"this executor runs {here} code")
        if head.type != elf.ET_REL:
            kind = elf.TYPE_NAMES.get(head.type, f"ELF type {head.type}")
            raise SessionError(lib.BL_EINVAL, f"object {name} is {kind}, not a relocatable object (ET_REL); "
                               "send the .o file")
        try:
            return elf.read(data)
        except ValueError as exc:
            raise SessionError(lib.BL_EINVAL, f"object {name} is not a valid relocatable object: {exc}") from None

    def _resolves(self, symbol: str) -> bool:
        try:
            self.process[symbol]  # dlsym in the process's global scope
        except AttributeError:
            return False
        return True

    def _link(self, name: str, data: bytes) -> _Object:
        info = self._check_object(name, data)
        missing = [s for s in info.undefined if s not in JIT_PROVIDED and not self._resolves(s)]
        if missing:
            raise SessionError(lib.BL_ENOTFOUND, f"object {name}: undefined symbols not found in the executor: "
                               f"{_shorten(missing)} (preload the library that defines them: --preload LIB)")
        library = self._unique("object")
        self._trial_link(name, data, info, library)
        try:
            tracker = self._link_into(self.jit, data, info, library)
        except Exception as exc:  # noqa: BLE001 - llvmlite raises RuntimeError, or fails to decode LLVM's text
            raise SessionError(lib.BL_EINVAL, f"object {name} could not be linked: {exc}") from None
        return _Object(name=name, library=library, info=info, link=tracker)

    @staticmethod
    def _link_into(jit: Any, data: bytes, info: elf.ElfInfo, library: str) -> Any:
        builder = llvm.JITLibraryBuilder().add_object_img(data).add_current_process()
        for symbol in info.defined:
            builder.export_symbol(symbol)  # materialises now, so a bad object fails here, not at launch
        return builder.link(jit, library)

    def _trial_link(self, name: str, data: bytes, info: elf.ElfInfo, library: str) -> None:
        """Link the object in a forked child (a copy of this session, thrown away): SessionError
        if it fails there, dies there (LLVM aborts on some malformed objects) or does not finish."""
        limit = TRIAL_LINK_BASE_S + TRIAL_LINK_PER_MIB_S * len(data) / (1 << 20)
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(r)
            os.close(w)
            raise SessionError(lib.BL_EBACKEND, f"object {name}: no process for its trial link: {exc}") from None
        if pid == 0:  # the child: link, say how it went, never return
            code = 1
            try:
                os.close(r)
                ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                os.close(self.sock.fileno())  # the client's connection is not the child's to touch
                os.dup2(w, 2)  # what LLVM prints before it aborts comes back through the pipe
                try:
                    self._link_into(self.jit, data, info, library)
                    code = 0
                except BaseException as exc:  # noqa: BLE001 - every failure is reported, as text
                    os.write(w, f"\n{exc}".encode("utf-8", errors="replace")[-_TRIAL_OUTPUT_BYTES:])
            finally:
                os._exit(code)
        os.close(w)
        output = bytearray()
        deadline = time.monotonic() + limit
        timed_out = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([r], [], [], left)
                if not ready:
                    continue
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                output += chunk
                del output[:-_TRIAL_OUTPUT_BYTES]
        finally:
            os.close(r)
            if timed_out:
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        said = output.decode("utf-8", errors="replace").strip()
        said = said.splitlines()[-1].strip() if said else ""
        if timed_out:
            raise SessionError(lib.BL_EINVAL, f"object {name} is not a valid relocatable object: LLVM's linker did "
                               f"not finish linking it within {limit:g} s")
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            raise SessionError(lib.BL_EINVAL, f"object {name} is not a valid relocatable object: LLVM's linker died "
                               f"of {signal_name(number)} on it" + (f" ({said})" if said else "")
                               + "; nothing was linked, the session goes on")
        if os.waitstatus_to_exitcode(status) != 0:
            raise SessionError(lib.BL_EINVAL, f"object {name} could not be linked: {said or 'the linker failed'}")

    def _store_asset(self, name: str, data: bytes) -> str:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(name))[:100] or "asset"
        if not self.assets:  # made on demand: a session without assets leaves nothing on disk
            private_dir(os.path.dirname(self.asset_dir))
            private_dir(self.asset_dir)
        path = os.path.join(self.asset_dir, f"{len(self.assets):05d}-{stem}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return path

    def _object(self, name: str) -> _Object:
        obj = self.objects.get(name)
        if obj is not None:
            return obj
        if name in self.assets:
            raise SessionError(lib.BL_EINVAL, f"{name} was sent as an asset, not an object; it cannot be launched")
        raise SessionError(lib.BL_ENOTFOUND, f"object {name} was not sent on this session (send it first)")

    def _address(self, obj: _Object, symbol: str) -> int:
        if symbol not in obj.info.defined:
            raise SessionError(lib.BL_ENOTFOUND, f"object {obj.name} does not define symbol {symbol!r} "
                               f"(it defines: {_shorten(sorted(obj.info.defined)) or 'nothing'})")
        cached = obj.symbols.get(symbol)
        if cached is None:
            try:
                tracker = self.jit.lookup(obj.library, symbol)
            except RuntimeError as exc:
                raise SessionError(lib.BL_ENOTFOUND,
                                   f"object {obj.name}: symbol {symbol!r} did not resolve: {exc}") from None
            cached = obj.symbols[symbol] = (tracker, tracker[symbol])  # the tracker keeps the library: keep it
        return cached[1]

    def _signature(self, text: str, nargs: int, what: str) -> signature.Signature:
        try:
            sig = signature.parse(text)
        except signature.SignatureError as exc:
            raise SessionError(lib.BL_EINVAL, f"{what}: {exc}") from None
        if nargs != sig.nargs:
            raise SessionError(lib.BL_EINVAL, f"{what}: {nargs} arguments sent, but the signature {sig.text!r} "
                               f"has {sig.nargs} parameters")
        return sig

    def _wrapper(self, sig: signature.Signature) -> Callable:
        entry = self.wrappers.get(sig.text)
        if entry is None:
            module = signature.build_wrapper(sig, self.triple, self.data_layout)
            tracker = (llvm.JITLibraryBuilder().add_ir(str(module)).export_symbol("wrap")
                       .link(self.jit, self._unique("wrap")))
            entry = self.wrappers[sig.text] = (tracker, _WRAP(tracker["wrap"]))
        return entry[1]

    def _invoke(self, sig: signature.Signature, address: int, blob: bytes, what: str) -> bytes:
        """Call ``address`` with the args blob's values through the wrapper; the results blob."""
        try:
            values = signature.unpack_args(sig, blob)
        except signature.SignatureError as exc:
            raise SessionError(lib.BL_EINVAL, f"{what}: {exc}") from None
        wrap = self._wrapper(sig)
        keep: list[Any] = []  # every cell the call points into stays alive until it returns
        argv = (ctypes.c_void_p * max(1, sig.nargs))()
        buffers: list[tuple[Any, int]] = []
        for i, (t, value) in enumerate(zip(sig.params, values)):
            cell = (ctypes.c_char * max(1, len(value)))()
            ctypes.memmove(cell, value, len(value))
            keep.append(cell)
            if i in sig.buffer_params:
                slot = ctypes.c_void_p(ctypes.addressof(cell))  # the executor-side copy's address
                keep.append(slot)
                buffers.append((cell, len(value)))
                argv[i] = ctypes.addressof(slot)
            else:
                argv[i] = ctypes.addressof(cell)
        results = [(ctypes.c_char * signature.size_of(t))() for t in sig.results]
        resv = (ctypes.c_void_p * max(1, sig.nresults))(*[ctypes.addressof(c) for c in results])
        wrap(address, ctypes.addressof(argv), ctypes.addressof(resv))
        blob = signature.pack_results(sig, [c.raw for c in results], [c.raw[:n] for c, n in buffers])
        if len(blob) > lib.BL_EXECUTOR_MAX_ARGS_BYTES:
            raise SessionError(lib.BL_ETOOBIG, f"{what}: the results are {len(blob)} bytes; "
                               f"at most {lib.BL_EXECUTOR_MAX_ARGS_BYTES} fit in a RESULT")
        return blob

    def launch(self, body: bytes) -> tuple[int, bytes]:
        r = wire.Reader(body, "LAUNCH")
        symbol, object_name, text = r.str("symbol"), r.str("object"), r.str("signature")
        nargs = r.u32("nargs")
        blob = r.rest()
        what = f"LAUNCH of {symbol} ({object_name})"
        address = self._address(self._object(object_name), symbol)
        sig = self._signature(text, nargs, what)
        return lib.BL_EXEC_RESULT, self._invoke(sig, address, blob, what)

    def call(self, body: bytes) -> tuple[int, bytes]:
        r = wire.Reader(body, "CALL")
        symbol, library, text = r.str("symbol"), r.str("library"), r.str("signature")
        nargs, num_input = r.u32("nargs"), r.u32("num_input_args")
        blob = r.rest()
        what = f"CALL of {symbol} ({library})"
        handle = self.libraries.get(library)
        if handle is None:
            loaded = sorted({h._name for h in self.libraries.values()} | {"libbackline"})
            raise SessionError(lib.BL_ENOTFOUND, f"library {library!r} is not loaded in the executor; loaded: "
                               f"{', '.join(loaded)} (name one by path or file name, or start the executor "
                               "with --preload)")
        try:
            address = ctypes.cast(handle[symbol], ctypes.c_void_p).value
        except AttributeError:
            raise SessionError(lib.BL_ENOTFOUND, f"library {library} has no symbol {symbol!r}") from None
        sig = self._signature(text, nargs, what)
        if num_input > nargs:
            raise SessionError(lib.BL_EINVAL, f"{what}: num_input_args {num_input} is more than nargs {nargs}")
        return lib.BL_EXEC_RESULT, self._invoke(sig, address, blob, what)

    def launch_async(self, body: bytes) -> tuple[int, bytes]:
        r = wire.Reader(body, "LAUNCH_ASYNC")
        symbol, object_name = r.str("symbol"), r.str("object")
        r.end()
        fn = _ASYNC(self._address(self._object(object_name), symbol))
        token = self.next_token
        self.next_token += 1
        launch = _Launch(symbol=symbol, object=object_name)

        def run() -> None:
            try:
                status = fn()
                launch.status = status
                if status != 0:  # read on this thread, right after the call: bl_last_error is thread-local
                    launch.message = _last_error()
            except BaseException as exc:  # noqa: BLE001 - reported to the client through AWAIT
                launch.failure = f"{type(exc).__name__}: {exc}"
            finally:
                launch.done.set()

        launch.thread = threading.Thread(target=run, name=f"launch-{token}-{symbol}", daemon=True)
        launch.thread.start()  # a thread that cannot start leaves no token behind
        self.launches[token] = launch
        return lib.BL_EXEC_TOKEN, wire.pack_u64(token)

    def await_(self, body: bytes) -> tuple[int, bytes]:
        r = wire.Reader(body, "AWAIT")
        token, timeout_ms = r.u64("token"), r.u32("timeout_ms")
        r.end()
        launch = self.launches.get(token)
        if launch is None:
            raise SessionError(lib.BL_ESTATE,
                               f"token {token} names no launch in flight on this session (already awaited?)")
        if not launch.done.wait(timeout_ms / 1000):
            raise SessionError(lib.BL_ETIMEOUT, f"launch {token} ({launch.symbol} of {launch.object}) "
                               f"is still running after {timeout_ms} ms")
        del self.launches[token]
        what = f"{launch.symbol} of {launch.object} (token {token})"
        if launch.failure:
            raise SessionError(lib.BL_EFN, f"the executor failed running {what}: {launch.failure}")
        if launch.status == 0:
            return lib.BL_EXEC_OK, b""
        name = lib.bl_status_name(launch.status)
        name = ffi.string(name).decode() if name != ffi.NULL else "?"
        raise SessionError(launch.status, launch.message or f"{what} returned status {launch.status} ({name})")

    def close(self, body: bytes) -> int:
        """CLOSE: wait for async launches, drop everything, reply; the session ends."""
        if body:
            self._final_error(lib.BL_EINVAL, "malformed CLOSE request: its body must be empty")
            return 0
        deadline = time.monotonic() + wire.CLOSE_TIMEOUT_S
        running = []
        for launch in self.launches.values():
            if not launch.done.wait(max(0.0, deadline - time.monotonic())):
                running.append(launch)
        if running:
            reply = (lib.BL_EXEC_ERROR, wire.error_body(lib.BL_ETIMEOUT, (
                f"{len(running)} async launches still running after {lib.BL_EXECUTOR_CLOSE_TIMEOUT_MS} ms "
                f"({_shorten([l.symbol for l in running])}); the session process exits anyway")))
        else:
            self.drop()
            self.assets.clear()
            shutil.rmtree(self.asset_dir, ignore_errors=True)
            reply = (lib.BL_EXEC_OK, b"")
        try:
            wire.send_frame(self.sock, *reply)
        except OSError:
            pass
        return 0


def private_dir(path: str) -> None:
    """Make ``path`` a directory only this user can enter, or accept one that already is
    (another session of this server made it); anything else there is refused."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise SessionError(lib.BL_EBACKEND, f"the asset folder {path} exists and is not a private folder of this "
                           "user; refusing to store assets there")


def serve(sock: socket.socket, *, libraries: Mapping[str, ctypes.CDLL], asset_dir: str) -> int:
    """Run one session on an authenticated socket; the exit status for the session process."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, option):  # a dead peer is noticed in about 2 minutes, not 2 hours
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    try:
        session = Session(sock, libraries=libraries, asset_dir=asset_dir)
    except Exception as exc:
        log.error("session %d could not start:\n%s", os.getpid(), traceback.format_exc())
        try:
            wire.send_frame(sock, lib.BL_EXEC_ERROR, wire.error_body(
                lib.BL_EBACKEND, f"the executor could not start a session: {type(exc).__name__}: {exc}"), timeout_s=1.0)
        except OSError:
            pass
        return 1
    return session.serve()
