"""Session configuration strings: the ``init_args`` of a node as the backend sees them.

A configuration is ``key=value`` pairs joined by ``;``, passed verbatim to the native
runtime, which parses it once: the core reads :data:`CORE_KEYS` itself and hands the
backend typed accessors for the keys it declares (``config_keys`` in its C backend). Any
other key is an error there. No backend parses the string itself.

>>> format_config({"slots": 64, "cpu": 1})
'cpu=1;slots=64'
>>> parse_config('cpu=1;slots=64')
{'cpu': '1', 'slots': '64'}
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._errors import InvalidArgumentError
from ._native import lib

#: Keys every transport accepts; read by the core runtime (limits and defaults: backline.h).
CORE_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "slots": f"ring slot count, a power of two up to {lib.BL_MAX_SLOTS} (default {lib.BL_DEFAULT_SLOTS})",
        "slot_bytes": f"bytes per ring slot including the {lib.BL_FRAME_HEADER_BYTES}-byte frame header, a multiple of "
                      f"{lib.BL_SLOT_ALIGN} up to {lib.BL_MAX_SLOT_BYTES} (default {lib.BL_DEFAULT_SLOT_BYTES})",
        "timeout_ms": "deadline of each blocking round call: collect, reply_slot, round "
                      f"(default {lib.BL_DEFAULT_TIMEOUT_MS})",
        "connect_timeout_ms": "deadline of each bring-up call: connect, exchange_keys, establish_channel "
                              f"(default {lib.BL_DEFAULT_CONNECT_TIMEOUT_MS})",
        "idle_spin_us": "coprocessor: busy-poll this long after the last request before sleeping on the doorbell; "
                        f"-1 never sleeps (default {lib.BL_DEFAULT_IDLE_SPIN_US})",
    }
)

ConfigValue = str | int | float | bool


def _text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def format_config(args: Mapping[str, ConfigValue]) -> str:
    """Render ``args`` as the canonical configuration string (keys sorted)."""
    if not isinstance(args, Mapping):
        raise InvalidArgumentError(f"init_args must be a mapping of keys to values, not {type(args).__name__}")
    if not all(isinstance(key, str) for key in args):
        raise InvalidArgumentError(f"init_args keys must be str: {sorted(map(repr, args))}")
    parts = []
    for key in sorted(args):
        value = _text(args[key])
        for text, what in ((key, "key"), (value, "value")):
            if not text or any(c in text for c in ";=\n\0"):
                raise InvalidArgumentError(
                    f"init_args {what} {text!r} for {key!r} is not allowed: keys and values must be "
                    "non-empty and must not contain ';', '=', newlines or NUL"
                )
        parts.append(f"{key}={value}")
    return ";".join(parts)


def parse_config(text: str) -> dict[str, str]:
    """Parse a configuration string; raise ValueError (InvalidArgumentError) on malformed input."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a configuration string must be a str, not {type(text).__name__}")
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(";"):
        key, sep, value = item.partition("=")
        if not sep or not key or not value or "=" in value:
            raise InvalidArgumentError(
                f"malformed configuration item {item!r} in {text!r}: expected key=value pairs separated by ';'"
            )
        if key in out:
            raise InvalidArgumentError(f"configuration key {key!r} given twice in {text!r}")
        out[key] = value
    return out
