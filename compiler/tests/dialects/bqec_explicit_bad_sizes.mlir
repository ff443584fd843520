// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null
// RUN: sed 's/syndrome_bytes = 0/syndrome_bytes = 1/; s/correction_bytes = 1/correction_bytes = -3/' %s \
// RUN:   | backline-opt - --verify-diagnostics | filecheck %s --check-prefix=CORR

// CHECK: 'bqec.decode' syndrome_bytes must be positive, got 0
// CORR: 'bqec.decode' correction_bytes must be positive, got -3
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = 0 : i32, syndrome_bytes = 0 : i32, correction_bytes = 1 : i32}
  func.return
}
