"""The ``stim`` device: a ``bl_device_api`` whose hooks are cffi callbacks into Python.

One vtable serves every device of the process. ``create`` makes a :class:`StimDevice`,
keeps it in ``_DEVICES`` under a small integer handle and passes that handle back as
the ``dev`` pointer; the other hooks look it up.

Supported: every Clifford gate of ``bl_gate``; RX, RY and RZ only for angles that are
multiples of pi/2 (within 1e-9), applied as I, sqrt, Pauli or sqrt-dagger up to a global
phase. Another angle makes the gate hook return BL_EINVAL (hooks have no error buffer;
libbackline then reports "device 'stim' does not support gate RX(...) on wire ...").
Noise channels map onto stim's x_error, z_error, y_error, depolarize1 and depolarize2.

Configuration: no keys. ``seed`` seeds ``stim.TableauSimulator``; 0 seeds from the OS.
``reset_all`` builds a fresh simulator whose seed is derived from the device seed and the
shot number, so a fixed seed gives the same outcomes shot after shot, run after run (with
the same stim version and machine, as stim documents for its seeds).
"""

from __future__ import annotations

import itertools
import math
import threading

import stim

from backline_core.sdk import ffi, lib

BL_OK, BL_EINVAL, BL_EBACKEND = lib.BL_OK, lib.BL_EINVAL, lib.BL_EBACKEND
_MASK64 = (1 << 64) - 1


def _derive_seed(seed: int, shot: int) -> int:
    """splitmix64 of (seed, shot): a well-spread 64-bit seed per shot."""
    z = (seed + (shot + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class StimDevice:
    """One device: a tableau simulator of ``num_qubits`` qubits."""

    def __init__(self, num_qubits: int, seed: int) -> None:
        self.num_qubits = num_qubits
        self.seed = seed
        self.shot = 0
        self.sim = self._simulator()

    def _simulator(self) -> stim.TableauSimulator:
        seed = None if self.seed == 0 else (self.seed if self.shot == 0 else _derive_seed(self.seed, self.shot))
        sim = stim.TableauSimulator(seed=seed)
        sim.set_num_qubits(self.num_qubits)
        return sim

    def reset_all(self) -> None:
        self.shot += 1
        self.sim = self._simulator()


def _quarter_turns(angle: float) -> int | None:
    """k mod 4 if ``angle`` is k * pi/2 (within 1e-6, relative), else None.

    The tolerance admits angles that passed through float32 (jax's default: pi rounds to
    3.1415927), and nothing a non-Clifford rotation would mean."""
    k = round(angle / (math.pi / 2))
    if abs(angle - k * math.pi / 2) > 1e-6 * max(1.0, abs(angle)):
        return None
    return k % 4


# rotation gate -> the stim methods for 0, 1, 2, 3 quarter turns (None: identity)
_ROTATIONS = {
    lib.BL_GATE_RX: (None, "sqrt_x", "x", "sqrt_x_dag"),
    lib.BL_GATE_RY: (None, "sqrt_y", "y", "sqrt_y_dag"),
    lib.BL_GATE_RZ: (None, "s", "z", "s_dag"),
}
_FIXED = {
    lib.BL_GATE_I: None, lib.BL_GATE_X: "x", lib.BL_GATE_Y: "y", lib.BL_GATE_Z: "z", lib.BL_GATE_H: "h",
    lib.BL_GATE_S: "s", lib.BL_GATE_SDG: "s_dag", lib.BL_GATE_SX: "sqrt_x", lib.BL_GATE_CNOT: "cnot",
    lib.BL_GATE_CZ: "cz", lib.BL_GATE_SWAP: "swap",
}
_NOISE = {
    lib.BL_NOISE_X_FLIP: "x_error", lib.BL_NOISE_Z_FLIP: "z_error", lib.BL_NOISE_Y_FLIP: "y_error",
    lib.BL_NOISE_DEPOLARIZE1: "depolarize1", lib.BL_NOISE_DEPOLARIZE2: "depolarize2",
}

_DEVICES: dict[int, StimDevice] = {}
_HANDLES = itertools.count(1)
_LOCK = threading.Lock()


def _device(dev) -> StimDevice:
    return _DEVICES[int(ffi.cast("uintptr_t", dev))]


def _write_err(err, errlen: int, text: str) -> None:
    if errlen:
        data = text.encode(errors="replace")[: errlen - 1] + b"\0"
        ffi.memmove(err, data, len(data))


# ---- hooks (libbackline has checked ids, wire counts and ranges, parameter counts and p) ----

def _create(config, num_qubits, seed, dev_out, err, errlen):
    text = ffi.string(config).decode(errors="replace") if config != ffi.NULL else ""
    keys = [item.partition("=")[0].strip() for item in text.split(";") if item.strip()]
    if keys:
        _write_err(err, errlen, f"the stim device takes no configuration keys, got {', '.join(map(repr, keys))}")
        return BL_EINVAL
    try:
        device = StimDevice(num_qubits, seed)
    except Exception as exc:  # noqa: BLE001 - becomes the open error's text
        _write_err(err, errlen, f"{type(exc).__name__}: {exc}")
        return BL_EBACKEND
    with _LOCK:
        handle = next(_HANDLES)
        _DEVICES[handle] = device
    dev_out[0] = ffi.cast("void *", handle)
    return BL_OK


def _gate(dev, gate, wires, n_wires, params, n_params):
    sim = _device(dev).sim
    if gate in _ROTATIONS:
        k = _quarter_turns(params[0])
        if k is None:
            return BL_EINVAL
        method = _ROTATIONS[gate][k]
    else:
        method = _FIXED[gate]
    if method is not None:
        getattr(sim, method)(*(wires[i] for i in range(n_wires)))
    return BL_OK


def _measure(dev, wire, outcome):
    outcome[0] = int(_device(dev).sim.measure(wire))
    return BL_OK


def _reset(dev, wire):
    _device(dev).sim.reset(wire)
    return BL_OK


def _noise(dev, channel, wires, n_wires, p):
    getattr(_device(dev).sim, _NOISE[channel])(*(wires[i] for i in range(n_wires)), p=p)
    return BL_OK


def _reset_all(dev):
    _device(dev).reset_all()
    return BL_OK


def _destroy(dev):
    with _LOCK:
        _DEVICES.pop(int(ffi.cast("uintptr_t", dev)), None)


# An exception escaping a hook returns BL_EBACKEND (cffi prints the traceback to stderr).
_CALLBACKS = {
    "create": ffi.callback("int32_t(*)(const char *, uint32_t, uint64_t, void **, char *, size_t)", _create,
                           error=BL_EBACKEND),
    "gate": ffi.callback("int32_t(*)(void *, int32_t, const uint32_t *, uint32_t, const double *, uint32_t)",
                         _gate, error=BL_EBACKEND),
    "measure": ffi.callback("int32_t(*)(void *, uint32_t, int32_t *)", _measure, error=BL_EBACKEND),
    "reset": ffi.callback("int32_t(*)(void *, uint32_t)", _reset, error=BL_EBACKEND),
    "noise": ffi.callback("int32_t(*)(void *, int32_t, const uint32_t *, uint32_t, double)", _noise,
                          error=BL_EBACKEND),
    "reset_all": ffi.callback("int32_t(*)(void *)", _reset_all, error=BL_EBACKEND),
    "destroy": ffi.callback("void(*)(void *)", _destroy),
}
_NAME = ffi.new("char[]", b"stim")
_API = ffi.new("bl_device_api *")
_API.abi_version = lib.BL_DEVICE_ABI_VERSION
_API.name = _NAME
for _hook, _cb in _CALLBACKS.items():
    setattr(_API, _hook, _cb)


def api_address() -> int:
    """Address of the process-wide ``bl_device_api`` (valid while the process runs)."""
    return int(ffi.cast("uintptr_t", _API))
