"""Exceptions raised by backline_core.

Native status codes (``BL_E*`` in ``backline.h``, read through cffi) map one-to-one onto
the :class:`TransportError` subclasses below, so Python callers can catch the case they
care about and C callers get the same information as a return code.
"""

from __future__ import annotations

from typing import Any


def short_repr(obj: Any) -> str:
    """``repr(obj)`` cut to 80 characters for an error message (a huge int is described, since
    Python refuses to print one past 4,300 digits)."""
    if isinstance(obj, int) and obj.bit_length() > 128:
        return f"<an integer of {obj.bit_length()} bits>"
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


class BacklineError(Exception):
    """Base class of every error this package raises."""


class PlacementError(BacklineError, ValueError):
    """A placement (node, endpoint, transport choice, ...) is invalid."""


class PluginError(BacklineError):
    """A plugin could not be loaded or returned something invalid."""


class UnknownPluginError(PluginError, LookupError):
    """No installed plugin of this kind has this name."""

    def __init__(self, kind: str, name: str, available: list[Any]) -> None:
        self.kind, self.name = kind, name
        rows = []
        for info in available:
            state = f"failed to load: {info.error}" if info.error else info.serves
            rows.append(f"  {info.name} ({info.distribution}): {state}")
        listed = "\n".join(rows) if rows else "  (none)"
        kinds = f"{kind}es" if kind.endswith("s") else f"{kind}s"
        super().__init__(
            f"unknown {kind} {name!r}. Installed {kinds}:\n{listed}\n"
            f"A {kind} named {name!r} is added by installing the package that provides it, "
            f"by convention `pip install backline-{kind}-{name}`; `backline plugins` lists what is installed."
        )


class TransportError(BacklineError):
    """A native runtime call failed; ``code`` is the ``BL_E*`` status."""

    #: the status name in backline.h; subclasses name theirs, ``code`` is its value there
    status: str = "BL_EBACKEND"
    code: int

    def __init__(self, message: str, code: int | None = None, status: str | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.code = code if code is not None else status_code(self.status)


class InvalidArgumentError(TransportError, ValueError):
    """BL_EINVAL: an argument or configuration value is invalid."""

    status = "BL_EINVAL"


class LifecycleError(TransportError):
    """BL_ESTATE: a lifecycle call came out of order."""

    status = "BL_ESTATE"


class DeadlineError(TransportError, TimeoutError):
    """BL_ETIMEOUT: a blocking call passed its deadline (the peer may be dead)."""

    status = "BL_ETIMEOUT"


class PayloadTooLargeError(TransportError, ValueError):
    """BL_ETOOBIG: a payload is larger than the session's maximum."""

    status = "BL_ETOOBIG"


class UnknownDecoderError(TransportError, LookupError):
    """BL_EDECODER: no coprocessor function is bound to the frame's decoder_id."""

    status = "BL_EDECODER"


class PeerError(TransportError):
    """BL_EPEER: the peer went away or broke the protocol."""

    status = "BL_EPEER"


class KeyTakenError(TransportError):
    """BL_EBUSY: another session already holds this key."""

    status = "BL_EBUSY"


class RingFullError(TransportError):
    """BL_EFULL: every ring slot is in flight; collect before posting more."""

    status = "BL_EFULL"


class NothingPostedError(TransportError):
    """BL_EEMPTY: collect was called with no round in flight."""

    status = "BL_EEMPTY"


class FunctionError(TransportError):
    """BL_EFN: the coprocessor function reported an error for this round."""

    status = "BL_EFN"


class AbiError(TransportError):
    """BL_EABI: a backend library was built for another ABI version."""

    status = "BL_EABI"


class NotFoundError(TransportError, LookupError):
    """BL_ENOTFOUND: no session is registered under this (role, key)."""

    status = "BL_ENOTFOUND"


class AuthenticationError(TransportError, PermissionError):
    """BL_EAUTH: the peer (an executor) refused or failed authentication."""

    status = "BL_EAUTH"


def _status_table() -> dict[int, tuple[str, type[TransportError]]]:
    """status code -> (name, class); the codes are the header's (through cffi)."""
    from ._native import ffi

    classes = {cls.status: cls for cls in TransportError.__subclasses__()}
    # the members of backline.h's bl_status enum (other BL_E* names, e.g. BL_EXECUTOR_*, are not statuses)
    return {code: (name, classes.get(name, TransportError))
            for code, name in ffi.typeof("bl_status").elements.items() if code < 0}


#: status code -> (name, exception class), read from backline.h.
STATUS: dict[int, tuple[str, type[TransportError]]] = _status_table()


def status_code(name: str) -> int:
    """The value of status ``name`` (e.g. ``"BL_EINVAL"``) in backline.h."""
    from ._native import lib

    return getattr(lib, name)


def from_status(code: int, message: str) -> TransportError:
    """The exception for native status ``code`` carrying ``message``."""
    name, cls = STATUS.get(code, (f"status {code}", TransportError))
    return cls(f"{message} [{name}]" if message else name, code=code, status=name)
