"""Quantum-device runtimes from Python: open a device plugin by name and apply operations.

Every call goes through libbackline's ``bl_dev_*`` functions (``backline/device.h``), the
same ones compiled programs call, so arguments are checked once, in C, and failures raise
the :class:`~backline_core._errors.TransportError` subclass of their status.

>>> from backline_core._device import QuantumDevice
>>> with QuantumDevice.open("null", 2) as dev:
...     dev.gate("H", [0]); dev.gate("CNOT", [0, 1])
...     print(dev.measure(1), dev.op_count)
0 3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _errors as errors, _plugins as plugins
from ._abi import check, ffi, lib

#: Gate name -> bl_gate id (``CX`` is an alias of ``CNOT``).
GATES: dict[str, int] = {
    "I": lib.BL_GATE_I, "X": lib.BL_GATE_X, "Y": lib.BL_GATE_Y, "Z": lib.BL_GATE_Z, "H": lib.BL_GATE_H,
    "S": lib.BL_GATE_S, "SDG": lib.BL_GATE_SDG, "SX": lib.BL_GATE_SX, "CNOT": lib.BL_GATE_CNOT,
    "CX": lib.BL_GATE_CNOT, "CZ": lib.BL_GATE_CZ, "SWAP": lib.BL_GATE_SWAP, "RX": lib.BL_GATE_RX,
    "RY": lib.BL_GATE_RY, "RZ": lib.BL_GATE_RZ,
}

#: Noise channel name -> bl_noise id.
NOISE_CHANNELS: dict[str, int] = {
    "X_FLIP": lib.BL_NOISE_X_FLIP, "Z_FLIP": lib.BL_NOISE_Z_FLIP, "Y_FLIP": lib.BL_NOISE_Y_FLIP,
    "DEPOLARIZE1": lib.BL_NOISE_DEPOLARIZE1, "DEPOLARIZE2": lib.BL_NOISE_DEPOLARIZE2,
}


def _op_id(table: dict[str, int], what: str, name_or_id: str | int) -> int:
    if isinstance(name_or_id, str):
        try:
            return table[name_or_id.upper()]
        except KeyError:
            raise errors.InvalidArgumentError(
                f"unknown {what} {name_or_id!r}; choose from {', '.join(table)}"
            ) from None
    return int(name_or_id)


def _wires(wires: Sequence[int]) -> Any:
    values = [int(w) for w in wires]
    for w in values:
        if not 0 <= w < 2**32:
            raise errors.InvalidArgumentError(f"wire {w} is out of range (wires are 0..num_qubits-1)")
    return ffi.new("uint32_t[]", values or [0]), len(values)


class QuantumDevice:
    """An open device (a ``bl_device``). Close it once, or use it as a context manager."""

    def __init__(self, dev: Any, name: str, keep: Any = None) -> None:
        self._dev = dev
        self.name = name
        self._keep = keep  # what load() returned, for in-process vtables

    @classmethod
    def open(cls, name: str, num_qubits: int, *, config: str = "", seed: int = 0) -> QuantumDevice:
        """Open the device plugin ``name`` (entry-point group ``backline.devices``) with
        ``num_qubits`` qubits in |0...0>; ``seed`` 0 seeds sampling from the OS."""
        record = plugins.get("device", name)
        target = record.load()
        out = ffi.new("bl_device **")
        if isinstance(target, str):
            rc = lib.bl_dev_open(target.encode(), ffi.NULL, config.encode(), num_qubits, seed, out)
        elif isinstance(target, int) and not isinstance(target, bool):
            api = ffi.cast("const bl_device_api *", target)
            rc = lib.bl_dev_open(ffi.NULL, api, config.encode(), num_qubits, seed, out)
        else:
            raise errors.PluginError(
                f"device plugin {name!r}: load() returned {target!r}; it must return a library path (str) "
                "or the address of a bl_device_api (int)"
            )
        check(rc)
        return cls(out[0], name, target)

    def _handle(self) -> Any:
        if self._dev is None:
            raise errors.LifecycleError(f"device {self.name!r} is closed")
        return self._dev

    @property
    def handle(self) -> int:
        """The ``bl_device *`` as an integer, to pass to compiled code."""
        return int(ffi.cast("uintptr_t", self._handle()))

    @property
    def num_qubits(self) -> int:
        return lib.bl_dev_num_qubits(self._handle())

    @property
    def op_count(self) -> int:
        """Gates, measurements, resets and noise channels applied since open."""
        return lib.bl_dev_op_count(self._handle())

    def gate(self, name_or_id: str | int, wires: Sequence[int], params: Sequence[float] = ()) -> None:
        gate = _op_id(GATES, "gate", name_or_id)
        w, n = _wires(wires)
        values = [float(p) for p in params]
        p = ffi.new("double[]", values) if values else ffi.NULL
        check(lib.bl_dev_gate(self._handle(), gate, w, n, p, len(values)))

    def measure(self, wire: int) -> int:
        """Measure ``wire`` in the Z basis; returns 0 or 1."""
        _wires([wire])
        return check(lib.bl_dev_measure(self._handle(), wire))

    def reset(self, wire: int) -> None:
        _wires([wire])
        check(lib.bl_dev_reset(self._handle(), wire))

    def noise(self, channel: str | int, wires: Sequence[int], p: float) -> None:
        ch = _op_id(NOISE_CHANNELS, "noise channel", channel)
        w, n = _wires(wires)
        check(lib.bl_dev_noise(self._handle(), ch, w, n, float(p)))

    def reset_all(self) -> None:
        """Start a new shot: every qubit back to |0>."""
        check(lib.bl_dev_reset_all(self._handle()))

    def close(self) -> None:
        """Free the device; further calls raise LifecycleError (closing again is a no-op)."""
        if self._dev is not None:
            dev, self._dev = self._dev, None
            check(lib.bl_dev_close(dev))

    def __enter__(self) -> QuantumDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "closed" if self._dev is None else f"{self.num_qubits} qubits"
        return f"<QuantumDevice {self.name!r} ({state})>"


#: The smallest compiled program against this ABI, in llvm-dialect IR (the compiler parses and
#: JIT-compiles it): ``@bell(device) -> i32`` applies H to wire 0 and CNOT 0->1, measures both,
#: and returns ``m0 | m1 << 1``, or the first negative status. Device tests run it on every device.
BELL_PROGRAM = """
builtin.module {
  llvm.func @bl_dev_gate1(!llvm.ptr, i32, i32) -> i32
  llvm.func @bl_dev_gate2(!llvm.ptr, i32, i32, i32) -> i32
  llvm.func @bl_dev_measure(!llvm.ptr, i32) -> i32
  llvm.func @bell(%d: !llvm.ptr) -> i32 {
    %h = llvm.mlir.constant(4 : i32) : i32
    %cnot = llvm.mlir.constant(8 : i32) : i32
    %q0 = llvm.mlir.constant(0 : i32) : i32
    %q1 = llvm.mlir.constant(1 : i32) : i32
    %r0 = llvm.call @bl_dev_gate1(%d, %h, %q0) : (!llvm.ptr, i32, i32) -> i32
    %r1 = llvm.call @bl_dev_gate2(%d, %cnot, %q0, %q1) : (!llvm.ptr, i32, i32, i32) -> i32
    %m0 = llvm.call @bl_dev_measure(%d, %q0) : (!llvm.ptr, i32) -> i32
    %m1 = llvm.call @bl_dev_measure(%d, %q1) : (!llvm.ptr, i32) -> i32
    %hi = llvm.shl %m1, %q1 : i32
    %packed = llvm.or %m0, %hi : i32
    %e0 = llvm.or %r0, %r1 : i32
    %e1 = llvm.or %m0, %m1 : i32
    %err = llvm.or %e0, %e1 : i32
    %failed = llvm.icmp "slt" %err, %q0 : i32
    %result = llvm.select %failed, %err, %packed : i1, i32
    llvm.return %result : i32
  }
}
"""
