"""FileCheck of the frontend's IR (``qjit(...).mlir``, before any pass) for small programs.

The checks run the ``filecheck`` package (as compiler/tests/test_filecheck.py does for .mlir
files) on the IR the frontend prints.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
jax = pytest.importorskip("jax")
pytest.importorskip("filecheck")

import backline_compiler as bl
import jax.numpy as jnp
from backline_compiler import pipeline


def filecheck(text: str, checks: str, tmp_path) -> None:
    (tmp_path / "input.mlir").write_text(text)
    (tmp_path / "checks").write_text(textwrap.dedent(checks))
    proc = subprocess.run([sys.executable, "-m", "filecheck", str(tmp_path / "checks"), "--input-file",
                           str(tmp_path / "input.mlir")], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- input ---\n{text}"


def compiled(qfunc, wires: int, shots: int, coprocessors=()):
    dev = bl.Backline(controller=bl.Controller(device=qml.device("default.clifford", wires=wires)),
                      coprocessors=list(coprocessors), seed=1)
    return bl.qjit(qml.set_shots(qml.qnode(dev)(qfunc), shots))


def small(x):
    qml.RX(x, 0)
    m = qml.measure(0, reset=True)
    qml.cond(m, qml.X)(1)
    return qml.sample(wires=[1]), qml.expval(qml.Y(0))


SMALL_CHECKS = r"""
    CHECK:      builtin.module {
    CHECK-NEXT: llvm.func @qnode(%dev: !llvm.ptr, %shots: i64, %out: !llvm.ptr, %args: !llvm.ptr) -> i32 {
    CHECK-NEXT:   [[DEV:%[0-9]+]] = bquantum.device_from_ptr %dev : !llvm.ptr -> !bquantum.device

    The float argument: loaded once from its 8-byte slot, before the shot loop.
    CHECK:        [[SLOT:%[0-9]+]] = llvm.getelementptr %args[{{%[0-9]+}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
    CHECK-NEXT:   [[X:%[0-9]+]] = llvm.load [[SLOT]] : !llvm.ptr -> f64
    CHECK:        llvm.br ^[[HEAD:bb[0-9]+]]({{%[0-9]+}} : i64)

    The shot loop: reset_all, then the circuit.
    CHECK:      ^[[HEAD]]([[SHOT:%[0-9]+]]: i64):
    CHECK-NEXT:   [[DONE:%[0-9]+]] = llvm.icmp "sge" [[SHOT]], %shots : i64
    CHECK-NEXT:   llvm.cond_br [[DONE]], ^[[EXIT:bb[0-9]+]], ^[[BODY:bb[0-9]+]]
    CHECK:      ^[[BODY]]:
    CHECK-NEXT:   bquantum.reset_all [[DEV]]
    CHECK-NEXT:   [[W0:%[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
    CHECK-NEXT:   bquantum.gate "RX" [[DEV]], [[W0]] ([[X]]) : !bquantum.device
    CHECK-NEXT:   [[W0B:%[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
    CHECK-NEXT:   [[M:%[0-9]+]] = bquantum.measure [[DEV]], [[W0B]] : !bquantum.device -> i1
    CHECK-NEXT:   bquantum.reset [[DEV]], [[W0B]]
    CHECK-NEXT:   [[MI:%[0-9]+]] = llvm.zext [[M]] : i1 to i32
    CHECK:        [[C:%[0-9]+]] = llvm.icmp "ne" [[MI]], {{%[0-9]+}} : i32
    CHECK-NEXT:   llvm.cond_br [[C]], ^[[THEN:bb[0-9]+]], ^[[ELSE:bb[0-9]+]]

    CHECK:      ^[[EXIT]]:
    CHECK-NEXT:   [[ST:%[0-9]+]] = transport.take_status : i32
    CHECK-NEXT:   llvm.return [[ST]] : i32

    Where the branches meet: the terminal measurements (wire 1 in Z, wire 0 in Y) and the record.
    CHECK:      ^[[MERGE:bb[0-9]+]]:
    CHECK-NEXT:   [[W1:%[0-9]+]] = llvm.mlir.constant(1 : i32) : i32
    CHECK-NEXT:   [[Z1:%[0-9]+]] = bquantum.measure [[DEV]], [[W1]] : !bquantum.device -> i1
    CHECK-NEXT:   [[Z1I:%[0-9]+]] = llvm.zext [[Z1]] : i1 to i32
    CHECK-NEXT:   [[W0C:%[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
    CHECK-NEXT:   bquantum.gate "SDG" [[DEV]], [[W0C]] : !bquantum.device
    CHECK-NEXT:   bquantum.gate "H" [[DEV]], [[W0C]] : !bquantum.device
    CHECK-NEXT:   [[Y0:%[0-9]+]] = bquantum.measure [[DEV]], [[W0C]] : !bquantum.device -> i1
    CHECK-NEXT:   [[Y0I:%[0-9]+]] = llvm.zext [[Y0]] : i1 to i32
    CHECK-NEXT:   [[WIDTH:%[0-9]+]] = llvm.mlir.constant(2) : i64
    CHECK-NEXT:   [[BASE:%[0-9]+]] = llvm.mul [[SHOT]], [[WIDTH]] : i64
    CHECK:        llvm.store [[Z1I]], {{%[0-9]+}} : i32, !llvm.ptr
    CHECK:        llvm.store [[Y0I]], {{%[0-9]+}} : i32, !llvm.ptr
    CHECK-NEXT:   [[S:%[0-9]+]] = transport.take_status : i32
    CHECK:        llvm.cond_br {{%[0-9]+}}, ^[[FAIL:bb[0-9]+]], ^[[NEXT:bb[0-9]+]]

    CHECK:      ^[[THEN]]:
    CHECK-NEXT:   [[W1B:%[0-9]+]] = llvm.mlir.constant(1 : i32) : i32
    CHECK-NEXT:   bquantum.gate "X" [[DEV]], [[W1B]] : !bquantum.device
    CHECK-NEXT:   llvm.br ^[[MERGE]]
    CHECK-NEXT: ^[[ELSE]]:
    CHECK-NEXT:   llvm.br ^[[MERGE]]
    CHECK-NEXT: ^[[FAIL]]:
    CHECK-NEXT:   llvm.return [[S]] : i32
    CHECK-NEXT: ^[[NEXT]]:
    CHECK-NEXT:   [[ONE:%[0-9]+]] = llvm.mlir.constant(1) : i64
    CHECK-NEXT:   [[NEXT_SHOT:%[0-9]+]] = llvm.add [[SHOT]], [[ONE]] : i64
    CHECK-NEXT:   llvm.br ^[[HEAD]]([[NEXT_SHOT]] : i64)
    CHECK-NEXT: }
    CHECK-NEXT: }
"""


def test_small_program_ir(tmp_path):
    program = compiled(small, 2, 3)
    samples, _ = program(0.0)
    assert np.asarray(samples).tolist() == [[0]] * 3
    filecheck(program.mlir, SMALL_CHECKS, tmp_path)
    pipeline.parse(program.mlir)  # and it verifies


LOOP_CHECKS = r"""
    CHECK:      llvm.func @qnode(
    The decode's syndrome and correction buffers: stack allocations at the top of the entry block.
    CHECK-NEXT:   {{%[0-9]+}} = llvm.mlir.constant(1) : i64
    CHECK-NEXT:   [[SYN:%[0-9]+]] = llvm.alloca {{%[0-9]+}} x i8 : (i64) -> !llvm.ptr
    CHECK-NEXT:   {{%[0-9]+}} = llvm.mlir.constant(1) : i64
    CHECK-NEXT:   [[CORR:%[0-9]+]] = llvm.alloca {{%[0-9]+}} x i8 : (i64) -> !llvm.ptr
    The loop carries its index and the running sum as block arguments.
    CHECK:        llvm.br ^[[LOOP:bb[0-9]+]]([[START:%[0-9]+]], [[INIT:%[0-9]+]] : i32, i32)
    CHECK:      ^[[LOOP]]([[I:%[0-9]+]]: i32, [[ACC:%[0-9]+]]: i32):
    CHECK:        [[GO:%[0-9]+]] = llvm.icmp "slt" [[I]], {{%[0-9]+}} : i32
    CHECK-NEXT:   llvm.cond_br [[GO]], ^[[BODY:bb[0-9]+]], ^[[DONE:bb[0-9]+]]
    CHECK:      ^[[BODY]]:
    CHECK-NEXT:   bquantum.gate "X" {{%[0-9]+}}, [[I]] : !bquantum.device
    CHECK-NEXT:   [[M:%[0-9]+]] = bquantum.measure {{%[0-9]+}}, [[I]] : !bquantum.device -> i1
    CHECK-NEXT:   [[MI:%[0-9]+]] = llvm.zext [[M]] : i1 to i32
    CHECK-NEXT:   [[SUM:%[0-9]+]] = llvm.add [[ACC]], [[MI]] : i32
    CHECK:        [[STEP:%[0-9]+]] = llvm.add [[I]], {{%[0-9]+}} : i32
    CHECK-NEXT:   llvm.br ^[[LOOP]]([[STEP]], [[SUM]] : i32, i32)
    CHECK:      ^[[DONE]]:
    The decode: the syndrome packed into one byte, the explicit bqec.decode, the reply unpacked.
    CHECK:        llvm.store {{%[0-9]+}}, {{%[0-9]+}} : i8, !llvm.ptr
    CHECK:        bqec.decode [[SYN]], [[CORR]] {decoder_id = 1 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32, coprocessor = "dec"}
    CHECK-NEXT:   [[ZERO:%[0-9]+]] = llvm.mlir.constant(0) : i64
    CHECK-NEXT:   [[PTR:%[0-9]+]] = llvm.getelementptr [[CORR]][[[ZERO]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    CHECK-NEXT:   [[BYTE:%[0-9]+]] = llvm.load [[PTR]] : !llvm.ptr -> i8
    CHECK-NEXT:   {{%[0-9]+}} = llvm.zext [[BYTE]] : i8 to i32
    The correction's bit 0 conditions an X on wire 0; the terminal measurement follows the merge.
    CHECK:        llvm.cond_br {{%[0-9]+}}, ^[[THEN:bb[0-9]+]], ^{{bb[0-9]+}}
    CHECK:        bquantum.measure
    CHECK:        transport.take_status
    CHECK:      ^[[THEN]]:
    CHECK-NEXT:   [[W:%[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
    CHECK-NEXT:   bquantum.gate "X" {{%[0-9]+}}, [[W]] : !bquantum.device
"""


def test_loop_and_decode_ir(tmp_path):
    def f(n):
        @qml.for_loop(0, n, 1)
        def loop(i, acc):
            qml.X(i)
            return acc + qml.measure(i)

        total = loop(0)
        correction = bl.decode(jnp.array([total, 0, 0]), decoder_id=1)
        qml.cond(correction[0], qml.X)(0)
        return qml.sample(total), qml.sample(wires=[0])

    cop = bl.Coprocessor(name="dec", coprocessor_fn="steane", runs_in="thread")
    program = compiled(f, 3, 2, [cop])
    total, wire0 = program(1)
    # one flip: total 1 -> syndrome [1, 0, 0] -> the decoder flips qubit 0 back
    assert np.asarray(total).tolist() == [[1]] * 2
    assert np.asarray(wire0).tolist() == [[0]] * 2
    assert program.mlir.startswith("builtin.module attributes {backline.placement = #transport.backline<")
    filecheck(program.mlir, LOOP_CHECKS, tmp_path)
