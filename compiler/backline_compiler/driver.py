"""The compiled round driver: benchmark rounds issued by JIT-compiled IR.

``backline bench --driver compiled`` finds this through the ``backline.drivers`` entry
point. The kernel is written in the transport dialect, lowered by
``convert-transport-to-llvm`` and JIT-compiled with llvmlite; it finds the controller
session by key (the bench brought it up) and, per round, stages a payload from a table,
posts, collects the reply into a row of an output array and records the round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from backline_core import RoundDriver, hookimpl

from . import codegen, pipeline
from .passes.convert_transport_to_llvm import ConvertTransportToLLVM

KERNEL = """
builtin.module {{
  llvm.func @backline_bench_rounds(%n: i64, %first: i64, %table: !llvm.ptr, %entries: i64, %len: i32,
                                   %replies: !llvm.ptr, %cap: i32, %rtt: !llvm.ptr) -> i32 {{
    %s = transport.get_session {{key = "{key}"}} : !transport.session<controller>
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %len64 = llvm.zext %len : i32 to i64
    %cap64 = llvm.zext %cap : i32 to i64
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %done = llvm.icmp "sge" %i, %n : i64
    llvm.cond_br %done, ^exit, ^body
  ^body:
    %round = llvm.add %first, %i : i64
    %entry = llvm.urem %round, %entries : i64
    %offset = llvm.mul %entry, %len64 : i64
    %payload = llvm.getelementptr %table[%offset] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    transport.stage_payload %s, %payload, %len {{decoder_id = {decoder_id} : i32}} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %row = llvm.mul %i, %cap64 : i64
    %reply = llvm.getelementptr %replies[%row] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    %got = transport.collect %s, %reply, %cap : !transport.session<controller> -> i32
    %t = transport.last_rtt_ns %s : !transport.session<controller> -> i64
    %slot = llvm.getelementptr %rtt[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i64
    llvm.store %t, %slot : i64, !llvm.ptr
    %next = llvm.add %i, %one : i64
    llvm.br ^loop(%next : i64)
  ^exit:
    %st = transport.take_status : i32
    llvm.return %st : i32
  }}
}}
"""


def compile_rounds(key: str, decoder_id: int = 0, *, keep_intermediate: str | None = None) -> codegen.JitProgram:
    """Parse the kernel for ``key``, lower it, and JIT it."""
    module = pipeline.parse(KERNEL.format(key=key, decoder_id=decoder_id))
    pipeline.run(module, [ConvertTransportToLLVM()], keep_intermediate=keep_intermediate)
    return codegen.JitProgram(module, keep_intermediate=keep_intermediate)


def make(key: str, decoder_id: int, table: tuple[bytes, bytes, int]) -> Callable[..., int]:
    """The driver factory ``backline bench`` calls (see backline_core._hookspecs.RoundDriver)."""
    payloads, expected, reply_bytes = table
    entries = len(expected) // reply_bytes
    payload_bytes = len(payloads) // entries
    program = compile_rounds(key, decoder_id)
    kernel = program.function("backline_bench_rounds", "int32", "int64", "int64", "ptr", "int64", "int32",
                              "ptr", "int32", "ptr")
    table_buf = np.frombuffer(payloads, dtype=np.uint8).copy()

    def run(first: int, rtt_out: np.ndarray, replies_out: np.ndarray) -> int:
        assert rtt_out.dtype == np.uint64 and replies_out.shape == (rtt_out.size, reply_bytes)
        return kernel(rtt_out.size, first, table_buf.ctypes.data, entries, payload_bytes,
                      replies_out.ctypes.data, reply_bytes, rtt_out.ctypes.data)

    run.program = program  # type: ignore[attr-defined]  # keeps the JIT alive with the closure
    return run


@hookimpl
def backline_drivers() -> list[Any]:
    return [RoundDriver(name="compiled", summary="rounds issued by JIT-compiled transport-dialect IR",
                        load=lambda: make)]
