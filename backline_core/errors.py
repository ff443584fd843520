"""Exceptions raised by backline_core.

Native status codes (``BL_E*`` in ``backline.h``) map one-to-one onto the
:class:`TransportError` subclasses below, so Python callers can catch the case they
care about and C callers get the same information as a return code.
"""

from __future__ import annotations

from typing import Any


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

    code: int = -8
    status: str = "BL_EBACKEND"

    def __init__(self, message: str, code: int | None = None, status: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class InvalidArgumentError(TransportError, ValueError):
    """BL_EINVAL: an argument or configuration value is invalid."""


class LifecycleError(TransportError):
    """BL_ESTATE: a lifecycle call came out of order."""


class DeadlineError(TransportError, TimeoutError):
    """BL_ETIMEOUT: a blocking call passed its deadline (the peer may be dead)."""


class PayloadTooLargeError(TransportError, ValueError):
    """BL_ETOOBIG: a payload is larger than the session's maximum."""


class UnknownDecoderError(TransportError, LookupError):
    """BL_EDECODER: no coprocessor function is bound to the frame's decoder_id."""


class PeerError(TransportError):
    """BL_EPEER: the peer went away or broke the protocol."""


class KeyTakenError(TransportError):
    """BL_EBUSY: another session already holds this key."""


class RingFullError(TransportError):
    """BL_EFULL: every ring slot is in flight; collect before posting more."""


class NothingPostedError(TransportError):
    """BL_EEMPTY: collect was called with no round in flight."""


class FunctionError(TransportError):
    """BL_EFN: the coprocessor function reported an error for this round."""


class AbiError(TransportError):
    """BL_EABI: a backend library was built for another ABI version."""


class NotFoundError(TransportError, LookupError):
    """BL_ENOTFOUND: no session is registered under this (role, key)."""


#: status code -> (name, exception class); kept in step with backline.h.
STATUS: dict[int, tuple[str, type[TransportError]]] = {
    -1: ("BL_EINVAL", InvalidArgumentError),
    -2: ("BL_ESTATE", LifecycleError),
    -3: ("BL_ETIMEOUT", DeadlineError),
    -4: ("BL_ETOOBIG", PayloadTooLargeError),
    -5: ("BL_EDECODER", UnknownDecoderError),
    -6: ("BL_EPEER", PeerError),
    -7: ("BL_EBUSY", KeyTakenError),
    -8: ("BL_EBACKEND", TransportError),
    -9: ("BL_EFULL", RingFullError),
    -10: ("BL_EEMPTY", NothingPostedError),
    -11: ("BL_EFN", FunctionError),
    -12: ("BL_ENOMEM", TransportError),
    -13: ("BL_EABI", AbiError),
    -14: ("BL_ENOTFOUND", NotFoundError),
}


def from_status(code: int, message: str) -> TransportError:
    """The exception for native status ``code`` carrying ``message``."""
    name, cls = STATUS.get(code, (f"status {code}", TransportError))
    return cls(f"{message} [{name}]" if message else name, code=code, status=name)
