"""The quantum-device ABI (backline/device.h) through the built-in null device: plugin
lookup, libbackline's argument checks, op counting, and a JIT-compiled program calling
bl_dev_* directly."""

from __future__ import annotations

import os

import pytest

from backline_core import _errors as errors
from backline_core import get_library, plugins
from backline_core._device import BELL_PROGRAM, GATES, NOISE_CHANNELS, QuantumDevice
from backline_core._abi import ffi, lib

ONE_WIRE = ["I", "X", "Y", "Z", "H", "S", "SDG", "SX"]
TWO_WIRE = ["CNOT", "CZ", "SWAP"]
ROTATIONS = ["RX", "RY", "RZ"]




@pytest.fixture
def dev():
    with QuantumDevice.open("null", 3) as d:
        yield d


def test_null_device_is_a_builtin_plugin() -> None:
    record = plugins.get("device", "null")
    path = record.load()
    assert isinstance(path, str) and os.path.exists(path)
    assert os.path.basename(path) == "libbackline_device_null.so"
    assert "null" in plugins.names("device")


def test_every_gate_with_the_right_wires_and_params(dev: QuantumDevice) -> None:
    assert dev.num_qubits == 3 and dev.op_count == 0
    for name in ONE_WIRE:
        dev.gate(name, [2])
    for name in TWO_WIRE:
        dev.gate(name, [0, 1])
        dev.gate(name, [2, 0])
    for name in ROTATIONS:
        dev.gate(name, [1], [0.123])
    dev.gate(GATES["H"], [0])  # by id
    dev.gate("cx", [1, 2])  # alias, any case
    assert dev.op_count == len(ONE_WIRE) + 2 * len(TWO_WIRE) + len(ROTATIONS) + 2


@pytest.mark.parametrize("name", ONE_WIRE + ROTATIONS)
def test_one_wire_gates_refuse_two_wires(dev: QuantumDevice, name: str) -> None:
    params = [0.5] if name in ROTATIONS else []
    with pytest.raises(errors.InvalidArgumentError, match=rf"gate {name} acts on 1 wire, got 2"):
        dev.gate(name, [0, 1], params)
    with pytest.raises(errors.InvalidArgumentError, match=rf"gate {name} acts on 1 wire, got 0"):
        dev.gate(name, [], params)
    assert dev.op_count == 0


@pytest.mark.parametrize("name", TWO_WIRE)
def test_two_wire_gates_refuse_one_wire_and_equal_wires(dev: QuantumDevice, name: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=rf"gate {name} acts on 2 wires, got 1"):
        dev.gate(name, [0])
    with pytest.raises(errors.InvalidArgumentError, match=rf"gate {name} needs two distinct wires, got 1 twice"):
        dev.gate(name, [1, 1])
    assert dev.op_count == 0


def test_parameter_counts(dev: QuantumDevice) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="gate RX takes 1 parameter, got 0"):
        dev.gate("RX", [0])
    with pytest.raises(errors.InvalidArgumentError, match="gate RZ takes 1 parameter, got 2"):
        dev.gate("RZ", [0], [0.1, 0.2])
    with pytest.raises(errors.InvalidArgumentError, match="gate H takes 0 parameters, got 1"):
        dev.gate("H", [0], [0.1])
    with pytest.raises(errors.InvalidArgumentError, match="gate RY: parameter 0 is not finite"):
        dev.gate("RY", [0], [float("nan")])
    assert dev.op_count == 0


def test_out_of_range_wires_and_ids(dev: QuantumDevice) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=r"gate X: wire 3 is out of range \(device 'null' has 3 qubits"):
        dev.gate("X", [3])
    with pytest.raises(errors.InvalidArgumentError, match="gate CNOT: wire 7 is out of range"):
        dev.gate("CNOT", [0, 7])
    with pytest.raises(errors.InvalidArgumentError, match="bl_dev_measure: wire 3 is out of range"):
        dev.measure(3)
    with pytest.raises(errors.InvalidArgumentError, match="bl_dev_reset: wire 9 is out of range"):
        dev.reset(9)
    with pytest.raises(errors.InvalidArgumentError, match="wire -1 is out of range"):
        dev.gate("X", [-1])
    with pytest.raises(errors.InvalidArgumentError, match=r"gate id 14 is not a bl_gate \(0..13\)"):
        dev.gate(14, [0])
    with pytest.raises(errors.InvalidArgumentError, match="gate id -1 is not a bl_gate"):
        dev.gate(-1, [0])
    with pytest.raises(errors.InvalidArgumentError, match="unknown gate 'T'"):
        dev.gate("T", [0])
    assert dev.op_count == 0


def test_noise_channels(dev: QuantumDevice) -> None:
    for name in ("X_FLIP", "Z_FLIP", "Y_FLIP", "DEPOLARIZE1"):
        dev.noise(name, [1], 0.25)
    dev.noise("DEPOLARIZE2", [0, 2], 1.0)
    dev.noise(NOISE_CHANNELS["X_FLIP"], [0], 0.0)
    assert dev.op_count == 6
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(errors.InvalidArgumentError, match=r"channel X_FLIP: probability .* is not in \[0, 1\]"):
            dev.noise("X_FLIP", [0], p)
    with pytest.raises(errors.InvalidArgumentError, match="channel DEPOLARIZE2 acts on 2 wires, got 1"):
        dev.noise("DEPOLARIZE2", [0], 0.1)
    with pytest.raises(errors.InvalidArgumentError, match="channel DEPOLARIZE1 acts on 1 wire, got 2"):
        dev.noise("DEPOLARIZE1", [0, 1], 0.1)
    with pytest.raises(errors.InvalidArgumentError, match="channel DEPOLARIZE2 needs two distinct wires"):
        dev.noise("DEPOLARIZE2", [2, 2], 0.1)
    with pytest.raises(errors.InvalidArgumentError, match="channel Z_FLIP: wire 3 is out of range"):
        dev.noise("Z_FLIP", [3], 0.1)
    with pytest.raises(errors.InvalidArgumentError, match="channel id 5 is not a bl_noise"):
        dev.noise(5, [0], 0.1)
    assert dev.op_count == 6


def test_measure_reset_and_op_count(dev: QuantumDevice) -> None:
    dev.gate("X", [0])
    assert [dev.measure(w) for w in range(3)] == [0, 0, 0]
    dev.reset(0)
    dev.reset_all()  # a shot boundary, not an operation
    assert dev.op_count == 5


def test_open_errors() -> None:
    with pytest.raises(errors.InvalidArgumentError, match="the null device takes no configuration keys, got 'x=1'"):
        QuantumDevice.open("null", 2, config="x=1")
    with pytest.raises(errors.InvalidArgumentError, match="num_qubits must be at least 1"):
        QuantumDevice.open("null", 0)
    with pytest.raises(errors.UnknownPluginError):
        QuantumDevice.open("no-such-device", 1)
    out = ffi.new("bl_device **")
    path = plugins.get("device", "null").load().encode()
    assert lib.bl_dev_open(ffi.NULL, ffi.NULL, b"", 1, 0, out) == lib.BL_EINVAL
    assert "exactly one of library" in ffi.string(lib.bl_last_error()).decode()
    api = ffi.new("bl_device_api *")
    assert lib.bl_dev_open(path, api, b"", 1, 0, out) == lib.BL_EINVAL
    assert "got both" in ffi.string(lib.bl_last_error()).decode()
    assert lib.bl_dev_open(b"/nonexistent/libdev.so", ffi.NULL, b"", 1, 0, out) == lib.BL_EBACKEND
    assert "cannot load device runtime '/nonexistent/libdev.so'" in ffi.string(lib.bl_last_error()).decode()
    not_a_device = get_library().encode()  # a shared library without backline_device_v1
    assert lib.bl_dev_open(not_a_device, ffi.NULL, b"", 1, 0, out) == lib.BL_EABI
    assert "does not export backline_device_v1" in ffi.string(lib.bl_last_error()).decode()
    api.abi_version = 99
    assert lib.bl_dev_open(ffi.NULL, api, b"", 1, 0, out) == lib.BL_EABI
    assert "built for device ABI 99, this runtime is device ABI 1" in ffi.string(lib.bl_last_error()).decode()
    api.abi_version = lib.BL_DEVICE_ABI_VERSION
    assert lib.bl_dev_open(ffi.NULL, api, b"", 1, 0, out) == lib.BL_EABI
    assert "leaves a required hook NULL" in ffi.string(lib.bl_last_error()).decode()
    assert out[0] == ffi.NULL


def test_closed_device() -> None:
    dev = QuantumDevice.open("null", 1)
    dev.close()
    dev.close()  # the Python wrapper closes the native device once
    with pytest.raises(errors.LifecycleError, match="closed"):
        dev.measure(0)
    assert lib.bl_dev_gate1(ffi.NULL, 0, 0) == lib.BL_EINVAL
    assert "not an open device" in ffi.string(lib.bl_last_error()).decode()
    assert lib.bl_dev_close(ffi.NULL) == lib.BL_OK
    assert lib.bl_dev_num_qubits(ffi.NULL) == 0 and lib.bl_dev_op_count(ffi.NULL) == 0


def test_c_shorthands(dev: QuantumDevice) -> None:
    d = ffi.cast("bl_device *", dev.handle)
    assert lib.bl_dev_gate1(d, lib.BL_GATE_H, 0) == 0
    assert lib.bl_dev_gate2(d, lib.BL_GATE_CNOT, 0, 1) == 0
    assert lib.bl_dev_rotation(d, lib.BL_GATE_RZ, 2, 0.7) == 0
    assert lib.bl_dev_gate2(d, lib.BL_GATE_CNOT, 0, 0) == lib.BL_EINVAL
    assert lib.bl_dev_measure(d, 1) == 0
    assert dev.op_count == 4


def test_apply_mask_applies_one_gate_per_set_bit() -> None:
    with QuantumDevice.open("null", 10) as dev:
        d = ffi.cast("bl_device *", dev.handle)
        mask = ffi.new("uint8_t[]", [0b1010_0101, 0b11])  # bits 0, 2, 5, 7, 8, 9
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_X, 0, mask, 10) == 0
        assert dev.op_count == 6
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_Z, 3, mask, 7) == 0  # bits 0, 2, 5 -> wires 3, 5, 8
        assert dev.op_count == 9
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_X, 0, ffi.new("uint8_t[]", [0]), 7) == 0  # empty mask
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_X, 5, ffi.NULL, 0) == 0  # no bits
        assert dev.op_count == 9
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_H, 0, mask, 7) == lib.BL_EINVAL
        assert "must be X (1) or Z (3)" in ffi.string(lib.bl_last_error()).decode()
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_X, 4, mask, 7) == lib.BL_EINVAL  # wires 4..10
        assert "wires 4..10 are out of range" in ffi.string(lib.bl_last_error()).decode()
        assert lib.bl_dev_apply_mask(d, lib.BL_GATE_X, 0, ffi.NULL, 7) == lib.BL_EINVAL
        assert "mask is NULL" in ffi.string(lib.bl_last_error()).decode()
        assert dev.op_count == 9
    assert lib.bl_dev_apply_mask(ffi.NULL, lib.BL_GATE_X, 0, mask, 7) == lib.BL_EINVAL


def test_jit_program_runs_on_the_null_device() -> None:
    pytest.importorskip("backline_compiler")
    from backline_compiler import codegen, pipeline

    program = codegen.JitProgram(pipeline.parse(BELL_PROGRAM))
    bell = program.function("bell", "int32", "ptr")
    with QuantumDevice.open("null", 2) as dev:
        for _ in range(5):
            dev.reset_all()
            assert bell(dev.handle) == 0
        assert dev.op_count == 20
    with QuantumDevice.open("null", 1) as dev:  # CNOT 0->1 is out of range: a negative status
        assert bell(dev.handle) < 0
