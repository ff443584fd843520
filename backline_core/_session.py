"""Sessions: the Python face of the native session runtime.

A session is one side of a controller/coprocessor pair, registered under
``(role, key)``. Its lifecycle is enforced natively: connect, alloc_memory,
exchange_keys, establish_channel, then set_message_sizes (controller) or
set_coprocessor_fn (coprocessor), start, rounds, stop, destroy.

>>> from backline_core import Session, plugins
>>> if "memcpy" in plugins.names("transport"):
...     with Session.open("memcpy", "coprocessor", "doc", functions=["echo"], runs_in="controller-thread") as cop, \\
...          Session.open("memcpy", "controller", "doc", in_bytes=8, out_bytes=8) as ctl:
...         assert ctl.round(b"syndrome") == b"syndrome"
"""

from __future__ import annotations

import time
from threading import get_ident
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import _plugins as plugins
from ._coprocessor_function import CoprocessorFunction
from ._errors import InvalidArgumentError, LifecycleError, PlacementError, short_repr
from ._bound_function import BoundFunction
from ._abi import check, ffi, lib
from ._placement import RUNS_IN

ROLES = {"controller": lib.BL_CONTROLLER, "coprocessor": lib.BL_COPROCESSOR}

_bl_round = lib.bl_round  # bound once: the Python round path is per-round


def resolve_function(fn: str | CoprocessorFunction | Any) -> CoprocessorFunction:
    """A CoprocessorFunction from a decoder plugin name, a function object, or a callable."""
    if isinstance(fn, CoprocessorFunction):
        return fn
    if isinstance(fn, str):
        return plugins.get("decoder", fn).build()
    if callable(fn):
        return CoprocessorFunction(name=getattr(fn, "__name__", "python"), python=fn)
    raise PlacementError(f"{fn!r} is not a coprocessor function: pass a decoder name, a CoprocessorFunction or a callable")


def c_string(value: str, what: str) -> bytes:
    """``value`` encoded for C; a NUL inside would silently end the string there, so it is refused."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgumentError(f"{what} {value!r} contains a NUL character, where C would cut it short; remove it")
    return value.encode()


def runs_in_code(role: str, runs_in: str | None) -> int:
    """The ``bl_runs_in`` value for a session: a coprocessor's place, or where a controller expects it."""
    if runs_in is None:
        return lib.BL_RUNS_THREAD if role == "coprocessor" else lib.BL_RUNS_ANY
    if runs_in not in RUNS_IN:
        raise InvalidArgumentError(f"runs_in={runs_in!r} is not a place; use one of {', '.join(map(repr, RUNS_IN))}")
    return RUNS_IN[runs_in]


class Session:
    """One side of a controller/coprocessor pair (see the module docstring).

    A session's calls run on one thread at a time (a controller's second thread gets a
    KeyTakenError while the first has a call or rounds in flight); :meth:`stop` and
    :meth:`destroy` may come from any thread but one running this session's coprocessor
    function: a call in progress elsewhere returns a LifecycleError first.
    """

    def __init__(self, backend_library: str, role: str, key: str, config: str = "",
                 runs_in: str | None = None) -> None:
        if role not in ROLES:
            raise InvalidArgumentError(f"role must be 'controller' or 'coprocessor', not {role!r}")
        self._s = None
        self._calls = 0  # calls in progress (other threads), so destroy waits for them
        args = (c_string(backend_library, "backend library"), ROLES[role], c_string(key, "session key"),
                c_string(config, "configuration"), runs_in_code(role, runs_in))
        out = ffi.new("bl_session **")
        check(lib.bl_session_create(*args, out))
        self._s = out[0]
        self.role, self.key, self.config, self.runs_in = role, key, config, runs_in
        self._bound: list[BoundFunction] = []  # functions (and contexts) that must outlive the session
        self._out = ffi.new("uint8_t[]", 1)
        self._out_len = ffi.new("uint32_t *")
        self._reply_ptr = ffi.new("const uint8_t **")
        # per thread: (payload, out, in view, in len, out view, out cap, out_len) of the buffers
        # last passed to round_into, and round's reply buffer. Per thread, so a second thread
        # (which the runtime refuses) never swaps a view or a reply under the first.
        self._views: dict[int, tuple[Any, ...]] = {}
        self._round_out: dict[int, Any] = {}

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(cls, transport: str, role: str, key: str, config: str = "", hardware: str = "cpu",
               runs_in: str | None = None) -> Session:
        """Create a session on the backend that ``transport`` provides for (hardware, role).

        A coprocessor's ``runs_in`` defaults to the transport's first; the transport must support it."""
        record = plugins.transport_backend(transport, hardware, role)
        if role == "coprocessor":
            runs_in = runs_in or record.runs_in[0]
            if runs_in not in record.runs_in:
                raise PlacementError(
                    f"transport {transport!r} ({record.distribution}) runs coprocessors in "
                    f"{', '.join(record.runs_in)}, not {runs_in!r}"
                )
        return cls(record.library(hardware, role), role, key, config, runs_in)

    @classmethod
    def open(cls, transport: str, role: str, key: str, *, config: str = "", hardware: str = "cpu",
             runs_in: str | None = None, in_bytes: int = 0, out_bytes: int = 0,
             functions: Iterable[str | CoprocessorFunction | Any] = ()) -> Session:
        """Create a session and bring it up to started (controller: ``in_bytes``/``out_bytes``;
        coprocessor: ``functions``, each a function or a ``(function, decoder_ids)`` pair)."""
        session = cls.create(transport, role, key, config, hardware, runs_in)
        try:
            session.connect()
            session.alloc_memory()
            session.exchange_keys()
            session.establish_channel()
            if role == "controller":
                session.set_message_sizes(in_bytes, out_bytes)
            else:
                for fn in functions:
                    # a bare function binds the ids it declares; (fn, ids) chooses them
                    session.set_coprocessor_fn(*fn) if isinstance(fn, tuple) else session.set_coprocessor_fn(fn)
            session.start()
        except BaseException:
            session.destroy()
            raise
        return session

    # -- lifecycle ----------------------------------------------------------------------

    def connect(self) -> None:
        self._call(lib.bl_connect)

    def connect_async(self) -> int:
        """Start connect on a worker thread; returns a token for :meth:`await_step`."""
        return self._call(lib.bl_connect_async)

    def exchange_keys_async(self) -> int:
        """Start alloc_memory + exchange_keys on a worker thread; returns a token."""
        return self._call(lib.bl_exchange_keys_async)

    @staticmethod
    def await_step(token: int) -> None:
        """Wait for an asynchronous bring-up step; raise its error if it failed."""
        check(lib.bl_await(token))

    def alloc_memory(self) -> None:
        self._call(lib.bl_alloc_memory)

    def exchange_keys(self) -> None:
        self._call(lib.bl_exchange_keys)

    def establish_channel(self) -> None:
        self._call(lib.bl_establish_channel)

    def set_message_sizes(self, in_bytes: int, out_bytes: int) -> None:
        """Controller: the largest request and reply of a round, in bytes."""
        self._call(lib.bl_set_message_sizes, in_bytes, out_bytes)
        self._out = ffi.new("uint8_t[]", max(out_bytes, 1))
        self._round_out.clear()

    def set_coprocessor_fn(self, fn: str | CoprocessorFunction | Any,
                           decoder_ids: Iterable[int] | None = None) -> CoprocessorFunction:
        """Coprocessor: bind ``fn`` to ``decoder_ids`` (default: the ids the function declares)."""
        function = resolve_function(fn)
        ids = tuple(function.decoder_ids if decoder_ids is None else decoder_ids)
        bound = BoundFunction(function)
        self._bound.append(bound)
        cfn, ctx = bound.fn, bound.ctx
        for decoder_id in ids:
            self._call(lib.bl_set_coprocessor_fn, decoder_id, cfn, ctx)
        return function

    def start(self) -> None:
        self._call(lib.bl_start)

    def stop(self) -> None:
        """Stop the session; calling it again does nothing. A call waiting on another thread returns."""
        s = self._s
        if s is not None:
            check(lib.bl_stop(s))

    def destroy(self) -> None:
        """Stop, unregister and free the session; calling it again does nothing.

        A call in progress on another thread is stopped first and waited for (within twice
        the session's timeout_ms and a second); it returns a LifecycleError there. A
        coprocessor function of this session (or of its in-place coprocessor) that calls it
        gets a LifecycleError, and the session is left as it was."""
        s = self._s
        if s is None:
            return
        self._s = None  # from here on, calls on this object fail at once
        stopped = lib.bl_stop(s)  # a call waiting on another thread returns
        if stopped == lib.BL_ESTATE:  # refused: a coprocessor function of this session calls us
            self._s = s  # untouched: it is destroyed later, from another thread
            check(stopped)
        if self._calls:
            deadline = time.monotonic() + 2 * self._timeout_s(s) + 1.0
            while self._calls and time.monotonic() < deadline:
                time.sleep(0.0002)
            if self._calls:
                self._s = s  # still in use: freeing it now could crash the other thread
                raise LifecycleError(
                    f"{self.role} session {self.key!r}: a call on another thread did not return after stop; "
                    "the session is stopped but not freed (destroy it again once that thread is done)"
                )
        log = _recording.pop(_address(s), None)
        if log is not None and log._live():
            log.close()  # while the session can still say how many rounds it saw
        try:
            check(lib.bl_destroy(s) or stopped)
        finally:
            for bound in self._bound:
                bound.close()
            self._bound.clear()

    @staticmethod
    def _timeout_s(s: Any) -> float:
        """The longer of session ``s``'s timeout_ms and connect_timeout_ms (the core's parse), in seconds."""
        ms = ffi.new("uint64_t[2]")
        check(lib.bl_session_timeouts(s, ms, ms + 1))
        return max(ms[0], ms[1]) / 1000

    def _call(self, fn: Any, *args: Any) -> int:
        """``fn(session, *args)`` with its status checked, counted so destroy can wait for it."""
        self._calls += 1
        try:
            return check(fn(self._handle(), *args))
        finally:
            self._calls -= 1

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __del__(self) -> None:
        if getattr(self, "_s", None) is not None:
            try:
                self.destroy()
            except Exception:
                pass

    def _handle(self) -> Any:
        s = self._s
        if s is None:
            raise LifecycleError(f"{self.role} session {self.key!r} was destroyed")
        return s

    # -- rounds (controller) ------------------------------------------------------------

    def stage_payload(self, payload: bytes | bytearray | memoryview, decoder_id: int = 0) -> None:
        self._call(lib.bl_stage_payload, ffi.from_buffer(payload), len(payload), decoder_id)

    def post(self) -> None:
        self._call(lib.bl_post)

    def collect(self) -> bytes:
        """Wait for the oldest in-flight reply and return a copy of it."""
        self._call(lib.bl_collect, self._out, len(self._out), self._out_len)
        return bytes(ffi.buffer(self._out, self._out_len[0]))

    def collect_into(self, out: bytearray | memoryview) -> int:
        """Wait for the oldest in-flight reply, write it into ``out``; return its length."""
        self._call(lib.bl_collect, ffi.from_buffer(out, require_writable=True), len(out), self._out_len)
        return self._out_len[0]

    def reply_slot(self) -> memoryview:
        """Wait for the oldest in-flight reply and return a view of it in the reply ring.

        The view is valid until ``slots`` more rounds are posted."""
        self._call(lib.bl_reply_slot, self._reply_ptr, self._out_len)
        return memoryview(ffi.buffer(self._reply_ptr[0], self._out_len[0]))

    def round(self, payload: bytes | bytearray | memoryview, decoder_id: int = 0) -> bytes:
        """One round: stage, post and collect; returns the reply."""
        out = self._round_out.get(get_ident())
        if out is None:
            out = self._round_out[get_ident()] = ffi.new("uint8_t[]", len(self._out))
        n = self.round_into(payload, out, decoder_id)
        return ffi.buffer(out, n)[:]

    def round_into(self, payload: Any, out: Any, decoder_id: int = 0) -> int:
        """One round into a caller-owned buffer; returns the reply length.

        Passing the same payload and out objects again reuses their native views, so a
        loop that refills preallocated buffers allocates nothing per round."""
        self._calls += 1
        try:
            s = self._s
            v = self._views.get(get_ident())
            if v is None or payload is not v[0] or out is not v[1] or s is None:
                s = self._handle()
                v = self._bind(payload, out)
            try:
                rc = _bl_round(s, v[2], v[3], decoder_id, v[4], v[5], v[6])
            except (TypeError, OverflowError):  # cffi's, on a decoder_id that is no uint32 (no cost otherwise)
                raise InvalidArgumentError(f"round: decoder_id={short_repr(decoder_id)} must be an int from 0 to "
                                           f"{lib.BL_MAX_DECODERS - 1}") from None
            if rc:
                check(rc)
            return v[6][0]
        finally:
            self._calls -= 1

    def _bind(self, payload: Any, out: Any) -> tuple[Any, ...]:
        """This thread's native views of ``payload`` and ``out`` (see round_into)."""
        try:
            payload_view = ffi.from_buffer(payload)
        except TypeError:
            raise InvalidArgumentError(f"round: the payload must be bytes-like (bytes, bytearray, memoryview, a "
                                       f"uint8 array), not {type(payload).__name__}") from None
        try:
            out_view = out if isinstance(out, ffi.CData) else ffi.from_buffer(out, require_writable=True)
        except TypeError:
            raise InvalidArgumentError(f"round_into: the reply buffer must be a writable bytes-like object "
                                       f"(bytearray, a uint8 array), not {type(out).__name__}") from None
        v = (payload, out, payload_view, len(payload), out_view, len(out), ffi.new("uint32_t *"))
        self._views[get_ident()] = v
        return v

    @property
    def last_rtt_ns(self) -> int:
        """Round trip of the last collected round, in nanoseconds."""
        return lib.bl_last_rtt_ns(self._handle())

    def record_rtt(self, capacity: int) -> RoundTripLog:
        """Controller: record the round trip of each round from now on (see :class:`RoundTripLog`).

        :meth:`destroy` closes the log first, so its values stay readable afterwards."""
        return RoundTripLog(self._handle(), self.role, self.key, capacity)

    def serve(self) -> None:
        """Coprocessor: answer requests on this thread until ``stop`` (blocks)."""
        self._call(lib.bl_serve)

    def serve_pending(self) -> int:
        """Coprocessor: answer what has arrived; return how many."""
        return self._call(lib.bl_serve_pending)

    @property
    def geometry(self) -> dict[str, int]:
        """slots, slot_bytes, in_bytes and out_bytes of this session."""
        vals = [ffi.new("uint32_t *") for _ in range(4)]
        self._call(lib.bl_session_geometry, *vals)
        return dict(zip(("slots", "slot_bytes", "in_bytes", "out_bytes"), (v[0] for v in vals)))

    def __repr__(self) -> str:
        state = "destroyed" if self._s is None else "live"
        return f"<Session {self.role} {self.key!r} {state}>"


def _address(handle: Any) -> int:
    return int(ffi.cast("uintptr_t", handle))


#: session address -> the log recording it. Holds the log (and so its buffer) alive for as
#: long as the runtime may write into it, even if the caller drops every reference.
_recording: dict[int, RoundTripLog] = {}


class RoundTripLog:
    """The round trip (ns) of every round a controller session collects, recorded by the runtime.

    The runtime stores each round's RTT into a buffer this object owns (``bl_record_rtt``), so
    rounds driven by compiled code are recorded as well as Python's. It stores the first
    ``capacity`` rounds and counts them all. Get one with :meth:`attach` (a session that
    other code created in this process, found by key) or :meth:`Session.record_rtt`.

    Call :meth:`close` **before the session is destroyed**: the round count lives in the
    session, so after destroy it is lost (``Session.destroy`` closes its own session's log).
    One log per session at a time.

    >>> from backline_core import Session, plugins
    >>> if "memcpy" in plugins.names("transport"):
    ...     with Session.open("memcpy", "coprocessor", "rtt-doc", functions=["echo"], runs_in="controller-thread") as cop, \\
    ...          Session.open("memcpy", "controller", "rtt-doc", in_bytes=8, out_bytes=8) as ctl:
    ...         log = RoundTripLog.attach("rtt-doc", capacity=2)
    ...         for _ in range(3):
    ...             _ = ctl.round(b"syndrome")
    ...         log.close()
    ...         assert (log.rounds, log.dropped, len(log.rtt_ns())) == (3, 1, 2)
    """

    def __init__(self, handle: Any, role: str, key: str, capacity: int) -> None:
        """Arm recording on ``handle``, a live ``bl_session *``; prefer :meth:`attach`."""
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise InvalidArgumentError(
                f"capacity={capacity!r}: give the number of rounds to store, an int >= 0"
            )
        address = _address(handle)
        other = _recording.get(address)
        if other is not None and other._live():
            raise LifecycleError(
                f"{role} session {key!r} is already recorded by {other!r}; close that log first")
        self.role, self.key, self.capacity = role, key, capacity
        self._s = handle
        self._buf = np.zeros(max(capacity, 1), dtype=np.uint64)  # never empty: NULL would disarm
        self._snapshot: np.ndarray | None = None
        self._rounds = 0
        check(lib.bl_record_rtt(handle, ffi.cast("uint64_t *", ffi.from_buffer(self._buf)), capacity))
        _recording[address] = self

    @classmethod
    def attach(cls, key: str, capacity: int, role: str = "controller") -> RoundTripLog:
        """Record the session registered in this process under (``role``, ``key``).

        Raises NotFoundError naming the key if there is none, LifecycleError for a coprocessor."""
        if role not in ROLES:
            raise InvalidArgumentError(
                f"role must be 'controller' or 'coprocessor', not {role!r}"
            )
        handle = lib.bl_session_get(ROLES[role], c_string(key, "session key"))
        if handle == ffi.NULL:
            check(lib.BL_ENOTFOUND)  # with the runtime's text naming the key
        return cls(handle, role, key, capacity)

    def _live(self) -> bool:
        """Whether the session is still registered (at the same address)."""
        return self._s is not None and lib.bl_session_get(ROLES[self.role], self.key.encode()) == self._s

    def _count(self) -> int:
        if not self._live():
            raise LifecycleError(
                f"{self.role} session {self.key!r} was destroyed before its RoundTripLog was closed, so its "
                "round count is lost; call close() before destroying the session")
        return lib.bl_recorded_rtt(self._s)

    def close(self) -> None:
        """Stop recording and keep what was recorded; calling it again does nothing."""
        if self._snapshot is not None:
            return
        self._rounds = self._count()
        check(lib.bl_record_rtt(self._s, ffi.NULL, 0))
        self._snapshot = self._buf[: min(self._rounds, self.capacity)].copy()
        self._buf = self._snapshot
        _recording.pop(_address(self._s), None)
        self._s = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (recording stopped, values kept)."""
        return self._snapshot is not None

    @property
    def rounds(self) -> int:
        """Rounds collected since recording started (stored or not)."""
        return self._rounds if self._snapshot is not None else self._count()

    @property
    def dropped(self) -> int:
        """Rounds counted but not stored because ``capacity`` was reached."""
        return max(0, self.rounds - self.capacity)

    def rtt_ns(self) -> np.ndarray:
        """The stored round trips in ns, oldest first (a copy; up to ``capacity`` of them)."""
        if self._snapshot is not None:
            return self._snapshot.copy()
        return self._buf[: min(self._count(), self.capacity)].copy()

    def __enter__(self) -> RoundTripLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._snapshot is not None else "recording"
        return f"<RoundTripLog {self.role} {self.key!r} capacity={self.capacity} {state}>"
