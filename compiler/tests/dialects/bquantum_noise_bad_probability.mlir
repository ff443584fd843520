// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bquantum.noise' p must be in [0, 1], got 1.5
func.func @f(%p: !llvm.ptr, %q: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  bquantum.noise "x_flip" %d, %q {p = 1.5 : f64}
  func.return
}
