"""The PennyLane frontend: gates, QNode arguments and measurements, against PennyLane.

Every compiled QNode runs on ``default.clifford`` (the ``stim`` runtime) unless a test says
otherwise. Where PennyLane can run the same program (``default.qubit`` under program capture,
``mcm_method="deferred"``), the values are compared with it; result shapes and dtypes are
compared with what PennyLane's capture declares for the QNode (``jax.make_jaxpr(qnode)``).
Circuits are deterministic unless a test checks statistics (those use fixed seeds).
"""

from __future__ import annotations

import ast
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp

from backline_core._abi import get_library

PI = np.pi

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled",
                                        "ignore:Explicitly requested dtype")


def backline(wires: int, kind: str = "default.clifford", seed: int = 1) -> bl.Backline:
    return bl.Backline(controller=bl.Controller(device=qml.device(kind, wires=wires)), seed=seed)


def compiled(qfunc, wires: int, shots: int, *, kind: str = "default.clifford", seed: int = 1):
    return bl.qjit(qml.set_shots(qml.qnode(backline(wires, kind, seed))(qfunc), shots))


def with_capture(fn, *args):
    was = qml.capture.enabled()
    qml.capture.enable()
    try:
        return fn(*args)
    finally:
        if not was:
            qml.capture.disable()


def declared(program, *args) -> list:
    """The result avals PennyLane's capture declares for the QNode behind ``program``."""
    return with_capture(lambda: jax.make_jaxpr(program.fn)(*args).out_avals)


def reference(qfunc, wires: int, shots: int, *args, spare: int = 4):
    """The same QNode on default.qubit under program capture (deferred measurements, which need
    ``spare`` wires for the mid-circuit measurements)."""
    node = qml.set_shots(qml.qnode(qml.device("default.qubit", wires=wires + spare, seed=5),
                                   mcm_method="deferred")(qfunc), shots)
    return with_capture(node, *args)


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def assert_declared(program, result, *args) -> None:
    """Shapes and dtypes of ``result`` are exactly those PennyLane declares."""
    avals = declared(program, *args)
    got = as_tuple(result)
    assert len(got) == len(avals)
    for value, aval in zip(got, avals, strict=True):
        assert isinstance(value, jax.Array)
        assert value.shape == aval.shape, (value.shape, aval.shape)
        assert value.dtype == aval.dtype, (value.dtype, aval.dtype)


def assert_same_values(result, ref) -> None:
    for got, want in zip(as_tuple(result), as_tuple(ref), strict=True):
        np.testing.assert_allclose(np.asarray(got, dtype=float).ravel(), np.asarray(want, dtype=float).ravel(),
                                   atol=1e-6)


# ---- gates and arguments ------------------------------------------------------------------------------

def rotations(x, k):
    qml.RX(x, 0)        # a float QNode argument
    qml.RY(PI, 1)       # a constant
    qml.RZ(PI / 2, 2)   # a phase only
    qml.X(k)            # an integer argument as a wire
    return qml.sample(wires=[0, 1, 2]), qml.expval(qml.Z(0)), qml.var(qml.Z(1)), qml.probs(wires=[0, 1])


@pytest.fixture(scope="module")
def rotations_program():
    return compiled(rotations, 3, 5)


@pytest.mark.parametrize(("x", "k", "bits"), [(0.0, 2, [0, 1, 1]), (PI, 2, [1, 1, 1]), (PI, 0, [0, 1, 0]),
                                              (2 * PI, 1, [0, 0, 0]), (-PI, 0, [0, 1, 0])])
def test_rotations_with_constant_and_argument_angles(rotations_program, x, k, bits):
    result = rotations_program(x, k)
    assert_declared(rotations_program, result, x, k)
    samples, ez0, vz1, probs = result
    np.testing.assert_array_equal(np.asarray(samples), np.tile(bits, (5, 1)))
    assert float(ez0) == 1 - 2 * bits[0]
    assert float(vz1) == 0.0
    expected_probs = np.zeros(4)
    expected_probs[2 * bits[0] + bits[1]] = 1
    np.testing.assert_array_equal(np.asarray(probs), expected_probs)
    assert_same_values(result, reference(rotations, 3, 5, x, k))


def test_integer_argument_as_angle():
    def f(k):
        qml.RX(k * PI, 0)
        return qml.sample(wires=0)

    program = compiled(f, 1, 2)
    assert np.asarray(program(1)).tolist() == [[1], [1]]
    assert np.asarray(program(2)).tolist() == [[0], [0]]
    assert np.asarray(program(3)).tolist() == [[1], [1]]
    assert len(program.programs) == 1  # one program for every int argument


def test_array_argument_elements_and_run_time_index():
    def f(angles, j):
        for w in range(3):
            qml.RX(angles[w], w)
        qml.RY(angles[j], 3)  # an element chosen at run time
        return qml.sample(wires=[0, 1, 2, 3])

    program = compiled(f, 4, 3)
    angles = np.array([PI, 0.0, PI])
    for j, last in [(0, 1), (1, 0), (2, 1)]:
        result = program(angles, j)
        assert_declared(program, result, angles, j)
        assert np.asarray(result).tolist() == [[1, 0, 1, last]] * 3
    assert_same_values(program(angles, 1), reference(f, 4, 3, angles, 1))
    assert len(program.programs) == 1


def test_gate_set_on_a_deterministic_circuit():
    def f():
        qml.Hadamard(0)
        qml.S(0)
        qml.S(0)
        qml.Hadamard(0)      # H Z H = X: wire 0 is |1>
        qml.SX(1)
        qml.SX(1)            # SX^2 = X: wire 1 is |1>
        qml.CNOT([0, 2])     # wire 2 is |1>
        qml.SWAP([2, 3])     # wires 2, 3: |0>, |1>
        qml.CZ([0, 3])       # a phase on |11>: invisible in Z
        qml.PauliY(4)        # |1>
        qml.PauliZ(4)
        qml.Identity(5)
        return qml.sample(wires=range(6))

    program = compiled(f, 6, 2)
    result = program()
    assert np.asarray(result).tolist() == [[1, 1, 0, 1, 1, 0]] * 2
    assert_same_values(result, reference(f, 6, 2))


# ---- observables: basis rotations -----------------------------------------------------------------------

def pauli_observables():
    qml.RY(PI / 2, 0)     # |+>: X = +1
    qml.RX(-PI / 2, 1)    # |+i>: Y = +1
    qml.RX(PI / 2, 2)     # |-i>: Y = -1
    qml.X(3)              # |1>: Z = -1
    qml.Hadamard(4)
    qml.S(4)              # |+i> again
    return (qml.expval(qml.X(0)), qml.expval(qml.Y(1)), qml.expval(qml.Y(2)), qml.expval(qml.Z(3)),
            qml.expval(qml.X(0) @ qml.Y(1) @ qml.Z(3)), qml.var(qml.Y(4)), qml.sample(qml.Y(4)),
            qml.sample(qml.X(0) @ qml.Y(2)), qml.expval(qml.Identity(5)))


def test_pauli_products_are_rotated_into_the_z_basis():
    program = compiled(pauli_observables, 6, 20)
    result = program()
    assert_declared(program, result)
    ex, ey1, ey2, ez, product, var_y, samples_y, samples_xy, ident = (np.asarray(r) for r in result)
    assert (ex, ey1, ey2, ez, product, var_y, ident) == (1.0, 1.0, -1.0, -1.0, -1.0, 0.0, 1.0)
    assert samples_y.tolist() == [1.0] * 20
    assert samples_xy.tolist() == [-1.0] * 20
    assert_same_values(result, reference(pauli_observables, 6, 20))


def test_without_rotation_the_same_states_are_random_in_z():
    """The test above is not vacuous: in the Z basis these states give both outcomes."""

    def f():
        qml.RY(PI / 2, 0)
        qml.RX(-PI / 2, 1)
        return qml.sample(wires=[0, 1])

    samples = np.asarray(compiled(f, 2, 200, seed=11)())
    for wire in (0, 1):
        assert 40 < samples[:, wire].sum() < 160


# ---- mid-circuit measurements and classical values ----------------------------------------------------------

def mcm_measurements(k):
    qml.X(0)
    m0 = qml.measure(0)
    m1 = qml.measure(1)
    return (qml.sample(m0), qml.expval(m0), qml.var(m1), qml.probs(op=[m0, m1]), qml.sample([m0, m1]),
            qml.expval(m0 + m1), qml.probs(op=m0), qml.sample(m0 + k))


def test_measurements_of_mid_circuit_measurements():
    program = compiled(mcm_measurements, 2, 4)
    result = program(3)
    assert_declared(program, result, 3)
    sample_m0, e_m0, v_m1, probs01, sample01, e_sum, probs0, sample_k = (np.asarray(r) for r in result)
    assert sample_m0.tolist() == [[1]] * 4
    assert (float(e_m0), float(v_m1), float(e_sum)) == (1.0, 0.0, 1.0)
    assert probs01.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert sample01.tolist() == [[1, 0]] * 4
    assert probs0.tolist() == [0.0, 1.0]
    assert sample_k.tolist() == [[4]] * 4
    ref = reference(mcm_measurements, 2, 4, 3)
    # default.qubit returns the values (its shapes differ from the declared ones for single MCMs)
    assert_same_values(result[:7], ref[:7])


def test_statistics_of_random_mid_circuit_measurements_are_consistent():
    """expval/var/probs of an MCM (and of float values derived from it) are the statistics of its samples."""

    def f(scale):
        qml.Hadamard(0)
        m = qml.measure(0)
        return (qml.sample(m), qml.expval(m), qml.var(m), qml.probs(op=m), qml.expval(scale * m),
                qml.var(m * scale), qml.expval(1 - 2 * m))

    program = compiled(f, 1, 400, seed=3)
    result = program(2.5)
    assert_declared(program, result, 2.5)
    samples, mean, var, probs, scaled, scaled_var, z = (np.asarray(r) for r in result)
    ones = samples.ravel().astype(float)
    assert 100 < ones.sum() < 300  # random, not constant
    assert float(mean) == pytest.approx(ones.mean())
    assert float(var) == pytest.approx(ones.var())
    np.testing.assert_allclose(probs, [1 - ones.mean(), ones.mean()])
    assert float(scaled) == pytest.approx(2.5 * ones.mean())
    assert float(scaled_var) == pytest.approx(6.25 * ones.var())
    assert float(z) == pytest.approx(1 - 2 * ones.mean())


def test_float_classical_values_keep_their_fraction():
    def f(x):
        qml.X(0)
        m = qml.measure(0)
        return qml.expval(x * m), qml.expval(x / 4), qml.var(x + m), qml.sample(jnp.int32(x * 3))

    program = compiled(f, 1, 3)
    result = program(1.25)
    assert_declared(program, result, 1.25)
    assert float(result[0]) == 1.25
    assert float(result[1]) == 0.3125
    assert float(result[2]) == 0.0
    assert np.asarray(result[3]).tolist() == [[3]] * 3


# ---- whole-register measurements, statistics, devices ------------------------------------------------------

def test_sample_and_probs_of_all_wires():
    def f():
        qml.X(0)
        qml.X(2)
        return qml.sample(), qml.probs()

    program = compiled(f, 3, 2)
    result = program()
    assert_declared(program, result)
    assert np.asarray(result[0]).tolist() == [[1, 0, 1]] * 2
    assert np.asarray(result[1]).tolist() == [0, 0, 0, 0, 0, 1, 0, 0]
    assert_same_values(result, reference(f, 3, 2, spare=0))


def ghz():
    qml.Hadamard(0)
    qml.CNOT([0, 1])
    qml.CNOT([1, 2])
    return qml.sample([qml.measure(0), qml.measure(1), qml.measure(2)]), qml.probs(wires=[0, 1, 2])


def test_ghz_statistics_and_seeds():
    program = compiled(ghz, 3, 200, seed=1)
    samples, probs = program()
    assert_declared(program, (samples, probs))
    samples = np.asarray(samples)
    assert samples.shape == (200, 3)
    assert (samples == samples[:, :1]).all()          # every shot: all equal
    assert 60 < samples[:, 0].sum() < 140             # both branches
    # the wires were measured mid-circuit: the terminal probs see the same collapsed state
    np.testing.assert_allclose(np.asarray(probs)[[0, 7]].sum(), 1.0)
    np.testing.assert_allclose(np.asarray(probs)[7], samples[:, 0].mean())

    again = np.asarray(compiled(ghz, 3, 200, seed=1)()[0])
    other = np.asarray(compiled(ghz, 3, 200, seed=2)()[0])
    np.testing.assert_array_equal(again, samples)     # same seed, same shots
    assert not np.array_equal(other, samples)
    assert not np.array_equal(np.asarray(program()[0]), samples)  # each run draws the next seed


def test_expval_statistics_against_default_qubit():
    def f():
        qml.Hadamard(0)
        qml.CNOT([0, 1])
        return qml.expval(qml.Z(0)), qml.expval(qml.Z(0) @ qml.Z(1)), qml.var(qml.Z(1)), qml.probs(wires=[1])

    result = compiled(f, 2, 400, seed=9)()
    exact = with_capture(qml.qnode(qml.device("default.qubit", wires=2))(f))  # analytic
    np.testing.assert_allclose(float(result[1]), float(exact[1]))            # the parity is exact: +1
    for got, want in zip(result, exact, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=0.15)
    assert float(result[0]) != 0.0 or float(result[2]) != 1.0  # sampled, not analytic


def test_null_qubit_runs_and_measures_zero():
    def f(x):
        qml.X(0)
        qml.RX(x, 1)      # any angle: the null device accepts every valid operation
        m = qml.measure(0)
        return qml.sample(wires=[0, 1]), qml.sample(m)

    program = compiled(f, 2, 3, kind="null.qubit")
    assert "runtime='null'" in repr(program.device)
    samples, mcm = program(0.3)
    assert np.asarray(samples).tolist() == [[0, 0]] * 3
    assert np.asarray(mcm).tolist() == [[0]] * 3


def test_plain_program_capture_runs_on_the_backline_device():
    def f(x):
        qml.RX(x, 0)
        return qml.sample(wires=0)

    node = qml.set_shots(qml.qnode(backline(1))(f), 2)
    assert np.asarray(with_capture(node, PI)).tolist() == [[1], [1]]


X64_PROGRAM = """
import warnings
warnings.simplefilter("ignore")
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jax.numpy as jnp
import pennylane as qml
import backline_compiler as bl

dev = bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=3)), seed=1)
abi = bl.runtime_declare("bl_abi_version", "() -> i64")

@bl.qjit
@qml.set_shots(2)
@qml.qnode(dev)
def f(n, x, arr, i):
    @qml.for_loop(0, n, 1)
    def loop(j, acc):
        qml.X(j)
        return acc + j
    acc = loop(0)
    m = qml.measure(0)
    qml.RX(x, 1)
    return (qml.sample(acc), qml.sample(bl.runtime_call(abi)), qml.expval(x * m), qml.sample(arr[i]),
            qml.sample(wires=[0, 1, 2]), qml.sample(jnp.int64(2**40) // n - 2**41), qml.expval(x / 3))

result = f(3, np.pi, np.array([5, 6, 2**35]), 2)
print(repr([np.asarray(v).tolist() for v in result]))
print(repr([str(v.dtype) for v in result]))
"""


def test_64_bit_values_under_jax_x64():
    """With jax_enable_x64 (a global switch: run in a subprocess), 64-bit values are not truncated."""
    compiler_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (compiler_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", X64_PROGRAM], check=False, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values, dtypes = (ast.literal_eval(line) for line in proc.stdout.strip().splitlines()[-2:])
    abi = ctypes.CDLL(get_library()).bl_abi_version()
    assert values == [[[3]] * 2, [[abi]] * 2, PI, [[2**35]] * 2, [[1, 0, 1]] * 2, [[2**40 // 3 - 2**41]] * 2, PI / 3]
    assert dtypes == ["int64", "int64", "float64", "int64", "int64", "int64", "float64"]
