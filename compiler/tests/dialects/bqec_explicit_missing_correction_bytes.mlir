// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' has decoder_id, syndrome_bytes but is missing correction_bytes; the explicit form needs decoder_id + syndrome_bytes + correction_bytes
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, coprocessor = "dec"}
  func.return
}
