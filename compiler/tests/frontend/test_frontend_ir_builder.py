"""The frontend builds its IR from op constructors (no text is parsed on the way), and what it
prints (``qjit(...).mlir``) parses back to the same module. Constants text could not spell
(NaN, infinities) and non-ASCII strings compile too."""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")

import backline_compiler as bl
import jax.numpy as jnp
from backline_compiler import pipeline
from backline_compiler.frontend.ir_writer import FunctionWriter

pytestmark = pytest.mark.filterwarnings("ignore:Executing PennyLane programs with capture enabled")


def compiled(qfunc, wires: int = 2, shots: int = 2):
    dev = bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=wires)), seed=1)
    return bl.qjit(qml.set_shots(qml.qnode(dev)(qfunc), shots))


def test_no_text_is_parsed_and_the_printed_ir_round_trips(monkeypatch):
    def no_parse(*args, **kwargs):
        raise AssertionError("the frontend parsed IR text")

    def f(x, k):
        qml.RX(x, 0)
        m = qml.measure(0)
        qml.cond(m, qml.X)(1)

        @qml.for_loop(0, k, 1)
        def loop(i, acc):
            return acc + i * m

        return qml.sample(loop(0)), qml.expval(qml.Z(1))

    program = compiled(f)
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "parse", no_parse)
        samples, _ = program(0.0, 3)
    assert np.asarray(samples).tolist() == [[0]] * 2
    text = program.mlir
    assert pipeline.print_module(pipeline.parse(text)) == text


def test_writer_output_verifies_and_allocates_in_the_entry_block():
    w = FunctionWriter("f", [("p", "ptr")])
    (p,) = w.params
    body = w.new_block()
    w.br(body)
    w.set_block(body)
    buf = w.alloca("i8", 4)   # asked for in a later block, placed at the top of the entry block
    w.store(7, w.element(buf, 1, "i8"), "i8")
    w.store(w.load(w.element(buf, 1, "i8"), "i8"), p, "i8")
    w.ret(w.const(0, "i32"))
    with pytest.raises(AssertionError, match="terminated"):
        w.const(1, "i32")
    module = w.module()
    module.verify()
    entry_ops = [op.name for op in w.entry.ops]
    assert entry_ops == ["llvm.mlir.constant", "llvm.alloca", "llvm.br"]


def test_nan_and_infinite_float_constants():
    def f(x):
        y = jnp.where(x > 0, x, jnp.nan)      # a NaN constant beside a run-time value
        z = jnp.minimum(x, jnp.inf) - jnp.inf  # and infinities
        return qml.expval(y), qml.expval(z)

    program = compiled(f, shots=1)
    y, z = program(-1.0)
    assert math.isnan(float(y)) and float(z) == -math.inf
    y, _ = program(2.5)
    assert float(y) == 2.5


def test_non_ascii_strings_reach_runtime_call(tmp_path):
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc is not None, "no C compiler on PATH (gcc or cc); install one (apt-get install gcc)"
    (tmp_path / "len.c").write_text("#include <stdint.h>\n"
                                    "int32_t tb_bytes(const char *s) { int32_t n = 0; while (s[n]) n++; return n; }\n")
    lib = tmp_path / "liblen.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "len.c")], check=True)
    nbytes = bl.runtime_declare("tb_bytes", "(str) -> i32", library=lib)

    def f():
        return qml.sample(bl.runtime_call(nbytes, "héllo")), qml.sample(bl.runtime_call(nbytes, "plain"))

    first, second = compiled(f, shots=1)()
    assert np.asarray(first).tolist() == [[6]] and np.asarray(second).tolist() == [[5]]
