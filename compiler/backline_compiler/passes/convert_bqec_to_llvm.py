"""convert-bqec-to-llvm: each ``bqec.decode`` left local becomes a direct call of a
coprocessor function in libbackline.

Run it after ``lower-decode-to-transport`` (which routes decodes to coprocessors when the
module has a placement): whatever ``bqec.decode`` remains is decoded in the calling thread::

    %ctx = llvm.mlir.zero : !llvm.ptr
    %rc = llvm.call @bl_fn_steane(%ctx, %decoder_id, %syn, %syn_bytes, %corr, %corr_bytes, %out_len)
    // bl_status_record(rc != 0 ? BL_EFN : 0)

with the coprocessor-function signature of ``backline.h`` (``bl_coprocessor_fn``, read, like
``BL_EFN``, through cffi: ``ctx``, ``decoder_id``, ``in``, ``in_len``, ``out``, ``out_cap``,
``out_len``): ``ctx`` is NULL, ``decoder_id`` 0 for
``check_type = "x"`` and 1 for ``"z"``, the lengths the Tanner matrix's packed syndrome and
correction sizes, ``out_len`` an entry-block ``i32`` slot. The option ``function`` names the
coprocessor function (default ``bl_fn_steane``); it must be context-free (no init).

Only implicit decodes (``tanner`` + ``check_type``) can be decoded locally. An explicit
decode (``decoder_id`` + sizes, no matrix; the coprocessor knows its code) left here is an
error: it can only run on a coprocessor, so give the module a ``backline.placement`` with a
coprocessor and run ``lower-decode-to-transport`` before this pass. The check comes
before any rewrite, so a failure leaves the module unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32, i64
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from backline_core._native import ffi, lib

from ..dialects import bqec
from .llvm_lowering import STATUS_RECORD, LLVMLowering, abi_table, c_signature

#: A coprocessor function's signature (``bl_coprocessor_fn``).
COPROCESSOR_FN = c_signature(ffi.typeof("bl_coprocessor_fn"))


@dataclass(frozen=True)
class ConvertBqecToLLVM(ModulePass):
    """Local bqec.decode ops become calls of a coprocessor function (see the module docstring)."""

    name = "convert-bqec-to-llvm"

    function: str = "bl_fn_steane"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        runtime: dict[str, tuple[tuple[Attribute, ...], Attribute]] = {
            self.function: COPROCESSOR_FN, **abi_table(STATUS_RECORD)}
        decodes = [o for o in op.walk() if isinstance(o, bqec.DecodeOp)]
        for i, decode in enumerate(decodes):
            if decode.is_explicit:
                raise PassFailedException(
                    f"{self.name}: bqec.decode #{i} is an explicit decode (decoder_id {decode.decoder_id}, no "
                    "tanner matrix), which can only run on a coprocessor; give the module a backline.placement "
                    "with a coprocessor and run lower-decode-to-transport first"
                )
        lo = LLVMLowering(op, runtime, pass_name=self.name,
                          abi="the coprocessor-function ABI (backline/backline.h)")
        for decode in decodes:
            out_len = lo.entry_slot(decode, i32)
            null = lo.null_ptr(decode)
            rc = lo.call(self.function, [
                null, lo.constant(decode.decoder_id, i32, decode), decode.syndrome,
                lo.constant(decode.syndrome_bytes, i32, decode), decode.correction,
                lo.constant(decode.correction_bytes, i32, decode), out_len], decode)
            rc.name_hint = "rc"
            zero = lo.constant(0, i32, decode)
            failed = llvm.ICmpOp(rc, zero, IntegerAttr(llvm.ICmpPredicateFlag("ne").to_int(), i64))
            Rewriter.insert_op(failed, InsertPoint.before(decode))
            select = llvm.SelectOp(failed.res, lo.constant(lib.BL_EFN, i32, decode), zero)
            Rewriter.insert_op(select, InsertPoint.before(decode))
            lo.call(STATUS_RECORD, [select.res], decode)
            Rewriter.erase_op(decode)
        lo.finish()
