"""The PennyLane frontend: control flow and classical computation inside compiled QNodes.

``qml.cond`` (call form, ``elifs``, ``false_fn``, on MCMs, on comparisons, with results),
``qml.for_loop`` (static and run-time bounds, negative and run-time steps, carried values),
``qml.while_loop``, Python loops, ``measure(reset=True)``, run-time indexing, jnp reductions of
MCMs, nesting; and classical operations whose answers jax gives (conversions, division,
unsigned values, ``x.at[i].set``). Everything runs on ``default.clifford`` (stim), with seeds.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled")


def compiled(qfunc, wires: int, shots: int, *, seed: int = 1):
    dev = bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=wires)), seed=seed)
    return bl.qjit(qml.set_shots(qml.qnode(dev)(qfunc), shots))


def rows(result) -> list:
    return np.asarray(result).tolist()


# ---- qml.cond ----------------------------------------------------------------------------------------------

def test_cond_call_form_on_mcms_and_comparisons():
    def f():
        qml.X(0)
        m = qml.measure(0)       # 1
        n = qml.measure(1)       # 0
        qml.cond(m, qml.X)(2)            # an MCM as the condition: taken
        qml.cond(n, qml.X)(3)            # not taken
        qml.cond(m == 0, qml.X)(4)       # a comparison: not taken
        qml.cond(m + n == 1, qml.X)(5)   # taken
        return qml.sample(wires=[2, 3, 4, 5])

    assert rows(compiled(f, 6, 3)()) == [[1, 0, 0, 1]] * 3


def branches(k):
    def first():
        qml.X(0)

    def second():
        qml.X(1)

    def third():
        qml.X(2)

    def otherwise():
        qml.X(0)
        qml.X(1)
        qml.X(2)

    qml.cond(k == 0, first, false_fn=otherwise, elifs=((k == 1, second), (k == 2, third)))()
    return qml.sample(wires=[0, 1, 2])


@pytest.fixture(scope="module")
def branches_program():
    return compiled(branches, 3, 2)


@pytest.mark.parametrize(("k", "bits"), [(0, [1, 0, 0]), (1, [0, 1, 0]), (2, [0, 0, 1]), (3, [1, 1, 1]),
                                         (-1, [1, 1, 1])])
def test_cond_with_elifs_and_false_fn_on_an_argument(branches_program, k, bits):
    assert rows(branches_program(k)) == [bits] * 2
    assert len(branches_program.programs) == 1


def test_cond_branches_on_mcms_with_elifs():
    def f(a):
        qml.cond(a == 1, qml.X)(0)
        m0 = qml.measure(0)
        qml.X(1)
        m1 = qml.measure(1)

        def on_m0():
            qml.X(2)

        def on_m1():
            qml.X(3)

        qml.cond(m0, on_m0, elifs=((m1, on_m1),))()
        return qml.sample(wires=[2, 3])

    program = compiled(f, 4, 2)
    assert rows(program(1)) == [[1, 0]] * 2   # m0 = 1: the first branch only
    assert rows(program(0)) == [[0, 1]] * 2   # m0 = 0, m1 = 1: the elif


def test_cond_branches_returning_operators_apply_them():
    """``qml.cond(c, qml.X, false_fn=qml.Z)(w)``: each branch returns its operator (PennyLane applies it)."""

    def f():
        m = qml.measure(0)                                   # 0
        qml.cond(m == 0, qml.X, false_fn=qml.Z)(1)           # X
        qml.cond(m == 1, qml.X, false_fn=qml.Hadamard)(2)    # H
        qml.cond(m == 1, qml.X, false_fn=qml.Hadamard)(2)    # H again: back to |0>
        return qml.sample(wires=[1, 2])

    assert rows(compiled(f, 3, 4)()) == [[1, 0]] * 4


def test_cond_with_results():
    def f(k):
        m = qml.measure(0)

        def yes():
            return jnp.array([1, 2]), 3.5

        def no():
            return jnp.array([4, 5]), -1.0

        a, x = qml.cond(k > 0, yes, no)()    # on an argument
        b, y = qml.cond(m, yes, no)()        # on an MCM (0: no)
        return qml.sample([a[0], a[1], b[0], b[1]]), qml.expval(x), qml.expval(y)

    program = compiled(f, 1, 2)
    arrays, x, y = program(1)
    assert rows(arrays) == [[1, 2, 4, 5]] * 2
    assert (float(x), float(y)) == (3.5, -1.0)
    arrays, x, y = program(0)
    assert rows(arrays) == [[4, 5, 4, 5]] * 2
    assert float(x) == -1.0


def test_cond_on_a_random_mcm_follows_it_shot_by_shot():
    def f():
        qml.Hadamard(0)
        m = qml.measure(0)
        qml.cond(m, qml.X)(1)
        return qml.sample(m), qml.sample(wires=1)

    m, copy = compiled(f, 2, 100, seed=4)()
    assert 20 < int(np.sum(m)) < 80
    np.testing.assert_array_equal(np.asarray(m), np.asarray(copy))


# ---- qml.for_loop -------------------------------------------------------------------------------------------

def test_for_loop_static_bounds_with_carried_values():
    def f():
        @qml.for_loop(0, 4, 1)
        def loop(i, total, arr):
            qml.X(i)
            m = qml.measure(i)
            return total + i * m, arr.at[i % 2].add(m)

        total, arr = loop(0, jnp.array([10, 20]))
        return qml.sample(total), qml.sample([arr[0], arr[1]]), qml.sample(wires=[0, 1, 2, 3])

    total, arr, wires = compiled(f, 4, 2)()
    assert rows(total) == [[6]] * 2
    assert rows(arr) == [[12, 22]] * 2
    assert rows(wires) == [[1, 1, 1, 1]] * 2


def for_dynamic(start, stop, step):
    @qml.for_loop(start, stop, step)
    def loop(i, acc):
        qml.X(i)
        return acc * 10 + i + 1

    acc = loop(0)
    return qml.sample(acc), qml.sample(wires=[0, 1, 2, 3])


@pytest.fixture(scope="module")
def for_dynamic_program():
    return compiled(for_dynamic, 4, 2)


@pytest.mark.parametrize(("start", "stop", "step"), [(0, 3, 1), (1, 4, 2), (0, 0, 1), (3, -1, -1), (3, 0, -2),
                                                     (0, 4, -1), (3, 3, -1), (2, 4, 0), (4, 2, 0)])
def test_for_loop_run_time_bounds_and_step(for_dynamic_program, start, stop, step):
    expected = list(range(start, stop, step)) if step else []   # a run-time step of 0: no iteration
    acc = 0
    bits = [0, 0, 0, 0]
    for i in expected:
        acc = acc * 10 + i + 1
        bits[i] ^= 1
    acc_result, wires = for_dynamic_program(start, stop, step)
    assert rows(acc_result) == [[acc]] * 2
    assert rows(wires) == [bits] * 2
    assert len(for_dynamic_program.programs) == 1


@pytest.mark.parametrize("n", [0, 1, 4])
def test_for_loop_negative_static_step_with_a_run_time_bound(n):
    """A negative step makes PennyLane count iterations with float arithmetic (ceil + float -> int)."""

    def f(start):
        @qml.for_loop(start, -1, -1)
        def loop(i, acc):
            qml.X(i)
            return acc * 10 + i

        return qml.sample(loop(0)), qml.sample(wires=[0, 1, 2, 3])

    expected = list(range(n - 1, -1, -1))
    acc, wires = compiled(f, 4, 1)(n - 1)
    assert rows(acc) == [[int("".join(map(str, expected)) or "0")]]
    assert rows(wires) == [[1 if w in expected else 0 for w in range(4)]]


# ---- while loops, Python loops, resets -------------------------------------------------------------------------

def test_while_loop_on_an_argument():
    def f(n):
        @qml.while_loop(lambda i, acc: i < n)
        def loop(i, acc):
            qml.X(i)
            return i + 1, acc + 2 * i

        i, acc = loop(0, 0)
        return qml.sample(i), qml.sample(acc), qml.sample(wires=[0, 1, 2])

    program = compiled(f, 3, 1)
    for n, bits in [(0, [0, 0, 0]), (2, [1, 1, 0]), (3, [1, 1, 1])]:
        i, acc, wires = program(n)
        assert rows(i) == [[n]]
        assert rows(acc) == [[n * (n - 1)]]
        assert rows(wires) == [bits]


def test_repeat_until_success_while_loop_on_mcms():
    def f():
        qml.Hadamard(0)
        first = qml.measure(0, reset=True)

        @qml.while_loop(lambda m, tries: m == 1)
        def retry(m, tries):
            qml.Hadamard(0)
            return qml.measure(0, reset=True), tries + 1

        m, tries = retry(first, 0)
        return qml.sample(m), qml.sample(tries), qml.sample(first)

    m, tries, first = (np.asarray(r).ravel() for r in compiled(f, 1, 200, seed=5)())
    assert (m == 0).all()
    assert ((tries == 0) == (first == 0)).all()   # retried exactly when the first try gave 1
    assert tries.max() >= 2                        # several tries happen
    assert 60 < (tries == 0).sum() < 140


def test_python_loops_unroll():
    def f():
        for w in range(3):
            qml.X(w)
        ms = [qml.measure(w) for w in range(3)]
        total = 0
        for m in ms:
            total = total + m
        return qml.sample(total), qml.sample(wires=[0, 1, 2])

    total, wires = compiled(f, 3, 2)()
    assert rows(total) == [[3]] * 2
    assert rows(wires) == [[1, 1, 1]] * 2


def test_measure_with_reset():
    def f():
        qml.X(0)
        m = qml.measure(0, reset=True)
        again = qml.measure(0)
        qml.X(1)
        n = qml.measure(1, reset=True)
        return qml.sample([m, again, n]), qml.sample(wires=[0, 1])

    ms, wires = compiled(f, 2, 2)()
    assert rows(ms) == [[1, 0, 1]] * 2
    assert rows(wires) == [[0, 0]] * 2


# ---- arrays of MCMs, indexing, nesting ---------------------------------------------------------------------------

def mcm_arrays(i):
    qml.X(0)
    qml.X(2)
    ms = jnp.array([qml.measure(0), qml.measure(1), qml.measure(2), qml.measure(3)])
    return (qml.sample(ms[i]), qml.sample(jnp.sum(ms)), qml.sample(jnp.sum(ms) % 2),
            qml.sample(jnp.bitwise_xor.reduce(ms)), qml.sample(ms[0] ^ ms[1] ^ ms[2]),
            qml.sample(jnp.any(ms[1:] == 1)), qml.sample(jnp.max(ms)), qml.sample(jnp.sum(ms[::2])),
            qml.sample(jnp.sum(ms[jnp.array([i, 1, i])] * jnp.array([1, 10, 100]))),
            qml.sample(ms.at[i].get(mode="fill", fill_value=7)))


@pytest.mark.parametrize("i", [0, 1, 2, 3, -1, -4, 7, -9])
def test_run_time_indexing_and_reductions_of_mcms(i):
    program = mcm_arrays_program()
    values = [int(np.asarray(r).ravel()[0]) for r in program(i)]
    ms = jnp.array([1, 0, 1, 0])
    at = jax.jit(lambda a, j: (a[j], jnp.sum(a[jnp.array([j, 1, j])] * jnp.array([1, 10, 100])),
                               a.at[j].get(mode="fill", fill_value=7)))(ms, i)
    expected = [int(at[0]), 2, 0, 0, 0, 1, 1, 2, int(at[1]), int(at[2])]
    assert values == expected


@functools.cache
def mcm_arrays_program():
    """Compiled once for the module's parametrized tests."""
    return compiled(mcm_arrays, 4, 1)


def test_nested_control_flow():
    def f(n):
        @qml.for_loop(0, n, 1)
        def outer(i, count):
            @qml.while_loop(lambda j: j < i)
            def inner(j):
                qml.X(0)
                return j + 1

            inner(0)
            m = qml.measure(0)

            @qml.cond(m == 1)
            def flip():
                @qml.for_loop(0, 2, 1)
                def twice(k):
                    qml.cond(k == 0, qml.X)(1)

                twice()

            flip()
            return count + m

        return qml.sample(outer(0)), qml.sample(wires=[0, 1])

    program = compiled(f, 2, 2)
    # i X-flips on wire 0 per iteration: after iteration i wire 0 is sum(0..i) mod 2
    for n in range(6):
        state = [sum(range(i + 1)) % 2 for i in range(n)]
        count, wires = program(n)
        assert rows(count) == [[sum(state)]] * 2
        assert rows(wires) == [[state[-1] if state else 0, sum(state) % 2]] * 2


# ---- classical computation against jax ----------------------------------------------------------------------------

def classical_program(fn, *example_args):
    """A QNode returning ``fn``'s outputs (integers sampled, floats as expvals of one shot)."""

    def qfunc(*args):
        outs = fn(*args)
        return tuple(qml.expval(o) if jnp.issubdtype(o.dtype, jnp.floating) else qml.sample(o) for o in outs)

    return compiled(qfunc, 1, 1)


def assert_like_jax(program, fn, *args):
    got = [np.asarray(r).ravel()[0] for r in program(*args)]
    want = [np.asarray(w).ravel()[0] for w in jax.jit(fn)(*args)]
    for g, w in zip(got, want, strict=True):
        if jnp.issubdtype(np.asarray(w).dtype, jnp.floating):
            np.testing.assert_allclose(float(g), float(w), rtol=1e-6)
        else:
            assert int(g) == int(np.int32(w)), (got, want)


def conversions(x):
    return (jnp.int32(x), x.astype(jnp.int8), x.astype(jnp.uint8), x.astype(jnp.bool_), jnp.floor(x),
            jnp.ceil(x), jnp.round(x), jnp.abs(x), jnp.sign(x), jnp.floor(x).astype(int) + jnp.ceil(-x).astype(int),
            -x, x * 2 - 1, x ** 2, x ** 3, jnp.sqrt(jnp.abs(x)), jnp.clip(x, -2.0, 2.0))


@pytest.fixture(scope="module")
def conversions_program():
    return classical_program(conversions, 1.0)


@pytest.mark.parametrize("x", [1.7, -1.7, 2.5, -2.5, 0.5, 0.0, 200.0, 1e10, -1e10])
def test_float_operations_and_conversions_like_jax(conversions_program, x):
    assert_like_jax(conversions_program, conversions, x)


def integers(a, b):
    return (a // b, a % b, jax.lax.div(a, b), jax.lax.rem(a, b), jnp.sign(a), jnp.abs(a), -a, a >> 1, a << 2,
            a << b, a >> b, jax.lax.shift_right_logical(a, b), jnp.maximum(a, b), jnp.minimum(a, b), a < b, ~a,
            a & b, a | b, a ^ b, a * b - 7, a ** 3, jnp.clip(a, -3, 5), jax.lax.clamp(-3, a, b))


@pytest.fixture(scope="module")
def integers_program():
    return classical_program(integers, 1, 1)


@pytest.mark.parametrize(("a", "b"), [(7, 2), (-7, 2), (7, -2), (-7, -2), (7, 0), (0, 0), (-(2**31), -1),
                                      (5, 7), (5, 40), (-5, 40), (-5, -1), (-5, 31), (5, 32)])
def test_integer_arithmetic_like_jax(integers_program, a, b):
    """Division and remainder by zero, MIN / -1 and shifts by the width or more follow XLA (and do
    not trap or give LLVM's poison)."""
    assert_like_jax(integers_program, integers, jnp.int32(a), jnp.int32(b))


def lax_branches(k, x):
    def double(v):
        return v * 2.0, k + 1

    def shift(v):
        return v - 1.0, k + 2

    def triple(v):
        return v * 3.0, k + 3

    a, b = jax.lax.cond(k > 0, double, shift, x)
    c, d = jax.lax.switch(k, [double, shift, triple], x)
    return a, b, c, d


@pytest.mark.parametrize("k", [-2, 0, 1, 2, 7])
def test_jax_cond_and_switch_like_jax(k):
    program = _lax_program()
    assert_like_jax(program, lax_branches, jnp.int32(k), jnp.float32(1.5))


@functools.cache
def _lax_program():
    """Compiled once for the module's parametrized tests."""
    return classical_program(lax_branches, 1, 1.0)


def unsigned(k):
    u = k.astype(jnp.uint8)
    return (u, u // 3, u % 7, u > 100, u >> 1, jnp.maximum(u, jnp.uint8(100)), u.astype(jnp.float32) / 2,
            jnp.sign(u), jnp.abs(u))


@pytest.mark.parametrize("k", [5, 200, 255, 256 + 130])
def test_unsigned_values_like_jax(k):
    program = _unsigned_program()
    assert_like_jax(program, unsigned, jnp.int32(k))


@functools.cache
def _unsigned_program():
    """Compiled once for the module's parametrized tests."""
    return classical_program(unsigned, 1)


def scatter(i, v):
    a = jnp.zeros(3, dtype=jnp.int32).at[i].set(v)
    a = a.at[1].add(v)
    a = a.at[i].add(2)
    a = a.at[2].max(v + 1)
    return a[0], a[1], a[2], jnp.sum(a)


@pytest.mark.parametrize("i", [0, 1, 2, -1, -3, 3, 9])
def test_array_updates_like_jax(i):
    program = _scatter_program()
    assert_like_jax(program, scatter, jnp.int32(i), jnp.int32(7))


@functools.cache
def _scatter_program():
    """Compiled once for the module's parametrized tests."""
    return classical_program(scatter, 1, 1)


def test_static_for_loops_unroll_for_the_steane_encoding():
    """With qec_code="steane" the wires must be constants: a static for_loop is unrolled."""
    cop = bl.Coprocessor(name="dec", coprocessor_fn="steane", runs_in="thread")
    dev = bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=2)), coprocessors=[cop],
                      qec_code="steane", seed=1)

    def f():
        @qml.for_loop(0, 2, 1)
        def loop(i, acc):
            qml.X(i)
            return acc + i

        acc = loop(0)
        qml.Hadamard(0)
        qml.CNOT([0, 1])
        return qml.sample(wires=[0, 1]), qml.sample(acc)

    program = bl.qjit(qml.set_shots(qml.qnode(dev)(f), 40))
    samples, acc = program()
    assert rows(acc) == [[1]] * 40
    samples = np.asarray(samples)
    assert (samples[:, 0] != samples[:, 1]).all()       # |01> + |10>
    assert 5 < samples[:, 0].sum() < 35
    assert "bquantum.gate" in program.mlir and "llvm.br ^" in program.mlir
    assert program.mlir.count('bquantum.gate "X"') == 2  # unrolled: one X per iteration, constant wires
