// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: #bqec.tanner<3x7> needs 6 hex digits (3 bytes), got 4
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {check_type = "x", tanner = #bqec.tanner<3x7, "7873">}
  func.return
}
