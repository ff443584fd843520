"""The PennyLane frontend: ``decode`` against the core's Steane coprocessor, and its errors.

The Steane lookup decoder (``steane``, reply_bits=7) answers a 3-bit syndrome of the code's
check matrix with the one data qubit to flip; ``echo`` copies the payload back and declares no
reply width. Each error must say what was wrong and what to do.
"""

from __future__ import annotations

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp
from backline_compiler.frontend.decode import DecodeError

from backline_core.sdk import STEANE_H

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled")

#: The Steane code's check matrix (Hx = Hz), as encode-steane and the decoder use it (backline/steane.h).
H = STEANE_H
DATA, ANCILLAS = list(range(7)), [7, 8, 9]


def coprocessor(name: str = "dec", fn: str = "steane", **init_args) -> bl.Coprocessor:
    return bl.Coprocessor(name=name, coprocessor_fn=fn, runs_in="thread", init_args=init_args)


def device(coprocessors, wires: int = 10, **controller_args) -> bl.Backline:
    controller = bl.Controller(device=qml.device("default.clifford", wires=wires), init_args=controller_args)
    return bl.Backline(controller=controller, coprocessors=list(coprocessors), transport="memcpy", seed=1)


def compiled(dev, qfunc, shots: int = 2):
    return bl.qjit(qml.set_shots(qml.qnode(dev)(qfunc), shots))


def measure_syndrome():
    """The Z checks of H on the data qubits, through the three ancillas."""
    syndrome = []
    for r, row in enumerate(H):
        for q, h in enumerate(row):
            if h:
                qml.CNOT([q, ANCILLAS[r]])
        syndrome.append(qml.measure(ANCILLAS[r]))
    return syndrome


def correct_one_flip(q, flip):
    qml.cond(flip == 1, qml.X)(q)               # an X error on data qubit q (or none)
    syndrome = measure_syndrome()
    correction = bl.decode(jnp.array(syndrome), decoder_id=1)
    for j in DATA:
        qml.cond(correction[j], qml.X)(j)       # apply the correction
    return (qml.sample(syndrome), qml.sample([correction[j] for j in DATA]), qml.sample(wires=DATA))


@pytest.fixture(scope="module")
def steane_program():
    return compiled(device([coprocessor()]), correct_one_flip)


@pytest.mark.parametrize("q", range(7))
def test_steane_decode_corrects_each_single_flip(steane_program, q):
    syndrome, correction, data = steane_program(q, 1)
    column = [row[q] for row in H]
    assert np.asarray(syndrome).tolist() == [column] * 2          # the error is seen
    assert np.asarray(correction).tolist() == [[int(j == q) for j in DATA]] * 2
    assert np.asarray(data).tolist() == [[0] * 7] * 2               # and undone


def test_steane_decode_without_error_corrects_nothing(steane_program):
    syndrome, correction, data = steane_program(3, 0)
    assert np.asarray(syndrome).tolist() == [[0, 0, 0]] * 2
    assert np.asarray(correction).tolist() == [[0] * 7] * 2
    assert np.asarray(data).tolist() == [[0] * 7] * 2
    assert "bqec.decode" in steane_program.mlir
    assert 'coprocessor = "dec"' in steane_program.mlir


def test_two_coprocessors_with_the_one_chosen():
    """decode(coprocessor=...) routes by name: the Steane answer from one, the echo from the other."""

    def f():
        qml.X(2)
        syndrome = measure_syndrome()                        # column 2 of H: [1, 1, 1]
        qml.X(0)
        extra = qml.measure(0)                               # 1
        steane = bl.decode(jnp.array(syndrome), decoder_id=0, coprocessor="lut")
        echo = bl.decode(jnp.array([syndrome[0], extra, 0, 1]), decoder_id=1, coprocessor="mirror",
                         correction_bits=4)
        return qml.sample([steane[j] for j in DATA]), qml.sample([echo[j] for j in range(4)])

    dev = device([coprocessor("mirror", "echo"), coprocessor("lut", "steane")])
    steane, echo = compiled(dev, f)()
    assert np.asarray(steane).tolist() == [[0, 0, 1, 0, 0, 0, 0]] * 2
    assert np.asarray(echo).tolist() == [[1, 1, 0, 1]] * 2


def test_decode_results_as_classical_values():
    def f(q, flip):
        qml.cond(flip == 1, qml.X)(q)
        correction = bl.decode(jnp.array(measure_syndrome()), decoder_id=0)
        weight = jnp.sum(correction)
        where = jnp.sum(correction * jnp.arange(7))
        qml.cond(weight == 1, qml.X)(10)
        return qml.sample(weight), qml.sample(where), qml.sample(wires=10)

    program = compiled(device([coprocessor()], wires=11), f, shots=1)
    for q in (0, 4, 6):
        weight, where, flag = program(q, 1)
        assert np.asarray(weight).tolist() == [[1]]
        assert np.asarray(where).tolist() == [[q]]
        assert np.asarray(flag).tolist() == [[1]]
    weight, where, flag = program(4, 0)
    assert (np.asarray(weight).tolist(), np.asarray(flag).tolist()) == ([[0]], [[0]])


# ---- errors ---------------------------------------------------------------------------------------------------

def syndrome_qfunc(**kwargs):
    def f():
        correction = bl.decode(jnp.array([qml.measure(0), qml.measure(1), qml.measure(2)]), **kwargs)
        return qml.sample(correction[0])

    return f


@pytest.mark.parametrize("syndrome", [[0, 1, 1], np.array([1, 0, 0])])
def test_decode_called_eagerly(syndrome):
    with pytest.raises(DecodeError, match=r"outside a Backline QNode: call it inside a QNode whose device is "
                                          r"backline_compiler.Backline\(...\), compiled with backline_compiler.qjit"):
        bl.decode(syndrome, decoder_id=1)


def test_decode_in_a_qnode_on_default_qubit():
    node = qml.set_shots(qml.qnode(qml.device("default.qubit", wires=3))(syndrome_qfunc(decoder_id=1)), 2)
    qml.capture.enable()
    try:
        with pytest.raises(DecodeError, match=r"runs only in a QNode on a backline_compiler.Backline device.*"
                                              r"backline_compiler.qjit"):
            node()
    finally:
        qml.capture.disable()
    # under qjit, the same QNode is refused for its device (the trace fails first, at the decode)
    with pytest.raises(DecodeError, match=r"runs only in a QNode on a backline_compiler.Backline device"):
        bl.qjit(node)()


def test_decode_with_correction_bits_in_a_qnode_on_default_qubit():
    """Given the width, the trace succeeds and the decode itself refuses to run off a Backline device."""

    def f():
        m = qml.measure(0)
        correction = bl.decode(jnp.array([m, m]), decoder_id=1, correction_bits=2)
        qml.cond(correction[0], qml.X)(1)
        return qml.expval(qml.Z(1))

    node = qml.set_shots(qml.qnode(qml.device("default.qubit", wires=2), mcm_method="single-branch-statistics")(f),
                         2)
    qml.capture.enable()
    try:
        with pytest.raises(DecodeError, match="outside a Backline QNode"):
            node()
    finally:
        qml.capture.disable()


def test_several_coprocessors_and_none_chosen():
    program = compiled(device([coprocessor("a"), coprocessor("b")]), syndrome_qfunc(decoder_id=1))
    with pytest.raises(DecodeError,
                       match=r"several coprocessors \(a, b\) and none was chosen; pass coprocessor=<name>"):
        program()


def test_no_coprocessor():
    program = compiled(device([]), syndrome_qfunc(decoder_id=1))
    with pytest.raises(DecodeError, match=r"has no coprocessor; add one to coprocessors=\[...\]"):
        program()


def test_unknown_coprocessor_name():
    program = compiled(device([coprocessor("a"), coprocessor("b")]), syndrome_qfunc(decoder_id=1, coprocessor="c"))
    with pytest.raises(DecodeError, match=r"decode\(coprocessor='c'\): no such coprocessor; pass one of this "
                                          r"Backline device's coprocessors: 'a', 'b'"):
        program()


@pytest.mark.parametrize("coprocessor_arg", [3, ""])
def test_coprocessor_name_of_the_wrong_kind(coprocessor_arg):
    with pytest.raises(DecodeError, match="give the coprocessor's name"):
        bl.decode([1], coprocessor=coprocessor_arg)


def test_syndrome_wider_than_the_session_allows():
    def f():
        ms = jnp.array([qml.measure(i % 4) for i in range(300)])
        correction = bl.decode(ms, decoder_id=0, correction_bits=8)
        return qml.sample(correction[0])

    dev = device([coprocessor("wide", "echo", slot_bytes=64)], wires=4, slot_bytes=64)
    with pytest.raises(DecodeError, match=r"a 300-bit syndrome \(38 bytes\) with a 8-bit correction \(1 bytes\) is "
                                          r"wider than the session with 'wide' allows \(32 bytes per message\); raise "
                                          r"slot_bytes in the nodes' init_args"):
        compiled(dev, f)()


def test_syndrome_at_the_session_limit_runs():
    """The limit is not off by one: 256 bits (32 bytes) fit a 64-byte slot and come back through echo."""

    def f():
        qml.X(1)
        ms = jnp.array([qml.measure(i % 4) for i in range(256)])
        correction = bl.decode(ms, decoder_id=0, correction_bits=256)
        return qml.sample([correction[j] for j in (0, 1, 2, 5, 255)])

    dev = device([coprocessor("wide", "echo", slot_bytes=64)], wires=4, slot_bytes=64)
    assert np.asarray(compiled(dev, f)()).tolist() == [[0, 1, 0, 1, 0]] * 2


@pytest.mark.parametrize("decoder_id", [2, 5, 255])
def test_decoder_id_the_function_does_not_serve(decoder_id):
    program = compiled(device([coprocessor()]), syndrome_qfunc(decoder_id=decoder_id))
    with pytest.raises(DecodeError, match=rf"decode\(decoder_id={decoder_id}\): coprocessor 'dec' runs 'steane', "
                                          r"which is bound to decoder_ids \[0, 1\]; pass one of those"):
        program()


@pytest.mark.parametrize("decoder_id", [-1, 256, 1.0, True, "0"])
def test_decoder_id_out_of_range(decoder_id):
    with pytest.raises(DecodeError, match=r"decoder_id must be an int in \[0, 256\)"):
        bl.decode([1, 0, 0], decoder_id=decoder_id)


def test_correction_width_unknown():
    program = compiled(device([coprocessor(fn="echo")]), syndrome_qfunc(decoder_id=0))
    with pytest.raises(DecodeError, match=r"the function 'echo' of coprocessor 'dec' does not say how wide its reply "
                                          r"is; pass correction_bits=<number of bits>"):
        program()


@pytest.mark.parametrize("bits", [0, -3, 2.5, True])
def test_correction_bits_must_be_a_positive_int(bits):
    with pytest.raises(DecodeError, match=r"correction_bits=.*must be a positive int"):
        bl.decode([1, 0, 0], correction_bits=bits)


def test_empty_syndrome():
    def f():
        return qml.sample(bl.decode(jnp.zeros(0, dtype=jnp.int32), correction_bits=3)[0])

    with pytest.raises(DecodeError, match="the syndrome is empty"):
        compiled(device([coprocessor(fn="echo")]), f)()
