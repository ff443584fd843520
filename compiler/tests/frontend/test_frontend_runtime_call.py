"""The PennyLane frontend: ``runtime_declare`` signatures and ``runtime_call`` into C.

Real calls go into libbackline (a decode round driven by hand through the session API gives
the same correction as ``decode``) and into a small C library compiled here with gcc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp
from backline_compiler.frontend.values import CaptureError
from backline_compiler.frontend.runtime_call import SignatureError
from backline_core.sdk import STEANE_H

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled")

H = STEANE_H  # backline/steane.h


def device(wires: int = 2, coprocessors=()) -> bl.Backline:
    return bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=wires)),
                       coprocessors=list(coprocessors), seed=1)


def compiled(dev, qfunc, shots: int = 2):
    return bl.qjit(qml.set_shots(qml.qnode(dev)(qfunc), shots))


def rows(result) -> list:
    return np.asarray(result).tolist()


# ---- runtime_declare -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("signature", "params", "result"), [
    ("(ptr) -> i32", ("ptr",), "i32"),
    ("() -> void", (), "void"),
    ("(ptr,u32)->u64", ("ptr", "u32"), "u64"),
    ("  ( i8 , bool ) -> f64 ", ("i8", "bool"), "f64"),
    ("(str, buf, out, i16, u8, u16, i64, f64) -> ptr",
     ("str", "buf", "out", "i16", "u8", "u16", "i64", "f64"), "ptr"),
])
def test_runtime_declare_parses_signatures(signature, params, result):
    fn = bl.runtime_declare("some_symbol", signature)
    assert (fn.symbol, fn.params, fn.result, fn.library) == ("some_symbol", params, result, None)
    assert fn.signature == f"({', '.join(params)}) -> {result}"


@pytest.mark.parametrize(("symbol", "signature", "message"), [
    ("f", "(ptr, u33) -> i32", r"unknown parameter type 'u33' \(parameter 2\); known: i8, .*, out"),
    ("f", "(void) -> i32", r"unknown parameter type 'void' \(parameter 1\)"),
    ("f", "ptr -> i32", r"write the signature as '\(type, ...\) -> type', e.g. '\(ptr, u32\) -> i32'"),
    ("f", "(ptr)", r"write the signature as"),
    ("f", "(ptr) -> i32 extra", r"write the signature as"),
    ("f", "(ptr) i32", r"write the signature as"),
    ("f", 3, r"write the signature as"),
    ("f", "(ptr,) -> i32", r"parameter 2 is empty; separate the parameter types with single commas"),
    ("f", "(, ptr) -> i32", r"parameter 1 is empty"),
    ("f", "(ptr) -> out", r"unknown result type 'out'; known: void, .*, ptr"),
    ("f", "(ptr) -> str", r"unknown result type 'str'"),
    ("f", "(out, out) -> void", r"at most one 'out' parameter"),
    ("1f", "() -> void", r"'1f' is not a C identifier"),
    ("f-g", "() -> void", r"'f-g' is not a C identifier"),
    ("", "() -> void", r"'' is not a C identifier"),
])
def test_runtime_declare_rejects_bad_signatures(symbol, signature, message):
    with pytest.raises(SignatureError, match=message):
        bl.runtime_declare(symbol, signature)


def test_runtime_declare_needs_an_existing_library(tmp_path):
    with pytest.raises(SignatureError, match=r"library '.*nowhere.so' does not exist"):
        bl.runtime_declare("f", "() -> void", library=tmp_path / "nowhere.so")


# ---- runtime_call: checks at the call --------------------------------------------------------------------------

FILL = bl.runtime_declare("f", "(i32, out) -> i32")


@pytest.mark.parametrize(("call", "message"), [
    (lambda: bl.runtime_call(FILL, 1, 2, out_bytes=4),
     r"runtime_call\(f: \(i32, out\) -> i32\): 2 arguments given, 1 expected"),
    (lambda: bl.runtime_call(FILL, out_bytes=4), r"0 arguments given, 1 expected"),
    (lambda: bl.runtime_call(FILL, 1), r"give out_bytes=<size> for its 'out' parameter"),
    (lambda: bl.runtime_call(FILL, 1, out_bytes=0), r"out_bytes must be a positive int, not 0"),
    (lambda: bl.runtime_call(FILL, 1, out_bytes=-2), r"out_bytes must be a positive int, not -2"),
    (lambda: bl.runtime_call(FILL, 1, out_bytes=True), r"out_bytes must be a positive int, not True"),
    (lambda: bl.runtime_call(FILL, 1, out_bytes=2.0), r"out_bytes must be a positive int, not 2.0"),
    (lambda: bl.runtime_call(bl.runtime_declare("g", "(i32) -> i32"), 1, out_bytes=2),
     r"out_bytes= needs an 'out' parameter in the signature"),
    (lambda: bl.runtime_call("f", 1), r"the first argument must come from runtime_declare\(...\), not 'f'"),
    (lambda: bl.runtime_call(FILL, "x", out_bytes=4), r"argument 1 is 'i32'; a string only goes to a 'str' parameter"),
    (lambda: bl.runtime_call(FILL, np.array([1, 2]), out_bytes=4),
     r"argument 1 \('i32'\) must be a scalar, got shape \(2,\)"),
    (lambda: bl.runtime_call(FILL, 1.5, out_bytes=4),
     r"argument 1 is 'i32' but a float32 value was given; convert it explicitly first"),
    (lambda: bl.runtime_call(bl.runtime_declare("g", "(str) -> i32"), 1),
     r"argument 1 is 'str' and needs a Python string, not 1"),
    (lambda: bl.runtime_call(bl.runtime_declare("g", "(buf) -> i32"), []), r"argument 1 \('buf'\) is empty"),
    (lambda: bl.runtime_call(bl.runtime_declare("g", "(buf) -> i32"), np.array([0.5])),
     r"argument 1 \('buf'\) holds bytes, not float32 values"),
    (lambda: bl.runtime_call(bl.runtime_declare("g", "(ptr) -> i32"), 3),
     r"argument 1 is 'ptr' and takes a pointer another runtime_call returned, or None, not 3"),
])
def test_runtime_call_checks_its_arguments(call, message):
    with pytest.raises(SignatureError, match=message):
        call()


def test_runtime_call_outside_a_compiled_qnode():
    with pytest.raises(CaptureError, match=r"runtime_call\(\) was called outside a compiled QNode: call it inside a "
                                           r"QNode on a Backline device, compiled with backline_compiler.qjit"):
        bl.runtime_call(FILL, 1, out_bytes=4)


def test_64_bit_results_need_x64():
    fn = bl.runtime_declare("bl_abi_version", "() -> i64")

    def f():
        return qml.sample(bl.runtime_call(fn))

    with pytest.raises(SignatureError, match=r"an i64 result needs 64-bit jax values: "
                                             r"jax.config.update\('jax_enable_x64', True\), or declare the result"):
        compiled(device(), f)()


# ---- runtime_call into libbackline -----------------------------------------------------------------------------

SESSION_GET = bl.runtime_declare("bl_session_get", "(i32, str) -> ptr")
STAGE = bl.runtime_declare("bl_stage_payload", "(ptr, buf, u32, u32) -> i32")
POST = bl.runtime_declare("bl_post", "(ptr) -> i32")
COLLECT = bl.runtime_declare("bl_collect", "(ptr, out, u32, ptr) -> i32")


def steane_by_hand(q, flip):
    """One Steane round twice: by decode(), and through the session API, in the same shot."""
    qml.cond(flip == 1, qml.X)(q)
    syndrome = []
    for r, row in enumerate(H):
        for j, h in enumerate(row):
            if h:
                qml.CNOT([j, 7 + r])
        syndrome.append(qml.measure(7 + r))
    packed = syndrome[0] | syndrome[1] << 1 | syndrome[2] << 2      # bit i of the syndrome at bit i
    session = bl.runtime_call(SESSION_GET, 0, "dec")                 # BL_CONTROLLER
    staged = bl.runtime_call(STAGE, session, jnp.array([packed]), 1, 1)
    posted = bl.runtime_call(POST, session)
    collected, reply = bl.runtime_call(COLLECT, session, 1, None, out_bytes=1)
    correction = bl.decode(jnp.array(syndrome), decoder_id=1)
    packed_correction = jnp.sum(correction * (1 << jnp.arange(7)))
    for j in range(7):
        qml.cond((reply[0] >> j) & 1, qml.X)(j)                    # correct with the hand-made round
    return (qml.sample([staged, posted, collected]), qml.sample(reply[0]), qml.sample(packed_correction),
            qml.sample(wires=range(7)))


@pytest.fixture(scope="module")
def by_hand_program():
    cop = bl.Coprocessor(name="dec", coprocessor_fn="steane", runs_in="thread")
    return compiled(device(10, [cop]), steane_by_hand)


@pytest.mark.parametrize(("q", "flip"), [(0, 1), (3, 1), (6, 1), (2, 0)])
def test_a_session_round_by_hand_matches_decode(by_hand_program, q, flip):
    statuses, reply, packed, data = by_hand_program(q, flip)
    assert rows(statuses) == [[0, 0, 0]] * 2                     # BL_OK three times
    assert rows(reply) == [[flip << q]] * 2
    assert rows(packed) == rows(reply)                            # the same answer as decode()
    assert rows(data) == [[0] * 7] * 2                            # and it corrects the flip
    assert by_hand_program.mlir.count("llvm.call @bl_") == 4


def test_a_round_on_a_missing_session_fails_at_run_time():
    """bl_session_get of an unknown key gives NULL; the session call reports it, not a crash."""
    get, post = SESSION_GET, POST

    def f():
        return qml.sample(bl.runtime_call(post, bl.runtime_call(get, 0, "nobody")))

    result = compiled(device(), f)()
    assert rows(result)[0][0] < 0  # a negative bl_status


# ---- runtime_call into a C library of our own -----------------------------------------------------------------

C_SOURCE = r"""
#include <stdint.h>
int32_t tl_add3(int32_t a, int32_t b, int32_t c) { return a + 10 * b + 100 * c; }
double tl_scale(double x, int32_t k) { return x * k; }
uint32_t tl_fill(uint8_t *out, uint32_t n, uint8_t v) { for (uint32_t i = 0; i < n; i++) out[i] = v + i; return 2 * n; }
int32_t tl_sum(const uint8_t *buf, uint32_t n) { int32_t s = 0; for (uint32_t i = 0; i < n; i++) s += buf[i]; return s; }
int32_t tl_strlen(const char *s) { int32_t n = 0; while (s[n]) n++; return n; }
static int32_t counter;
void tl_bump(void) { counter++; }
int32_t tl_count(void) { return counter; }
int8_t tl_neg8(int8_t x) { return -x; }
uint8_t tl_big8(void) { return 200; }
int32_t tl_widen(int32_t x) { return x; }
_Bool tl_odd(int32_t x) { return x & 1; }
static int32_t anchor;
void *tl_self(void) { return &anchor; }
int32_t tl_is_self(void *p) { return p == &anchor ? 1 : (p == 0 ? -1 : 0); }
"""


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    # Backline builds its runtime from C, so a machine that runs these tests has a compiler.
    assert gcc is not None, "no C compiler on PATH (gcc or cc); install one (apt-get install gcc)"
    folder = tmp_path_factory.mktemp("clib")
    (folder / "tl.c").write_text(C_SOURCE)
    lib = folder / "libtl.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(folder / "tl.c")], check=True)
    return str(lib)


def test_calls_into_a_c_library(clib):
    add3 = bl.runtime_declare("tl_add3", "(i32, i32, i32) -> i32", library=clib)
    fill = bl.runtime_declare("tl_fill", "(out, u32, u8) -> u32", library=clib)
    total = bl.runtime_declare("tl_sum", "(buf, u32) -> i32", library=clib)
    strlen = bl.runtime_declare("tl_strlen", "(str) -> i32", library=clib)
    scale = bl.runtime_declare("tl_scale", "(f64, i32) -> f64", library=clib)
    neg8 = bl.runtime_declare("tl_neg8", "(i8) -> i8", library=clib)
    big8 = bl.runtime_declare("tl_big8", "() -> u8", library=clib)
    widen = bl.runtime_declare("tl_widen", "(i32) -> i32", library=clib)
    odd = bl.runtime_declare("tl_odd", "(i32) -> bool", library=clib)
    self_ptr = bl.runtime_declare("tl_self", "() -> ptr", library=clib)
    is_self = bl.runtime_declare("tl_is_self", "(ptr) -> i32", library=clib)

    def f(k):
        qml.X(1)
        m = qml.measure(1)
        n, buf = bl.runtime_call(fill, 4, 250, out_bytes=4)   # 250, 251, 252, 253: bytes above 127
        big = bl.runtime_call(big8)
        return (qml.sample(bl.runtime_call(add3, k, m, 2)),
                qml.sample(n),
                qml.sample([buf[0], buf[1], buf[2], buf[3]]),
                qml.sample(bl.runtime_call(total, jnp.array([1, 2, 3, m]), 4)),
                qml.sample(bl.runtime_call(strlen, "hello")),
                qml.expval(bl.runtime_call(scale, 1.5, k)),
                qml.sample(bl.runtime_call(neg8, 5)),
                qml.sample([big, big // 3, big > 100]),
                qml.sample(bl.runtime_call(widen, buf[3])),            # a uint8 is zero-extended, as C does
                qml.sample(bl.runtime_call(odd, k)),
                qml.sample(bl.runtime_call(is_self, bl.runtime_call(self_ptr))),
                qml.sample(bl.runtime_call(is_self, None)))

    program = compiled(device(), f)
    result = [rows(r) if np.ndim(r) else float(r) for r in program(3)]
    assert result == [[[213]] * 2, [[8]] * 2, [[250, 251, 252, 253]] * 2, [[7]] * 2, [[5]] * 2, 4.5, [[-5]] * 2,
                      [[200, 66, 1]] * 2, [[253]] * 2, [[1]] * 2, [[1]] * 2, [[-1]] * 2]
    assert rows(program(4)[0]) == [[214]] * 2
    assert program.programs[0].translation.libraries == [clib]


def test_calls_happen_once_per_shot_in_order(clib):
    bump = bl.runtime_declare("tl_bump", "() -> void", library=clib)
    count = bl.runtime_declare("tl_count", "() -> i32", library=clib)

    def f():
        before = bl.runtime_call(count)
        assert bl.runtime_call(bump) is None
        return qml.sample([before, bl.runtime_call(count)])

    first = np.asarray(compiled(device(), f, shots=3)())
    start = first[0, 0]
    assert first.tolist() == [[start + i, start + i + 1] for i in range(3)]


def test_pointer_misuse(clib):
    self_ptr = bl.runtime_declare("tl_self", "() -> ptr", library=clib)
    add3 = bl.runtime_declare("tl_add3", "(i32, i32, i32) -> i32", library=clib)

    def returned():
        return qml.sample(bl.runtime_call(self_ptr))

    def arithmetic():
        return qml.sample(bl.runtime_call(add3, 1, 2, 3) + 0 * bl.runtime_call(self_ptr))

    def as_integer():
        return qml.sample(bl.runtime_call(add3, bl.runtime_call(self_ptr), 1, 2))

    with pytest.raises(CaptureError, match="a pointer from runtime_call cannot be returned in a measurement; pass it "
                                           "to another runtime_call"):
        compiled(device(), returned)()
    with pytest.raises(CaptureError, match="'mul' on a pointer: a pointer from runtime_call can only be passed to "
                                           "another runtime_call"):
        compiled(device(), arithmetic)()
    with pytest.raises(SignatureError, match=r"runtime_call\(tl_add3\): a pointer passed where 'i32' is expected"):
        compiled(device(), as_integer)()


UNKNOWN_SYMBOLS = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import pennylane as qml
    import backline_compiler as bl
    from backline_compiler.frontend.runtime_call import SignatureError
    dev = bl.Backline(controller=bl.Controller(device=qml.device("null.qubit", wires=1)))
    for fn in (bl.runtime_declare("tl_nope", "() -> i32", library=sys.argv[1]),
               bl.runtime_declare("nope_nowhere", "() -> i32")):
        def f():
            return qml.sample(bl.runtime_call(fn))
        try:
            bl.qjit(qml.set_shots(qml.qnode(dev)(f), 1))()
        except SignatureError as e:
            print("SignatureError:", e)
        else:
            print("no error")
""")


def test_unknown_symbols_are_reported_not_called(clib):
    """An unresolved symbol would be called at address 0 (a crash): run it in a subprocess."""
    env = dict(os.environ)
    compiler_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (compiler_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", UNKNOWN_SYMBOLS, clib], check=False, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0] == ("SignatureError: runtime_call(tl_nope: () -> i32): symbol 'tl_nope' is not defined in "
                        f"library {clib!r}, libbackline or this process (check its name, e.g. with nm -D)")
    assert lines[1].startswith("SignatureError: runtime_call(nope_nowhere: () -> i32): symbol 'nope_nowhere' is not "
                               "defined in libbackline or this process")
    assert "pass runtime_declare(..., library=PATH)" in lines[1]
