"""Entry point ``stim`` in group ``backline.devices``."""

from __future__ import annotations

from backline_core import Device, hookimpl


def _load() -> int:
    from .device import api_address

    return api_address()


@hookimpl
def backline_devices() -> list[Device]:
    return [
        Device(name="stim", summary="stabilizer simulation with stim.TableauSimulator (Clifford gates, "
               "rotations by multiples of pi/2, Pauli noise)", load=_load, pennylane_devices=("default.clifford",)),
    ]
