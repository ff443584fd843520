"""The PennyLane frontend: what it does not compile fails at compile time with a clear message.

Each case checks the exception type and that the message names what was wrong (and, where
there is one, what to do instead).
"""

from __future__ import annotations

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp
from backline_compiler.frontend import capture
from backline_compiler.frontend.values import CaptureError

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled",
                                        "ignore:all_outcomes=False is unsupported")


def device(wires: int = 3, kind: str = "default.clifford") -> bl.Backline:
    return bl.Backline(controller=bl.Controller(device=qml.device(kind, wires=wires)), seed=1)


def compiled(qfunc, shots=2, dev=None):
    return bl.qjit(qml.set_shots(qml.qnode(dev or device())(qfunc), shots))


def t_gate():
    qml.T(0)
    return qml.sample(wires=0)


def controlled_rotation():
    qml.CRX(0.5, [0, 1])
    return qml.sample(wires=0)


def postselect():
    return qml.sample(qml.measure(0, postselect=1))


def counts():
    return qml.counts(wires=0)


def state():
    return qml.state()


def hadamard_observable():
    return qml.expval(qml.Hadamard(0))


def sum_observable():
    return qml.expval(qml.Z(0) + qml.Z(1))


def wire_out_of_range():
    qml.X(5)
    return qml.sample(wires=0)


def non_commuting():
    return qml.expval(qml.X(0)), qml.expval(qml.Z(0))


def unsupported_function(x):
    return qml.sample(jnp.sin(x) > 0)


def adjoint():
    qml.adjoint(qml.S)(0)
    return qml.sample(wires=0)


def float_wire(x):
    qml.X(x)
    return qml.sample(wires=0)


def sample_of_an_array():
    return qml.sample(jnp.array([qml.measure(0), qml.measure(1)]))


def two_dimensional_argument(x):
    return qml.sample(wires=0)


def run_time_wire_in_a_terminal_measurement(k):
    return qml.expval(qml.Z(k))


def float_condition(x):
    qml.cond(x, qml.X)(0)
    return qml.sample(wires=0)


CASES = [
    (t_gate, (), r"gate 'T' is not supported; supported gates: Identity, PauliX, .*, RZ"),
    (controlled_rotation, (), r"gate 'CRX' is not supported; supported gates:"),
    (postselect, (), r"qml.measure\(postselect=...\) is not supported: compiled shots are not discarded"),
    (counts, (), r"measurement 'counts_wires' is not supported; use qml.sample, qml.expval, qml.var or qml.probs"),
    (state, (), r"measurement 'state_wires' is not supported; use qml.sample"),
    (hadamard_observable, (), r"observable 'Hadamard': only Pauli products \(X, Y, Z, I\) can be measured"),
    (sum_observable, (), r"operator 'Sum' is not supported in a compiled Backline QNode"),
    (wire_out_of_range, (), r"PauliX: wire 5 is not one of the device's wires 0..2"),
    (non_commuting, (), r"wire 0 is measured in the X basis and in the Z basis; measurements of one wire must commute"),
    (unsupported_function, (0.5,), r"'sin' is not supported in a compiled Backline QNode"),
    (adjoint, (), r"'adjoint_transform' \(qml.adjoint\) is not supported in a compiled Backline QNode"),
    (float_wire, (1.0,), r"a float value is used where an integer is needed; convert it explicitly"),
    (sample_of_an_array, (),
     (r"qml.sample of an array of shape \(2,\): .*pass the elements as a list, "
      r"e.g. qml.sample\(\[a\[0\], a\[1\], ...\]\)")),
    (two_dimensional_argument, (np.zeros((2, 2)),), r"QNode arguments may be scalars or 1-D arrays"),
    (run_time_wire_in_a_terminal_measurement, (1,), r"qml.expval: terminal measurements need constant wires"),
]


@pytest.mark.parametrize(("qfunc", "args", "message"), CASES, ids=[c[0].__name__ for c in CASES])
def test_unsupported_programs_raise_capture_errors(qfunc, args, message):
    program = compiled(qfunc)
    with pytest.raises(CaptureError, match=message):
        program(*args)
    assert not program.programs  # nothing was compiled (or run)


def test_a_float_condition_is_a_comparison_with_zero():
    """Not an error: jax converts a float condition to bool (x != 0), and so does the program."""
    program = compiled(float_condition)
    assert np.asarray(program(0.5)).tolist() == [[1], [1]]
    assert np.asarray(program(0.0)).tolist() == [[0], [0]]


def test_returning_a_non_measurement():
    """PennyLane refuses the QNode while capturing it; the interpreter refuses such a jaxpr too."""

    def constant():
        return 3

    def mcm():
        return qml.measure(0)

    for qfunc in (constant, mcm):
        with pytest.raises(ValueError, match="Only Measurement Processes can be returned from QNode's"):
            compiled(qfunc)()
    closed = jax.make_jaxpr(lambda x: x + 1)(1)
    with pytest.raises(CaptureError, match=r"a compiled QNode must return measurements \(qml.sample, qml.expval, "
                                           r"qml.var, qml.probs\)"):
        capture.qnode_to_ir(closed.jaxpr, closed.consts, [v.aval for v in closed.jaxpr.invars], num_wires=1,
                            unroll_loops=False, extensions={})


def test_run_time_wire_out_of_range_fails_at_run_time_with_the_device_message():
    def f(k):
        qml.X(k)
        return qml.sample(wires=0)

    from backline_core import _errors as errors

    program = compiled(f)
    assert np.asarray(program(0)).tolist() == [[1], [1]]
    with pytest.raises(errors.InvalidArgumentError, match=r"wire 7 is out of range \(device 'stim' has 3 qubits"):
        program(7)


def test_angles_stim_cannot_simulate_fail_at_run_time():
    def f(x):
        qml.RX(x, 0)
        return qml.sample(wires=0)

    from backline_core import _errors as errors

    with pytest.raises(errors.InvalidArgumentError, match=r"device 'stim' does not support gate RX\(0.3\)"):
        compiled(f)(0.3)
    assert np.asarray(compiled(f, dev=device(kind="null.qubit"))(0.3)).tolist() == [[0], [0]]


def test_shot_vectors_are_refused():
    def f():
        return qml.sample(wires=0)

    with pytest.raises(CaptureError, match=r"needs one shot count: qml.set_shots\(N\) \(shot vectors are not "
                                           r"supported\)"):
        compiled(f, shots=[2, 3])()


def test_qnodes_on_other_devices_are_refused():
    def f():
        return qml.sample(wires=0)

    node = bl.qjit(qml.set_shots(qml.qnode(qml.device("default.qubit", wires=1))(f), 2))
    with pytest.raises(CaptureError, match="qjit compiles QNodes on a Backline device; this QNode runs on "
                                           "<default.qubit"):
        node()


def test_qjit_without_capture_is_refused():
    with pytest.raises(ValueError, match=r"qjit\(capture=False\): Backline compiles captured programs"):
        bl.qjit(lambda: None, capture=False)
