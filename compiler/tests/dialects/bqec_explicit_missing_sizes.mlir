// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' has decoder_id but is missing syndrome_bytes, correction_bytes; the explicit form needs decoder_id + syndrome_bytes + correction_bytes (or give tanner + check_type instead for an implicit QEC decode)
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = 0 : i32}
  func.return
}
