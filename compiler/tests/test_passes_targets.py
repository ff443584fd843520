"""cross-compile-targets, dispatch-executor-targets and convert-executor-to-llvm, end to end.

The lowered programs run against the real runtime: libbackline's executor client talking
to an executor started here (``backline_executor_orc.handle.Executor.local()``), which
links the shipped objects into its own JIT.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import llvmlite.binding as llvm
import pytest
from backline_compiler import codegen, pipeline
from backline_compiler.passes.convert_executor_to_llvm import LINK_OBJECTS_ATTR, RUNTIME_NAMES, runtime_functions
from backline_compiler.passes.cross_compile_targets import OBJECT_FILE_ATTR, TARGET_ATTR, WORKSPACE_ATTR
from xdsl.dialects import llvm as llvm_dialect
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.utils.exceptions import PassFailedException

from backline_core import get_library
from backline_core._native import ffi, lib
from backline_core._abi import last_error

HOST = llvm.get_default_triple()
ARM = "aarch64-unknown-linux-gnu"
EM_X86_64, EM_AARCH64 = 62, 183
CORE_INCLUDE = Path(get_library()).resolve().parents[1] / "native" / "include"
HEADER = CORE_INCLUDE / "backline" / "executor.h"


def elf_machine(path: str | Path) -> int:
    data = Path(path).read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(data[18:20], "little")


def host_machine() -> int:
    arch = HOST.split("-")[0]
    if arch == "x86_64":
        return EM_X86_64
    if arch in ("aarch64", "arm64"):
        return EM_AARCH64
    pytest.skip(f"no ELF machine number known for host triple {HOST}")


DECODE_BODY = """
    llvm.func @decode(%x: i64) -> i64 {
      %c3 = llvm.mlir.constant(3) : i64
      %c1 = llvm.mlir.constant(1) : i64
      %y = llvm.mul %x, %c3 : i64
      %z = llvm.add %y, %c1 : i64
      llvm.return %z : i64
    }
"""


def target_module(name: str, triple: str | None = None, address: str | None = None, body: str = DECODE_BODY) -> str:
    fields = [f'name = "{name}"']
    if triple:
        fields.append(f'triple = "{triple}"')
    if address:
        fields.append(f'address = "{address}"')
    return f"builtin.module attributes {{backline.target = {{{', '.join(fields)}}}}} {{{body}}}\n"


def parse(text: str) -> ModuleOp:
    """Parse ``text`` as the body of a host module (one lone builtin.module would be the top)."""
    return pipeline.parse("builtin.module {\n" + text + "}\n")


def nested(module: ModuleOp) -> list[ModuleOp]:
    return [op for op in module.ops if isinstance(op, ModuleOp)]


# -- cross-compile-targets ----------------------------------------------------------------


def test_cross_compile_host_and_aarch64(tmp_path: Path) -> None:
    m = parse(target_module("dec_host") + target_module("dec_arm", ARM))
    pipeline.run(m, pipeline.from_spec(f'cross-compile-targets{{workspace="{tmp_path}"}}'))

    assert m.attributes[WORKSPACE_ATTR] == StringAttr(str(tmp_path))
    host_obj, arm_obj = tmp_path / f"dec_host.{HOST}.o", tmp_path / f"dec_arm.{ARM}.o"
    assert host_obj.is_file() and arm_obj.is_file()
    assert elf_machine(host_obj) == host_machine()
    assert elf_machine(arm_obj) == EM_AARCH64

    for target, obj in zip(nested(m), (host_obj, arm_obj), strict=True):
        assert target.attributes[OBJECT_FILE_ATTR] == StringAttr(str(obj))
        (decl,) = target.ops
        assert isinstance(decl, llvm_dialect.FuncOp)
        assert decl.sym_name.data == "decode" and not decl.body.blocks
        assert decl.linkage.linkage.data == "external"
        assert decl.function_type == llvm_dialect.LLVMFunctionType([llvm_dialect.i64], llvm_dialect.i64)
    # a declaration-only module converts: the object really is where the code went
    assert "declare i64 @\"decode\"(i64" in codegen.to_llvm_ir(ModuleOp([d.clone() for d in nested(m)[0].ops]))


def test_host_object_runs_in_mcjit(tmp_path: Path) -> None:
    m = parse(target_module("dec", HOST))
    pipeline.run(m, pipeline.from_spec(f'cross-compile-targets{{workspace="{tmp_path}"}}'))
    path = nested(m)[0].attributes[OBJECT_FILE_ATTR].data  # type: ignore[union-attr]

    engine = _empty_engine()
    engine.add_object_file(path)
    engine.finalize_object()
    decode = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("decode"))
    assert [decode(x) for x in (0, 5, -2)] == [1, 16, -5]


def test_workspace_default_is_recorded_and_reused() -> None:
    m = parse(target_module("a"))
    pipeline.run(m, pipeline.from_spec("cross-compile-targets"))
    workspace = m.attributes[WORKSPACE_ATTR].data  # type: ignore[union-attr]
    try:
        assert os.path.basename(workspace).startswith("backline-workspace-")
        assert os.path.isfile(os.path.join(workspace, f"a.{HOST}.o"))
        # a second run compiles only the new target, into the recorded workspace
        text = pipeline.print_module(m).rstrip().removesuffix("}") + target_module("b", ARM) + "}\n"
        m2 = pipeline.parse(text)  # the printed module has its own top-level braces
        pipeline.run(m2, pipeline.from_spec("cross-compile-targets"))
        assert m2.attributes[WORKSPACE_ATTR] == StringAttr(workspace)
        assert sorted(os.listdir(workspace)) == sorted([f"a.{HOST}.o", f"b.{ARM}.o"])
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.mark.parametrize(("modules", "message"), [
    (target_module("x") + target_module("x", ARM),
     "cross-compile-targets: two target modules are named 'x'; target names must be unique"),
    (target_module("x", "frobnicator-unknown-none"),
     "cross-compile-targets: target 'x': unknown target triple 'frobnicator-unknown-none'"),
])
def test_cross_compile_errors(tmp_path: Path, modules: str, message: str) -> None:
    m = parse(modules)
    with pytest.raises(PassFailedException, match=re.escape(message)):
        pipeline.run(m, pipeline.from_spec(f'cross-compile-targets{{workspace="{tmp_path}"}}'))
    assert not list(tmp_path.iterdir()), "nothing is written when the module is rejected"


# -- dispatch and conversion --------------------------------------------------------------

TWICE_BODY = """
    llvm.func @twice(%x: i64) -> i64 {
      %y = llvm.add %x, %x : i64
      llvm.return %y : i64
    }
"""

HOST_CODE = """
llvm.func @decode(i64) -> i64
llvm.func @twice(i64) -> i64
llvm.func @host(%x: i64) -> i64 {
  %r = llvm.call @decode(%x) : (i64) -> i64
  %q = llvm.call @twice(%r) : (i64) -> i64
  llvm.return %q : i64
}
"""

ADDRESS = "decoder-host:9000"


def program(remote_triple: str = ARM, address: str = ADDRESS) -> str:
    return (target_module("decoder", remote_triple, address) + target_module("local", body=TWICE_BODY)
            + HOST_CODE)


def test_dispatch_remote_call_becomes_executor_ops(tmp_path: Path) -> None:
    m = parse(program())
    pipeline.run(m, pipeline.from_spec(f'cross-compile-targets{{workspace="{tmp_path}"}},dispatch-executor-targets'))
    obj = str(tmp_path / f"decoder.{ARM}.o")
    host = next(op for op in m.ops if isinstance(op, llvm_dialect.FuncOp) and op.sym_name.data == "host")
    names = [op.name for op in host.body.block.ops]
    assert names == ["executor.open", "executor.send_binary", "executor.launch", "llvm.call",
                     "executor.close", "llvm.return"]
    ops = list(host.body.block.ops)
    assert ops[0].address.data == ADDRESS  # type: ignore[attr-defined]
    assert ops[1].object_file.data == obj  # type: ignore[attr-defined]
    assert (ops[2].symbol.data, ops[2].object_file.data) == ("decode", obj)  # type: ignore[attr-defined]
    assert ops[3].callee.root_reference.data == "twice"  # type: ignore[attr-defined]  # in process: unchanged
    # the host's declaration of the dispatched function is gone; the local one stays
    top = {op.sym_name.data for op in m.ops if isinstance(op, llvm_dialect.FuncOp)}
    assert top == {"twice", "host"}


def lower(tmp_path: Path, remote_triple: str = ARM, address: str = ADDRESS, text: str | None = None) -> ModuleOp:
    m = parse(text if text is not None else program(remote_triple, address))
    pipeline.run(m, pipeline.from_spec(f'cross-compile-targets{{workspace="{tmp_path}"}},dispatch-executor-targets,'
                    "convert-executor-to-llvm"))
    return m


def test_conversion_leaves_only_llvm_ops_that_compile(tmp_path: Path) -> None:
    m = lower(tmp_path)
    dialects = {op.dialect_name() for op in m.walk() if op is not m}
    assert dialects == {"llvm"}, dialects
    assert TARGET_ATTR not in pipeline.print_module(m)
    assert m.attributes[LINK_OBJECTS_ATTR] == ArrayAttr([StringAttr(str(tmp_path / f"local.{HOST}.o"))])

    ir = codegen.to_llvm_ir(m)
    for name in ("bl_executor_open", "bl_executor_send_binary", "bl_executor_launch", "bl_executor_close",
                 "bl_status_record"):
        assert f'@"{name}"' in ir
    host_obj = codegen.emit_object(m, HOST, path=str(tmp_path / "host.o"))
    assert host_obj[:4] == b"\x7fELF" and elf_machine(tmp_path / "host.o") == host_machine()
    assert int.from_bytes(codegen.emit_object(m, ARM)[18:20], "little") == EM_AARCH64


def _empty_engine() -> llvm.ExecutionEngine:
    mod = llvm.parse_assembly("")
    return llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine())


# -- the lowered program against the executor ---------------------------------------------


@pytest.fixture(scope="module")
def executor() -> Iterator[object]:
    """An executor on 127.0.0.1, a child of this process (closed, and gone, after the module)."""
    handle = pytest.importorskip("backline_executor_orc.handle", reason="needs the backline-executor-orc plugin")
    with handle.Executor.local(timeout_ms=20_000) as ex:
        yield ex


def status_take() -> int:
    return int(lib.bl_status_take())


def test_lowered_program_runs_in_the_executor(tmp_path: Path, executor) -> None:  # noqa: ANN001
    m = lower(tmp_path, remote_triple=HOST, address=executor.address)
    program = codegen.JitProgram(m)  # links the in-process target (@twice)
    host = program.function("host", "int64", "int64")
    status_take()

    assert [host(x) for x in (5, 0, -3)] == [2 * (3 * x + 1) for x in (5, 0, -3)]
    assert status_take() == 0


def test_a_failing_call_does_not_stop_the_program(tmp_path: Path, executor) -> None:  # noqa: ANN001
    m = lower(tmp_path, remote_triple=HOST, address=executor.address)
    program = codegen.JitProgram(m)
    host = program.function("host", "int64", "int64")
    obj = tmp_path / f"decoder.{HOST}.o"
    obj.unlink()  # the send fails, and so does the launch of what was not sent
    status_take()
    host(5)
    assert status_take() == lib.BL_ENOTFOUND
    assert str(obj) in last_error()  # the first failure's text: the send's


def test_an_aarch64_object_is_refused_by_an_x86_64_executor(tmp_path: Path, executor) -> None:  # noqa: ANN001
    if host_machine() != EM_X86_64:
        pytest.skip("checks an x86-64 executor")
    m = lower(tmp_path, remote_triple=ARM, address=executor.address)
    assert elf_machine(tmp_path / f"decoder.{ARM}.o") == EM_AARCH64
    program = codegen.JitProgram(m)
    status_take()
    program.function("host", "int64", "int64")(5)
    assert status_take() == lib.BL_EINVAL
    message = last_error()
    assert f"decoder.{ARM}.o" in message and "aarch64" in message and "x86-64" in message, message


BUMP_BODY = """
    llvm.func @bump(%buf: !llvm.ptr, %n: i64) -> i64 {
      %old = llvm.load %buf : !llvm.ptr -> i64
      %new = llvm.add %old, %n : i64
      llvm.store %new, %buf : i64, !llvm.ptr
      llvm.return %old : i64
    }
    llvm.func @ok() -> i32 {
      %z = llvm.mlir.constant(0 : i32) : i32
      llvm.return %z : i32
    }
    llvm.func @refuse() -> i32 {
      %e = llvm.mlir.constant(-11 : i32) : i32
      llvm.return %e : i32
    }
"""

BUFFER_HOST = """
llvm.func @bump(!llvm.ptr, i64) -> i64
llvm.func @ok() -> i32
llvm.func @refuse() -> i32
llvm.func @host(%desc: !llvm.ptr, %n: i64) -> i64 {
  %a = llvm.call @ok() {backline.async} : () -> i32
  %old = llvm.call @bump(%desc, %n) : (!llvm.ptr, i64) -> i64
  %b = llvm.call @ok() {backline.await} : () -> i32
  llvm.return %old : i64
}
llvm.func @refused() {
  %a = llvm.call @refuse() {backline.async} : () -> i32
  %b = llvm.call @refuse() {backline.await} : () -> i32
  llvm.return
}
"""


class Buffer(ctypes.Structure):
    """``bl_executor_buffer``, as executor.h declares it (checked against cffi's layout)."""

    _fields_ = [("data", ctypes.c_void_p), ("bytes", ctypes.c_uint64)]


def test_a_ptr_operand_is_a_buffer_copied_both_ways_and_async_launches_report_their_status(
        tmp_path: Path, executor) -> None:  # noqa: ANN001
    assert ctypes.sizeof(Buffer) == ffi.sizeof("bl_executor_buffer")
    assert Buffer.bytes.offset == ffi.offsetof("bl_executor_buffer", "bytes")
    m = lower(tmp_path, text=target_module("kernels", HOST, executor.address, BUMP_BODY) + BUFFER_HOST)
    program = codegen.JitProgram(m)
    host = program.function("host", "int64", "ptr", "int64")
    value = ctypes.c_int64(40)
    desc = Buffer(ctypes.addressof(value), 8)
    status_take()
    assert host(ctypes.addressof(desc), 2) == 40  # the executor saw the host's bytes ...
    assert value.value == 42  # ... and its change came back
    assert status_take() == 0

    program.function("refused", "void")()
    assert status_take() == lib.BL_EFN  # the async function's own status, at the await


# -- the ABI, read from the core's header --------------------------------------------------


def header_prototypes() -> dict[str, int]:
    """name -> parameter count of every BL_API function in executor.h."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.DOTALL)
    protos = {}
    for match in re.finditer(r"BL_API\s+[^;(]*?\b(bl_\w+)\s*\(([^)]*)\)\s*;", text):
        params = [p for p in match.group(2).split(",") if p.strip() and p.strip() != "void"]
        protos[match.group(1)] = len(params)
    return protos


def test_the_lowering_calls_the_abi_of_the_core_header() -> None:
    protos = header_prototypes()
    table = runtime_functions()
    assert set(table) == set(RUNTIME_NAMES)
    for name, (params, _ret) in table.items():
        if name != "bl_status_record":  # backline.h's
            assert protos[name] == len(params), name
    assert lib.BACKLINE_EXECUTOR_ABI_VERSION == 2


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_header_compiles_as_c_and_cxx() -> None:
    for lang, std in (("c", "-std=c11"), ("c++", "-std=c++17")):
        subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", std, f"-I{CORE_INCLUDE}",
                        "-x", lang, str(HEADER)], check=True)


# -- the deploy path's builder -------------------------------------------------------------


def executor_node(key: str, triple: str | None = None):  # noqa: ANN201
    from backline_core import plugins
    from backline_core._placement import Controller, Coprocessor, Placement
    from backline_core._resolution import resolve

    if "orc" not in plugins.names("executor"):
        pytest.skip("needs the backline-executor-orc plugin")
    options = {"address": "127.0.0.1:9", "secret_file": "/nonexistent/secret", **({"triple": triple} if triple else {})}
    placement = Placement(controller=Controller(), transport="memcpy",
                          coprocessors=[Coprocessor(name=key, coprocessor_fn="steane", executor_options=options)])
    node = resolve(placement).coprocessor(key)
    assert node.runs_in == "executor"
    return node


def test_coprocessor_object_is_the_pass_code_compiled(tmp_path: Path) -> None:
    from backline_compiler.executor_objects import coprocessor_object

    path, symbols = coprocessor_object(executor_node("dec"), in_bytes=1, out_bytes=1, workspace=str(tmp_path))
    assert path == str(tmp_path / f"coprocessor_dec.{HOST}.o")
    assert symbols == {"up": "backline_coprocessor_up_dec", "serve": "backline_coprocessor_serve_dec",
                       "stop": "backline_coprocessor_stop_dec"}
    assert elf_machine(path) == host_machine()
    llvm.load_library_permanently(get_library())  # its undefined symbols: libbackline's
    engine = _empty_engine()
    engine.add_object_file(path)
    engine.finalize_object()
    assert all(engine.get_function_address(name) for name in symbols.values())

    arm, _ = coprocessor_object(executor_node("dec-arm", ARM), in_bytes=1, out_bytes=1, workspace=str(tmp_path))
    assert elf_machine(arm) == EM_AARCH64


def test_coprocessor_object_refuses_what_is_not_an_executor_node(tmp_path: Path) -> None:
    from backline_compiler.executor_objects import coprocessor_object
    from backline_core._errors import PlacementError

    node = executor_node("dec")
    with pytest.raises(PlacementError, match="coprocessor_object: in_bytes must be a positive int, got 0"):
        coprocessor_object(node, in_bytes=0, out_bytes=1, workspace=str(tmp_path))
    import dataclasses

    with pytest.raises(PlacementError, match="coprocessor 'dec' runs in 'thread', not in an executor"):
        coprocessor_object(dataclasses.replace(node, runs_in="thread"), in_bytes=1, out_bytes=1,
                           workspace=str(tmp_path))
    assert not list(tmp_path.iterdir())
