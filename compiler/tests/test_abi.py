"""The compiler reads the C ABI from the core's headers (cffi), never restating it."""

from __future__ import annotations

import pytest
from backline_compiler.passes import convert_bqec_to_llvm, convert_quantum_to_llvm, convert_transport_to_llvm
from backline_compiler.passes.llvm_lowering import PTR, abi_table, c_signature, llvm_type
from xdsl.dialects import llvm
from xdsl.dialects.builtin import f64, i1, i8, i32, i64

from backline_core._native import ffi, lib


def test_signatures_come_from_the_header():
    assert abi_table("bl_session_create") == {"bl_session_create": ((PTR, i32, PTR, PTR, i32, PTR), i32)}
    assert abi_table("bl_last_rtt_ns", "bl_await") == {"bl_last_rtt_ns": ((PTR,), i64), "bl_await": ((i64,), i32)}
    assert abi_table("bl_dev_rotation")["bl_dev_rotation"] == ((PTR, i32, i32, f64), i32)
    assert convert_bqec_to_llvm.COPROCESSOR_FN == ((PTR, i32, PTR, i32, PTR, i32, PTR), i32)
    for table in (convert_transport_to_llvm.RUNTIME, convert_quantum_to_llvm.RUNTIME):
        for name, signature in table.items():
            assert signature == c_signature(ffi.typeof(getattr(lib, name))), name


@pytest.mark.parametrize(
    ("ctype", "expected"),
    [("uint8_t", i8), ("int32_t", i32), ("uint32_t", i32), ("uint64_t", i64), ("double", f64), ("_Bool", i1),
     ("enum bl_runs_in", i32), ("char *", PTR), ("struct bl_session *", PTR), ("void", llvm.LLVMVoidType())],
)
def test_c_types_map_to_llvm_types(ctype, expected):
    assert llvm_type(ffi.typeof(ctype)) == expected


def test_variadic_or_non_function_types_are_refused():
    with pytest.raises(TypeError, match="not a fixed-arity C function type"):
        c_signature(ffi.typeof("int32_t"))


def test_enum_values_come_from_the_header():
    assert convert_quantum_to_llvm.GATE_IDS["CNOT"] == lib.BL_GATE_CNOT
    assert convert_quantum_to_llvm.NOISE_IDS["depolarize2"] == lib.BL_NOISE_DEPOLARIZE2


def test_frontend_decode_limits_come_from_the_header():
    decode = pytest.importorskip("backline_compiler.frontend.decode")
    assert decode.FRAME_HEADER_BYTES == lib.BL_FRAME_HEADER_BYTES
    assert decode.DEFAULT_SLOT_BYTES == lib.BL_DEFAULT_SLOT_BYTES
