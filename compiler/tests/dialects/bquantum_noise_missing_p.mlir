// RUN: ! backline-opt %s 2>&1 | filecheck %s

// CHECK: 'bquantum.noise' needs {p = <probability> : f64}
func.func @f(%p: !llvm.ptr, %q: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  bquantum.noise "x_flip" %d, %q {prob = 0.1 : f64}
  func.return
}
