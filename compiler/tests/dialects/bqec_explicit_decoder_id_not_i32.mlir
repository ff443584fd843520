// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: Expected attribute i32 but got i64
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = 0 : i64, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
  func.return
}
