"""cross-compile-targets, dispatch-executor-targets and convert-executor-to-llvm, end to end.

No executor runtime exists yet, so the lowered program is checked by compiling it, and by
running it against a mock of the runtime ABI (ctypes callbacks bound to the bl_executor_*
symbols) whose "executor" loads the shipped object into an MCJIT engine of its own.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import pytest
from backline_compiler import codegen, pipeline
from backline_compiler.passes.convert_executor_to_llvm import LINK_OBJECTS_ATTR, RUNTIME_FUNCTIONS
from backline_compiler.passes.cross_compile_targets import OBJECT_FILE_ATTR, TARGET_ATTR, WORKSPACE_ATTR
from xdsl.dialects import llvm as llvm_dialect
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.utils.exceptions import PassFailedException

from backline_core import get_library

HOST = llvm.get_default_triple()
ARM = "aarch64-unknown-linux-gnu"
EM_X86_64, EM_AARCH64 = 62, 183
HEADER = Path(__file__).resolve().parents[1] / "backline_compiler" / "runtime" / "executor.h"
CORE_INCLUDE = Path(get_library()).resolve().parents[1] / "native" / "include"


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
    pipeline.run(m, f'cross-compile-targets{{workspace="{tmp_path}"}}')

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
    pipeline.run(m, f'cross-compile-targets{{workspace="{tmp_path}"}}')
    path = nested(m)[0].attributes[OBJECT_FILE_ATTR].data  # type: ignore[union-attr]

    engine = _empty_engine()
    engine.add_object_file(path)
    engine.finalize_object()
    decode = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("decode"))
    assert [decode(x) for x in (0, 5, -2)] == [1, 16, -5]


def test_workspace_default_is_recorded_and_reused() -> None:
    m = parse(target_module("a"))
    pipeline.run(m, "cross-compile-targets")
    workspace = m.attributes[WORKSPACE_ATTR].data  # type: ignore[union-attr]
    try:
        assert os.path.basename(workspace).startswith("backline-workspace-")
        assert os.path.isfile(os.path.join(workspace, f"a.{HOST}.o"))
        # a second run compiles only the new target, into the recorded workspace
        text = pipeline.print_module(m).rstrip().removesuffix("}") + target_module("b", ARM) + "}\n"
        m2 = pipeline.parse(text)  # the printed module has its own top-level braces
        pipeline.run(m2, "cross-compile-targets")
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
        pipeline.run(m, f'cross-compile-targets{{workspace="{tmp_path}"}}')
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


def program(remote_triple: str = ARM) -> str:
    return (target_module("decoder", remote_triple, ADDRESS) + target_module("local", body=TWICE_BODY)
            + HOST_CODE)


def test_dispatch_remote_call_becomes_executor_ops(tmp_path: Path) -> None:
    m = parse(program())
    pipeline.run(m, f'cross-compile-targets{{workspace="{tmp_path}"}},dispatch-executor-targets')
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


def lower(tmp_path: Path, remote_triple: str = ARM) -> ModuleOp:
    m = parse(program(remote_triple))
    pipeline.run(m, f'cross-compile-targets{{workspace="{tmp_path}"}},dispatch-executor-targets,'
                    "convert-executor-to-llvm")
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


# -- the lowered program against a mock executor runtime ---------------------------------

c_void_pp = ctypes.POINTER(ctypes.c_void_p)
_PROTOS = {
    "bl_executor_open": ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p),
    "bl_executor_send_binary": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p),
    "bl_executor_launch": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_char_p, c_void_pp, ctypes.c_int64, c_void_pp, ctypes.c_int64),
    "bl_executor_close": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p),
}


def _empty_engine() -> llvm.ExecutionEngine:
    mod = llvm.parse_assembly("")
    return llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine())


class MockExecutor:
    """The bl_executor_* ABI in Python; 'sent' objects are JIT-loaded and run here."""

    SESSION = 0x5E55

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.engines: dict[str, llvm.ExecutionEngine] = {}
        self.fail_send = 0
        self.callbacks = {name: proto(getattr(self, name.removeprefix("bl_executor_")))
                          for name, proto in _PROTOS.items()}
        for name, cb in self.callbacks.items():
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)

    def open(self, address: bytes) -> int:
        self.log.append(("open", address.decode()))
        return self.SESSION

    def send_binary(self, session: int, path: bytes) -> int:
        self.log.append(("send_binary", session, path.decode()))
        if self.fail_send:
            return self.fail_send
        engine = _empty_engine()
        engine.add_object_file(path.decode())
        engine.finalize_object()
        self.engines[path.decode()] = engine
        return 0

    def launch(self, session: int, symbol: bytes, path: bytes, signature: bytes, args, nargs: int,
               results, nresults: int) -> int:
        if signature != b"i64 (i64)" or (nargs, nresults) != (1, 1):
            return -1  # BL_EINVAL: this mock runs i64 -> i64 kernels only
        x = ctypes.cast(args[0], ctypes.POINTER(ctypes.c_int64))[0]
        self.log.append(("launch", session, symbol.decode(), path.decode(), signature.decode(), x))
        engine = self.engines.get(path.decode())
        if engine is None:
            return -14  # BL_ENOTFOUND: not sent
        fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address(symbol.decode()))
        ctypes.cast(results[0], ctypes.POINTER(ctypes.c_int64))[0] = fn(x)
        return 0

    def close(self, session: int) -> int:
        self.log.append(("close", session))
        return 0


def test_lowered_program_runs_against_a_mock_runtime(tmp_path: Path) -> None:
    m = lower(tmp_path, remote_triple=HOST)  # the mock 'executor' is this process
    mock = MockExecutor()
    llvm.load_library_permanently(get_library())  # bl_status_record
    mod, tm = codegen.compile_ir(codegen.to_llvm_ir(m), None, 2)
    engine = llvm.create_mcjit_compiler(mod, tm)
    for obj in m.attributes[LINK_OBJECTS_ATTR].data:  # type: ignore[union-attr]
        engine.add_object_file(obj.data)  # the in-process target (@twice)
    engine.finalize_object()
    host = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("host"))
    status_take = ctypes.CDLL(get_library()).bl_status_take
    status_take.restype = ctypes.c_int32
    status_take()

    assert host(5) == 2 * (3 * 5 + 1)
    assert status_take() == 0
    obj = str(tmp_path / f"decoder.{HOST}.o")
    assert mock.log == [("open", ADDRESS), ("send_binary", mock.SESSION, obj),
                        ("launch", mock.SESSION, "decode", obj, "i64 (i64)", 5), ("close", mock.SESSION)]

    # a failing call does not stop the program; its status is the first failure recorded
    mock.log.clear()
    mock.engines.clear()
    mock.fail_send = -6  # BL_EPEER
    host(5)
    assert status_take() == -6
    # the launch still ran (and failed: nothing was sent), but the first failure is what is kept
    assert [entry[0] for entry in mock.log] == ["open", "send_binary", "launch", "close"]


# -- the ABI header -----------------------------------------------------------------------


def header_prototypes() -> dict[str, int]:
    """name -> parameter count of every BL_API function in executor.h."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.DOTALL)
    protos = {}
    for match in re.finditer(r"BL_API\s+[^;(]*?\b(bl_\w+)\s*\(([^)]*)\)\s*;", text):
        params = [p for p in match.group(2).split(",") if p.strip() and p.strip() != "void"]
        protos[match.group(1)] = len(params)
    return protos


def test_header_declares_the_abi_the_lowering_calls() -> None:
    protos = header_prototypes()
    runtime = {name: len(params) for name, (params, _ret) in RUNTIME_FUNCTIONS.items() if name != "bl_status_record"}
    assert protos == runtime
    assert "NOT part of" in HEADER.read_text()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_header_compiles_as_c_and_cxx() -> None:
    for lang, std in (("c", "-std=c11"), ("c++", "-std=c++17")):
        subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", std, f"-I{CORE_INCLUDE}",
                        "-x", lang, str(HEADER)], check=True)
