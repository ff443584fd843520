// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' decoder_id must be in [0, 256), got -1
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = -1 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
  func.return
}
