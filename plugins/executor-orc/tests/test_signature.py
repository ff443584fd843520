"""Signatures: the grammar, the LP64 layout (checked against LLVM's), marshalling, the wrapper."""

from __future__ import annotations

import ctypes
import struct

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from backline_executor_orc import signature
from backline_executor_orc.signature import SignatureError

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
llvm.initialize_all_targets()

TRIPLES = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu")


@pytest.mark.parametrize("text, canonical, nargs, nresults", [
    ("i64 (i64)", "i64 (i64)", 1, 1),
    ("void ()", "void ()", 0, 0),
    ("  {i64,i32}(i64 , ptr) ", "{i64, i32} (i64, ptr)", 2, 2),
    ("[4 x i8] (half, float, double)", "[4 x i8] (half, float, double)", 3, 1),
    ("{[2 x {i1, i128}], i24} (i7, ptr, ptr)", "{[2 x {i1, i128}], i24} (i7, ptr, ptr)", 3, 2),
])
def test_parse(text, canonical, nargs, nresults):
    sig = signature.parse(text)
    assert (sig.text, sig.nargs, sig.nresults) == (canonical, nargs, nresults)


@pytest.mark.parametrize("text, match", [
    ("", "empty"),
    ("<4 x i32> (i64)", "unsupported type '<4 x i32>'"),
    ("i64 (<2 x float>)", "unsupported type '<2 x float>'"),
    ("i65 ()", "'i65'"),
    ("i0 ()", "'i0'"),
    ("fp128 ()", "unsupported type 'fp128'"),
    ("ptr ()", "ptr is only allowed as a top-level parameter"),
    ("void ({i64, ptr})", "not in a struct"),
    ("void ([2 x ptr])", "not in an array"),
    ("void (void)", "void is only allowed as the return type"),
    ("i64 (i64", "ends"),
    ("i64 (i64,)", "expected a type"),
    ("i64 (i64) extra", "unexpected"),
    ("{} ()", "expected a type"),
    ("[3 i8] ()", "expected 'x'"),
    ("[4294967296 x i64] ()", "over the"),
    ("[1 x " * 20 + "i8" + "]" * 20 + " ()", "nest deeper"),
])
def test_rejected(text, match):
    with pytest.raises(SignatureError, match=match):
        signature.parse(text)


@pytest.mark.parametrize("triple", TRIPLES)
@pytest.mark.parametrize("text", ["i1", "i8", "i9", "i16", "i24", "i32", "i33", "i64", "i128", "half", "float",
                                  "double", "[3 x i24]", "{i8, i64}", "{i64, i8}", "{i8, i128, i16}",
                                  "[2 x {i16, i8}]", "{half, [3 x i8], double, i1}"])
def test_layout_matches_llvm(triple, text):
    t = signature.parse(f"{text} ()").ret
    target = llvm.Target.from_triple(triple).create_target_machine()
    td = target.target_data
    m = llvm.parse_assembly(f'target datalayout = "{td}"\n@g = global {t} zeroinitializer')
    ty = m.get_global_variable("g").global_value_type
    assert (signature.size_of(t), signature.align_of(t)) == (td.get_abi_size(ty), td.get_abi_alignment(ty))


def test_args_and_results_round_trip():
    sig = signature.parse("{i64, i32} (i16, ptr, [2 x i8], ptr)")
    values = [struct.pack("<h", -2), b"buffer one", b"\x01\x02", b""]
    blob = signature.pack_args(sig, values)
    assert blob[2:10] == struct.pack(">Q", 10)  # a buffer's byte count is big-endian
    assert signature.unpack_args(sig, blob) == values
    results, buffers = [struct.pack("<q", 5), struct.pack("<i", 6)], [b"BUFFER ONE", b""]
    out = signature.pack_results(sig, results, buffers)
    assert signature.unpack_results(sig, out) == (results, buffers)


@pytest.mark.parametrize("values, match", [
    ([b"\x00"], "takes 2 arguments"),
    ([b"\x00", b"\x00"], "needs 8 bytes"),
])
def test_bad_values(values, match):
    with pytest.raises(SignatureError, match=match):
        signature.pack_args(signature.parse("i64 (i64, ptr)"), values)


@pytest.mark.parametrize("blob, match", [
    (b"\x00" * 7, "ends inside value 0"),
    (b"\x00" * 8 + b"\x00" * 4, "ends inside the byte count of buffer 1"),
    (b"\x00" * 8 + struct.pack(">Q", 5) + b"abc", "ends inside value 1"),
    (b"\x00" * 8 + struct.pack(">Q", 1) + b"ab", "1 bytes after"),
])
def test_bad_blobs(blob, match):
    with pytest.raises(SignatureError, match=match):
        signature.unpack_args(signature.parse("i64 (i64, ptr)"), blob)


KERNELS = """
define {i64, i32} @kernel(i64 %x, ptr %buf, i8 %k) {
  %v = load i8, ptr %buf
  %w = add i8 %v, %k
  store i8 %w, ptr %buf
  %y = mul i64 %x, 3
  %r0 = insertvalue {i64, i32} undef, i64 %y, 0
  %r1 = insertvalue {i64, i32} %r0, i32 -7, 1
  ret {i64, i32} %r1
}
define double @half_it(double %x) {
  %y = fmul double %x, 0.5
  ret double %y
}
define void @nothing() {
  ret void
}
"""


@pytest.fixture(scope="module")
def jit():
    lljit = llvm.create_lljit_compiler(suppress_errors=True)
    trackers = []
    yield lljit, trackers
    for t in reversed(trackers):
        t.close()
    lljit.close()


def _call(jit, text: str, symbol: str, values: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """Call ``symbol`` of KERNELS through the generated wrapper, the way a session does."""
    lljit, trackers = jit
    sig = signature.parse(text)
    name = f"w{len(trackers)}"
    mod = signature.build_wrapper(sig, llvm.get_process_triple(), str(lljit.target_data))
    wrap = llvm.JITLibraryBuilder().add_ir(str(mod)).export_symbol("wrap").link(lljit, name)
    kern = llvm.JITLibraryBuilder().add_ir(KERNELS).export_symbol(symbol).link(lljit, name + "k")
    trackers += [wrap, kern]
    cells = [(ctypes.c_char * max(1, len(v))).from_buffer_copy(v.ljust(1, b"\0")) for v in values]
    slots = [ctypes.c_void_p(ctypes.addressof(c)) for c in cells]
    argv = (ctypes.c_void_p * max(1, sig.nargs))(*[
        ctypes.addressof(slots[i]) if i in sig.buffer_params else ctypes.addressof(cells[i]) for i in range(sig.nargs)
    ])
    results = [(ctypes.c_char * signature.size_of(t))() for t in sig.results]
    resv = (ctypes.c_void_p * max(1, sig.nresults))(*[ctypes.addressof(r) for r in results])
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(wrap["wrap"])(
        kern[symbol], ctypes.addressof(argv), ctypes.addressof(resv))
    return [r.raw for r in results], [cells[i].raw[: len(values[i])] for i in sig.buffer_params]


def test_wrapper_scatters_a_struct_and_writes_buffers(jit):
    results, buffers = _call(jit, "{i64, i32} (i64, ptr, i8)", "kernel",
                             [struct.pack("<q", 14), b"\x05rest", b"\x02"])
    assert results == [struct.pack("<q", 42), struct.pack("<i", -7)]
    assert buffers == [b"\x07rest"]


def test_wrapper_double_and_void(jit):
    assert _call(jit, "double (double)", "half_it", [struct.pack("<d", 3.0)])[0] == [struct.pack("<d", 1.5)]
    assert _call(jit, "void ()", "nothing", []) == ([], [])
