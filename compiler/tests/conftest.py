"""Shared test programs: a 3-qubit GHZ circuit in bquantum, run shot by shot."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

# @ghz(device, shots, out): for each shot, reset_all, H q0, CNOT q0 q1, CNOT q1 q2, {noise},
# measure q0..q2 and write q0 | q1 << 1 | q2 << 2 to out[shot]; returns the first failure.
# The wires are logical ones when encode-steane runs over it.
GHZ = """
builtin.module {attributes} {{
  llvm.func @ghz(%dev: !llvm.ptr, %shots: i64, %out: !llvm.ptr) -> i32 {{
    %d = bquantum.device_from_ptr %dev : !llvm.ptr -> !bquantum.device
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %q0 = llvm.mlir.constant(0 : i32) : i32
    %q1 = llvm.mlir.constant(1 : i32) : i32
    %q2 = llvm.mlir.constant(2 : i32) : i32
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %done = llvm.icmp "sge" %i, %shots : i64
    llvm.cond_br %done, ^exit, ^body
  ^body:
    bquantum.reset_all %d
    bquantum.gate "H" %d, %q0 : !bquantum.device
    bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
    bquantum.gate "CNOT" %d, %q1, %q2 : !bquantum.device
    {noise}
    %m0 = bquantum.measure %d, %q0 : !bquantum.device -> i1
    %m1 = bquantum.measure %d, %q1 : !bquantum.device -> i1
    %m2 = bquantum.measure %d, %q2 : !bquantum.device -> i1
    %b0 = llvm.zext %m0 : i1 to i32
    %e1 = llvm.zext %m1 : i1 to i32
    %e2 = llvm.zext %m2 : i1 to i32
    %b1 = llvm.shl %e1, %q1 : i32
    %b2 = llvm.shl %e2, %q2 : i32
    %b01 = llvm.or %b0, %b1 : i32
    %bits = llvm.or %b01, %b2 : i32
    %slot = llvm.getelementptr %out[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i32
    llvm.store %bits, %slot : i32, !llvm.ptr
    %next = llvm.add %i, %one : i64
    llvm.br ^loop(%next : i64)
  ^exit:
    %st = transport.take_status : i32
    llvm.return %st : i32
  }}
}}
"""


@pytest.fixture(scope="session")
def ghz_text() -> Callable[..., str]:
    """The GHZ program's text, with an optional noise op and module attributes."""

    def text(*, noise: str = "", attributes: str = "") -> str:
        return GHZ.format(noise=noise, attributes=attributes)

    return text


@pytest.fixture(scope="session")
def ghz_shots() -> Callable[..., np.ndarray]:
    """Run a compiled @ghz on an open QuantumDevice; returns each shot's packed outcomes."""
    from backline_core._abi import last_error

    def run(program, dev, shots: int) -> np.ndarray:
        out = np.full(shots, -1, dtype=np.int32)
        status = program.function("ghz", "int32", "ptr", "int64", "ptr")(dev.handle, shots, out.ctypes.data)
        assert status == 0, last_error()
        return out

    return run
