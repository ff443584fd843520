"""The core's built-in coprocessor functions, device and commands, registered through the same entry
points as any plugin (``backline.decoders``: ``echo`` and ``steane``; ``backline.devices``:
``null``; ``backline.commands``: ``plugins``, ``bench``, ``coprocessor``, ``executor``)."""

from __future__ import annotations

import os
from typing import Any

from ._coprocessor_function import CoprocessorFunction
from ._hookspecs import Command, Decoder, Device, hookimpl
from ._abi import get_library


def echo() -> CoprocessorFunction:
    """Copies each payload back (decoder_ids 0 and 1)."""
    return CoprocessorFunction(name="echo", library=get_library(), symbol="bl_fn_echo", decoder_ids=(0, 1))


def steane() -> CoprocessorFunction:
    """Minimum-weight Steane lookup: 1 byte (3 packed syndrome bits) in, 1 byte (7-qubit mask) out.

    Serves decoder_id 0 (X checks) and 1 (Z checks): the Steane code's Hx equals Hz. Its
    table is compiled from ``backline/steane.h``.
    """
    return CoprocessorFunction(name="steane", library=get_library(), symbol="bl_fn_steane", decoder_ids=(0, 1),
                               reply_bits=7)


def echo_bench_payloads(function: CoprocessorFunction, spec: Any) -> None:
    """echo's bench payloads: None, the bench's own, which carry their round index (a lost,
    repeated or reordered reply shows as a mismatch)."""
    return None


def steane_bench_payloads(function: CoprocessorFunction, spec: Any) -> Any:
    """All eight syndromes, each expected to get the correction computed here from the check
    matrix (not by the table under test)."""
    from ._bench.payloads import BenchPayloads
    from ._steane import STEANE_H, steane_correction

    syndromes = range(1 << len(STEANE_H))
    return BenchPayloads([bytes([s]) for s in syndromes], [bytes([steane_correction(s)]) for s in syndromes])


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [
        Decoder(name="echo", summary="copies the payload back", build=echo, bench_payloads=echo_bench_payloads),
        Decoder(name="steane", summary="minimum-weight Steane [[7,1,3]] lookup table", build=steane,
                bench_payloads=steane_bench_payloads),
    ]


def null_device_library() -> str:
    """Path of the null device's runtime (next to libbackline.so)."""
    return os.path.join(os.path.dirname(get_library()), "libbackline_device_null.so")


@hookimpl
def backline_devices() -> list[Device]:
    return [
        Device(name="null", summary="accepts every valid operation and does nothing; measurements give 0",
               load=null_device_library, pennylane_devices=("null.qubit",)),
    ]


def _cli(name: str) -> Any:
    from . import _cli

    return getattr(_cli, f"{name}_main")


@hookimpl
def backline_commands() -> list[Command]:
    return [
        Command(name="plugins", summary="list installed plugins, what they serve, and load errors",
                load=lambda: _cli("plugins")),
        Command(name="bench", summary="round-trip benchmark; prints framework/floor ratios", load=lambda: _cli("bench")),
        Command(name="coprocessor", summary="serve a coprocessor over a transport (backline coprocessor serve)",
                load=lambda: _cli("coprocessor")),
        Command(name="executor", summary="run an executor server (needs an executor plugin)",
                load=lambda: _cli("executor")),
        Command(name="secret", summary="make a secret file for nodes started by hand (backline secret new PATH)",
                load=_secret_command),
    ]


def _secret_command() -> Any:
    from ._secret_cli import secret_main

    return secret_main
