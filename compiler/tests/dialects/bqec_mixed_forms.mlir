// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// An op takes exactly one form: tanner + check_type, or decoder_id + sizes.

// CHECK: 'bqec.decode' mixes the two forms: it has tanner, check_type (implicit form) and decoder_id, syndrome_bytes, correction_bytes (explicit form); give either tanner + check_type (an implicit QEC decode) or decoder_id + syndrome_bytes + correction_bytes (an explicit decode), not both
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {check_type = "x", decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32, tanner = #bqec.tanner<3x7, "787315">}
  func.return
}
