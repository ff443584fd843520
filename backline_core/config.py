"""Session configuration strings: the ``init_args`` of a node as the backend sees them.

A configuration is ``key=value`` pairs joined by ``;``, passed verbatim to the native
runtime. The core reads :data:`CORE_KEYS` itself; the transport backend reads the keys
its plugin declares in ``Transport.init_args``. Any other key is an error, in Python
and in C alike.

>>> format_config({"slots": 64, "locality": "thread"})
'locality=thread;slots=64'
>>> parse_config('locality=thread;slots=64')
{'locality': 'thread', 'slots': '64'}
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: Keys every transport accepts; read by the core runtime (see backline.h).
CORE_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "slots": "ring slot count, a power of two (default 64)",
        "slot_bytes": "bytes per ring slot including the 32-byte frame header, a multiple of 64 (default 256)",
        "timeout_ms": "deadline of each blocking round call: collect, reply_slot, round (default 1000)",
        "connect_timeout_ms": "deadline of each bring-up call: connect, exchange_keys, establish_channel (default 10000)",
        "idle_spin_us": "coprocessor: busy-poll this long after the last request before sleeping on the doorbell; -1 never sleeps (default 10000)",
    }
)

ConfigValue = str | int | float | bool


def _text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def format_config(args: Mapping[str, ConfigValue]) -> str:
    """Render ``args`` as the canonical configuration string (keys sorted)."""
    parts = []
    for key in sorted(args):
        value = _text(args[key])
        for text, what in ((key, "key"), (value, "value")):
            if not text or any(c in text for c in ";=\n\0"):
                raise ValueError(
                    f"init_args {what} {text!r} for {key!r} is not allowed: keys and values must be "
                    "non-empty and must not contain ';', '=', newlines or NUL"
                )
        parts.append(f"{key}={value}")
    return ";".join(parts)


def parse_config(text: str) -> dict[str, str]:
    """Parse a configuration string; raise ValueError on malformed input."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(";"):
        key, sep, value = item.partition("=")
        if not sep or not key or not value or "=" in value:
            raise ValueError(
                f"malformed configuration item {item!r} in {text!r}: expected key=value pairs separated by ';'"
            )
        if key in out:
            raise ValueError(f"configuration key {key!r} given twice in {text!r}")
        out[key] = value
    return out
