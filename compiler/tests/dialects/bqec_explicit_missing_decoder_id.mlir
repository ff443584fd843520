// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' has syndrome_bytes, correction_bytes but is missing decoder_id; the explicit form needs decoder_id + syndrome_bytes + correction_bytes
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
  func.return
}
