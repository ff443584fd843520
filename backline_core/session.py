"""Sessions: the Python face of the native session runtime.

A session is one side of a controller/coprocessor pair, registered under
``(role, key)``. Its lifecycle is enforced natively: connect, alloc_memory,
exchange_keys, establish_channel, then set_message_sizes (controller) or
set_coprocessor_fn (coprocessor), start, rounds, stop, destroy.

>>> from backline_core import Session, plugins
>>> if "memcpy" in plugins.names("transport"):
...     with Session.open("memcpy", "coprocessor", "doc", functions=["echo"], config="locality=inline") as cop, \\
...          Session.open("memcpy", "controller", "doc", in_bytes=8, out_bytes=8) as ctl:
...         assert ctl.round(b"syndrome") == b"syndrome"
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import plugins
from .coprocessor_function import CoprocessorFunction
from .errors import InvalidArgumentError, LifecycleError, PlacementError
from .bound_function import BoundFunction
from .native import check, ffi, lib

ROLES = {"controller": 0, "coprocessor": 1}

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


class Session:
    """One side of a controller/coprocessor pair (see the module docstring)."""

    def __init__(self, backend_library: str, role: str, key: str, config: str = "") -> None:
        if role not in ROLES:
            raise InvalidArgumentError(f"role must be 'controller' or 'coprocessor', not {role!r}")
        out = ffi.new("bl_session **")
        check(lib.bl_session_create(backend_library.encode(), ROLES[role], key.encode(), config.encode(), out))
        self._s = out[0]
        self.role, self.key, self.config = role, key, config
        self._bound: list[BoundFunction] = []  # functions (and contexts) that must outlive the session
        self._out = ffi.new("uint8_t[]", 1)
        self._out_len = ffi.new("uint32_t *")
        self._reply_ptr = ffi.new("const uint8_t **")
        # native views of the buffers last passed to round_into (see there)
        self._in_obj = self._out_obj = self._in_view = self._out_view = None
        self._in_len = self._out_cap = 0

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(cls, transport: str, role: str, key: str, config: str = "", hardware: str = "cpu") -> Session:
        """Create a session on the backend that ``transport`` provides for (hardware, role)."""
        record = plugins.get("transport", transport)
        if (hardware, role) not in record.serves:
            raise PlacementError(
                f"transport {transport!r} has no backend for {hardware}/{role}; it {record.describe()}"
            )
        return cls(record.library(hardware, role), role, key, config)

    @classmethod
    def open(cls, transport: str, role: str, key: str, *, config: str = "", hardware: str = "cpu",
             in_bytes: int = 0, out_bytes: int = 0,
             functions: Iterable[str | CoprocessorFunction | Any] = ()) -> Session:
        """Create a session and bring it up to started (controller: ``in_bytes``/``out_bytes``;
        coprocessor: ``functions``, each a function or a ``(function, decoder_ids)`` pair)."""
        session = cls.create(transport, role, key, config, hardware)
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
        check(lib.bl_connect(self._handle()))

    def connect_async(self) -> int:
        """Start connect on a worker thread; returns a token for :meth:`await_step`."""
        return check(lib.bl_connect_async(self._handle()))

    def exchange_keys_async(self) -> int:
        """Start alloc_memory + exchange_keys on a worker thread; returns a token."""
        return check(lib.bl_exchange_keys_async(self._handle()))

    @staticmethod
    def await_step(token: int) -> None:
        """Wait for an asynchronous bring-up step; raise its error if it failed."""
        check(lib.bl_await(token))

    def alloc_memory(self) -> None:
        check(lib.bl_alloc_memory(self._handle()))

    def exchange_keys(self) -> None:
        check(lib.bl_exchange_keys(self._handle()))

    def establish_channel(self) -> None:
        check(lib.bl_establish_channel(self._handle()))

    def set_message_sizes(self, in_bytes: int, out_bytes: int) -> None:
        """Controller: the largest request and reply of a round, in bytes."""
        check(lib.bl_set_message_sizes(self._handle(), in_bytes, out_bytes))
        self._out = ffi.new("uint8_t[]", max(out_bytes, 1))

    def set_coprocessor_fn(self, fn: str | CoprocessorFunction | Any,
                           decoder_ids: Iterable[int] | None = None) -> CoprocessorFunction:
        """Coprocessor: bind ``fn`` to ``decoder_ids`` (default: the ids the function declares)."""
        function = resolve_function(fn)
        ids = tuple(function.decoder_ids if decoder_ids is None else decoder_ids)
        bound = BoundFunction(function)
        self._bound.append(bound)
        cfn, ctx = bound.fn, bound.ctx
        for decoder_id in ids:
            check(lib.bl_set_coprocessor_fn(self._handle(), decoder_id, cfn, ctx))
        return function

    def start(self) -> None:
        check(lib.bl_start(self._handle()))

    def stop(self) -> None:
        """Stop the session; calling it again does nothing."""
        if self._s is not None:
            check(lib.bl_stop(self._s))

    def destroy(self) -> None:
        """Stop, unregister and free the session; calling it again does nothing."""
        if self._s is None:
            return
        s, self._s = self._s, None
        try:
            check(lib.bl_destroy(s))
        finally:
            for bound in self._bound:
                bound.close()
            self._bound.clear()

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

    def _handle(self):
        if self._s is None:
            raise LifecycleError(f"{self.role} session {self.key!r} was destroyed", code=-2, status="BL_ESTATE")
        return self._s

    # -- rounds (controller) ------------------------------------------------------------

    def stage_payload(self, payload: bytes | bytearray | memoryview, decoder_id: int = 0) -> None:
        check(lib.bl_stage_payload(self._handle(), ffi.from_buffer(payload), len(payload), decoder_id))

    def post(self) -> None:
        check(lib.bl_post(self._handle()))

    def collect(self) -> bytes:
        """Wait for the oldest in-flight reply and return a copy of it."""
        check(lib.bl_collect(self._handle(), self._out, len(self._out), self._out_len))
        return bytes(ffi.buffer(self._out, self._out_len[0]))

    def collect_into(self, out: bytearray | memoryview) -> int:
        """Wait for the oldest in-flight reply, write it into ``out``; return its length."""
        check(lib.bl_collect(self._handle(), ffi.from_buffer(out, require_writable=True), len(out), self._out_len))
        return self._out_len[0]

    def reply_slot(self) -> memoryview:
        """Wait for the oldest in-flight reply and return a view of it in the reply ring.

        The view is valid until ``slots`` more rounds are posted."""
        check(lib.bl_reply_slot(self._handle(), self._reply_ptr, self._out_len))
        return memoryview(ffi.buffer(self._reply_ptr[0], self._out_len[0]))

    def round(self, payload: bytes | bytearray | memoryview, decoder_id: int = 0) -> bytes:
        """One round: stage, post and collect; returns the reply."""
        n = self.round_into(payload, self._out, decoder_id)
        return ffi.buffer(self._out, n)[:]

    def round_into(self, payload: Any, out: Any, decoder_id: int = 0) -> int:
        """One round into a caller-owned buffer; returns the reply length.

        Passing the same payload and out objects again reuses their native views, so a
        loop that refills preallocated buffers allocates nothing per round."""
        if payload is not self._in_obj or out is not self._out_obj or self._s is None:
            self._handle()
            self._bind(payload, out)
        rc = _bl_round(self._s, self._in_view, self._in_len, decoder_id, self._out_view, self._out_cap, self._out_len)
        if rc:
            self._handle()
            check(rc)
        return self._out_len[0]

    def _bind(self, payload: Any, out: Any) -> None:
        self._in_view, self._in_len = ffi.from_buffer(payload), len(payload)
        self._out_view = out if isinstance(out, ffi.CData) else ffi.from_buffer(out, require_writable=True)
        self._out_cap = len(out)
        self._in_obj, self._out_obj = payload, out

    @property
    def last_rtt_ns(self) -> int:
        """Round trip of the last collected round, in nanoseconds."""
        return lib.bl_last_rtt_ns(self._handle())

    def serve(self) -> None:
        """Coprocessor: answer requests on this thread until ``stop`` (blocks)."""
        check(lib.bl_serve(self._handle()))

    def serve_pending(self) -> int:
        """Coprocessor: answer what has arrived; return how many."""
        return check(lib.bl_serve_pending(self._handle()))

    @property
    def geometry(self) -> dict[str, int]:
        """slots, slot_bytes, in_bytes and out_bytes of this session."""
        vals = [ffi.new("uint32_t *") for _ in range(4)]
        check(lib.bl_session_geometry(self._handle(), *vals))
        return dict(zip(("slots", "slot_bytes", "in_bytes", "out_bytes"), (v[0] for v in vals)))

    def __repr__(self) -> str:
        state = "destroyed" if self._s is None else "live"
        return f"<Session {self.role} {self.key!r} {state}>"
