// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' check_type must be "x" or "z", got 'y'
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {check_type = "y", tanner = #bqec.tanner<3x7, "787315">}
  func.return
}
