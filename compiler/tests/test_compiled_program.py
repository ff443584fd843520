"""A real program, compiled and run: a controller kernel written in IR brings up a memcpy
session (through inject-transport-session), runs N rounds -- stage, post, collect, record
the round trip -- and tears down, against thread and process coprocessors, and against a
coprocessor running in an executor (its code compiled by the same pipeline)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from backline_compiler import codegen, pipeline
from backline_compiler.dialects.transport import BacklineAttr
from backline_core import Controller, Coprocessor, Placement
from backline_core._native import lib
from backline_core._deployment import CoprocessorProcess
from backline_core._process import children

ROUNDS_KERNEL = """
builtin.module attributes {{backline.placement = {placement}}} {{
  llvm.func @rounds(%n: i64, %payloads: !llvm.ptr, %len: i32, %replies: !llvm.ptr, %rtt: !llvm.ptr) -> i32 {{
    %s = transport.get_session {{key = "{key}"}} : !transport.session<controller>
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %len64 = llvm.zext %len : i32 to i64
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %done = llvm.icmp "sge" %i, %n : i64
    llvm.cond_br %done, ^exit, ^body
  ^body:
    %offset = llvm.mul %i, %len64 : i64
    %payload = llvm.getelementptr %payloads[%offset] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    %reply = llvm.getelementptr %replies[%offset] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    transport.stage_payload %s, %payload, %len {{decoder_id = 0 : i32}} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %got = transport.collect %s, %reply, %len : !transport.session<controller> -> i32
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

PIPELINE = "inject-transport-session{in-bytes=8 out-bytes=8},convert-transport-to-llvm"
#: the passes after convert-transport-to-llvm that put an executor-run coprocessor's code there
EXECUTOR_PASSES = 'cross-compile-targets{{workspace="{workspace}"}},dispatch-executor-targets,convert-executor-to-llvm'


def compile_program(runs_in: str, key: str, workspace: str | None = None) -> codegen.JitProgram:
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn="echo", runs_in=runs_in)])
    module = pipeline.parse(ROUNDS_KERNEL.format(placement=BacklineAttr.from_placement(placement), key=key))
    pipeline.run(module, pipeline.from_spec(PIPELINE), keep_intermediate=workspace)
    return codegen.JitProgram(module, keep_intermediate=workspace)


def run_rounds(program: codegen.JitProgram, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    setup = program.function("backline_setup", "int32")
    teardown = program.function("backline_teardown", "int32")
    rounds = program.function("rounds", "int32", "int64", "ptr", "int32", "ptr", "ptr")
    payloads = np.random.default_rng(7).integers(0, 256, (n, 8), dtype=np.uint8)
    replies = np.zeros_like(payloads)
    rtt = np.zeros(n, dtype=np.uint64)
    assert setup() == 0
    try:
        assert rounds(n, payloads.ctypes.data, 8, replies.ctypes.data, rtt.ctypes.data) == 0
    finally:
        assert teardown() == 0
    return payloads, replies, rtt


@pytest.mark.parametrize("runs_in", ["controller-thread", "thread", "process"])
def test_compiled_controller_runs_rounds(runs_in: str, tmp_path) -> None:
    key = f"compiled-{runs_in}-{uuid.uuid4().hex[:8]}"
    server = CoprocessorProcess("memcpy", key, ["echo"]) if runs_in == "process" else None
    try:
        program = compile_program(runs_in, key, workspace=str(tmp_path / "ws"))
        payloads, replies, rtt = run_rounds(program, 20_000)
    finally:
        if server is not None:
            server.terminate()
    assert np.array_equal(payloads, replies)  # every echo came back, in order
    # A controller-thread round can be shorter than one 10 ns step of this VM's clock, and a round whose
    # thread migrated between the post and the collect can read 0 (its vCPUs' counters are not
    # in sync): almost every round, not every one, has a measured RTT.
    assert np.mean(rtt > 0) > (0.99 if runs_in != "controller-thread" else 0.0) and rtt.any()
    stages = sorted(os.listdir(tmp_path / "ws"))
    assert stages[:3] == ["00-input.mlir", "01-inject-transport-session.mlir", "02-convert-transport-to-llvm.mlir"]
    assert {"program.ll", "program.opt.ll", "program.s"} <= set(stages)
    assert not os.path.exists(f"/dev/shm/backline.{key}")


def test_compiled_program_reports_the_first_failure() -> None:
    # No coprocessor serves this key: setup's connect times out, and that first failure --
    # not the later ones it causes -- is what setup returns and bl_last_error shows.
    from backline_core._abi import last_error

    key = f"compiled-missing-{uuid.uuid4().hex[:8]}"
    placement = Placement(controller=Controller(init_args={"connect_timeout_ms": 50}), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn="echo", runs_in="process")])
    module = pipeline.parse(ROUNDS_KERNEL.format(placement=BacklineAttr.from_placement(placement), key=key))
    pipeline.run(module, pipeline.from_spec(PIPELINE))
    program = codegen.JitProgram(module)
    status = program.function("backline_setup", "int32")()
    assert status == lib.BL_ETIMEOUT
    assert "no coprocessor serves key" in last_error()
    assert program.function("backline_teardown", "int32")() == 0


def test_an_undefined_external_function_is_refused_before_it_can_be_called() -> None:
    from backline_compiler import codegen, pipeline

    module = pipeline.parse("""
    llvm.func @bl_no_such_function(i32) -> i32
    llvm.func @f(%a: i32) -> i32 {
      %r = llvm.call @bl_no_such_function(%a) : (i32) -> i32
      llvm.return %r : i32
    }""")
    with pytest.raises(codegen.UnresolvedSymbolError, match="calls bl_no_such_function, defined neither in it"):
        codegen.JitProgram(module)


# -- a coprocessor in an executor ------------------------------------------------------------

def steane(syndrome: int) -> int:
    """bl_fn_steane's correction for one syndrome byte, called here directly."""
    from backline_core._native import ffi

    out, out_len = ffi.new("uint8_t[1]"), ffi.new("uint32_t *")
    assert lib.bl_fn_steane(ffi.NULL, 0, bytes([syndrome]), 1, out, 1, out_len) == 0
    return out[0]


def steane_rounds(coprocessor: Coprocessor, key: str, workspace: Path, n: int) -> np.ndarray:
    """Compile the rounds kernel for a one-byte steane round against ``coprocessor``, run ``n``
    rounds of syndromes 0..7, and return the replies."""
    placement = Placement(controller=Controller(), transport="memcpy", coprocessors=[coprocessor])
    module = pipeline.parse(ROUNDS_KERNEL.format(placement=BacklineAttr.from_placement(placement), key=key))
    spec = "inject-transport-session{in-bytes=1 out-bytes=1},convert-transport-to-llvm"
    if coprocessor.dispatched:
        spec += "," + EXECUTOR_PASSES.format(workspace=workspace)
    pipeline.run(module, pipeline.from_spec(spec))
    program = codegen.JitProgram(module)
    setup = program.function("backline_setup", "int32")
    teardown = program.function("backline_teardown", "int32")
    rounds = program.function("rounds", "int32", "int64", "ptr", "int32", "ptr", "ptr")
    syndromes = (np.arange(n) % 8).astype(np.uint8).reshape(n, 1)
    replies = np.zeros_like(syndromes)
    rtt = np.zeros(n, dtype=np.uint64)
    from backline_core._abi import last_error

    assert setup() == 0, last_error()
    try:
        assert rounds(n, syndromes.ctypes.data, 1, replies.ctypes.data, rtt.ctypes.data) == 0, last_error()
    finally:
        assert teardown() == 0, last_error()
    assert rtt.any()
    return replies


def _children(pid: int) -> set[int]:
    return set(children(pid, zombies=True))  # an unreaped session process still counts: the executor reaps them


def test_a_coprocessor_in_an_executor_answers_like_one_in_process(tmp_path: Path) -> None:
    handle = pytest.importorskip("backline_executor_orc.handle", reason="needs the backline-executor-orc plugin")
    n = 5000
    in_process_key = f"compiled-thread-{uuid.uuid4().hex[:8]}"
    expected = steane_rounds(Coprocessor(name=in_process_key, coprocessor_fn="steane", runs_in="thread"),
                             in_process_key, tmp_path, n)
    assert expected[:, 0].tolist() == [steane(i % 8) for i in range(n)]

    key = f"compiled-executor-{uuid.uuid4().hex[:8]}"
    with handle.Executor.local(timeout_ms=20_000) as ex:
        assert not _children(ex.pid)
        replies = steane_rounds(Coprocessor(name=key, coprocessor_fn="steane", executor=ex), key, tmp_path, n)
        np.testing.assert_array_equal(replies, expected)
        # the one object the pipeline made is the coprocessor's, for this machine
        assert sorted(os.listdir(tmp_path)) == [f"coprocessor_{key}.{ex.triple}.o"]
        # teardown closed the executor session: its session process ends (no timing asserted: a deadline)
        deadline = time.monotonic() + 30
        while _children(ex.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _children(ex.pid), "the executor's session process outlived the program's teardown"
    assert not os.path.exists(f"/dev/shm/backline.{key}")
