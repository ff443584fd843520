"""The stim device through libbackline's device ABI: entanglement, determinism, noise rates,
refused operations, and a JIT-compiled program calling bl_dev_* on it."""

from __future__ import annotations

import math

import pytest

from backline_core import InvalidArgumentError, plugins
from backline_core.sdk import QuantumDevice
from backline_core.testing import BELL_PROGRAM


def bell_shots(dev: QuantumDevice, shots: int) -> list[tuple[int, int]]:
    out = []
    for _ in range(shots):
        dev.reset_all()
        dev.gate("H", [0])
        dev.gate("CNOT", [0, 1])
        out.append((dev.measure(0), dev.measure(1)))
    return out


def test_plugin_returns_an_in_process_vtable() -> None:
    assert isinstance(plugins.get("device", "stim").load(), int)


def test_bell_state_correlations() -> None:
    with QuantumDevice.open("stim", 2) as dev:
        outcomes = bell_shots(dev, 1000)
    assert all(a == b for a, b in outcomes)
    ones = sum(a for a, _ in outcomes)
    assert 350 < ones < 650  # both values occur, about equally


def test_ghz_three_qubits() -> None:
    with QuantumDevice.open("stim", 3) as dev:
        seen = set()
        for _ in range(200):
            dev.reset_all()
            dev.gate("H", [0])
            dev.gate("CNOT", [0, 1])
            dev.gate("CNOT", [1, 2])
            seen.add(tuple(dev.measure(w) for w in range(3)))
        assert dev.op_count == 200 * 6
    assert seen == {(0, 0, 0), (1, 1, 1)}


def test_fixed_seed_is_deterministic() -> None:
    runs = []
    for _ in range(2):
        with QuantumDevice.open("stim", 2, seed=1234) as dev:
            runs.append(bell_shots(dev, 100))
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 2
    with QuantumDevice.open("stim", 2, seed=4321) as dev:
        assert bell_shots(dev, 100) != runs[0]


def test_clifford_gates_and_rotations() -> None:
    with QuantumDevice.open("stim", 2, seed=5) as dev:
        dev.gate("X", [0])
        dev.gate("SWAP", [0, 1])
        assert (dev.measure(0), dev.measure(1)) == (0, 1)
        dev.reset(1)
        assert dev.measure(1) == 0
        dev.gate("RX", [0], [math.pi])  # X up to phase
        assert dev.measure(0) == 1
        dev.gate("RY", [0], [-math.pi])  # Y up to phase: back to |0>
        assert dev.measure(0) == 0
        dev.gate("RX", [0], [math.pi / 2])
        dev.gate("RX", [0], [3 * math.pi / 2])  # the two quarter turns cancel
        assert dev.measure(0) == 0
        dev.gate("H", [0])
        dev.gate("RZ", [0], [math.pi / 2])
        dev.gate("S", [0])  # H, then Z (up to phase) -> |->, H -> |1>
        dev.gate("H", [0])
        assert dev.measure(0) == 1
        dev.gate("SX", [1])
        dev.gate("SX", [1])
        assert dev.measure(1) == 1
        dev.gate("I", [0])
        dev.gate("SDG", [0])
        dev.gate("CZ", [0, 1])


@pytest.mark.parametrize("channel, p, flips", [("X_FLIP", 0.2, 1.0), ("DEPOLARIZE1", 0.3, 2 / 3)])
def test_noise_rates(channel: str, p: float, flips: float) -> None:
    """A measured |0> flips with probability p (X_FLIP) or 2p/3 (DEPOLARIZE1: X or Y)."""
    n = 20_000
    with QuantumDevice.open("stim", 1, seed=99) as dev:
        ones = 0
        for _ in range(n):
            dev.noise(channel, [0], p)
            ones += dev.measure(0)
            dev.reset(0)
    rate = p * flips
    sigma = math.sqrt(rate * (1 - rate) / n)
    assert abs(ones / n - rate) < 4 * sigma


def test_two_qubit_noise_and_other_flips() -> None:
    with QuantumDevice.open("stim", 2, seed=3) as dev:
        dev.noise("DEPOLARIZE2", [0, 1], 1.0)
        dev.noise("Z_FLIP", [0], 1.0)  # Z on a measured basis state: no flip
        dev.noise("Y_FLIP", [1], 0.0)
        assert dev.op_count == 3


def test_unsupported_rotation_angle() -> None:
    with QuantumDevice.open("stim", 1) as dev:
        with pytest.raises(InvalidArgumentError, match=r"device 'stim' does not support gate RX\(0.3\) on wire 0"):
            dev.gate("RX", [0], [0.3])
        assert dev.op_count == 0
        dev.gate("RX", [0], [math.pi / 2])  # the device still works
        assert dev.op_count == 1


def test_config_keys_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="the stim device takes no configuration keys, got 'seed'"):
        QuantumDevice.open("stim", 2, config="seed=3")


def test_jit_program_on_the_stim_device() -> None:
    pytest.importorskip("backline_compiler")
    from backline_compiler import codegen, pipeline

    program = codegen.JitProgram(pipeline.parse(BELL_PROGRAM))
    bell = program.function("bell", "int32", "ptr")
    with QuantumDevice.open("stim", 2, seed=11) as dev:
        results = []
        for _ in range(200):
            dev.reset_all()
            results.append(bell(dev.handle))
    assert set(results) == {0, 3}  # both qubits 0 or both 1, never mixed


def test_a_float32_quarter_turn_is_a_clifford_and_a_small_angle_is_not() -> None:
    import numpy as np

    with QuantumDevice.open("stim", 1, seed=1) as dev:
        dev.gate("RX", [0], [float(np.float32(np.pi))])  # 3.1415927: an X, within float32 rounding
        assert dev.measure(0) == 1
        with pytest.raises(Exception, match="does not support gate RX"):
            dev.gate("RX", [0], [1e-3])
