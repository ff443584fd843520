// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bquantum.noise' channel 'amplitude_damping' is unknown; choose from x_flip, z_flip, y_flip, depolarize1, depolarize2
func.func @f(%p: !llvm.ptr, %q: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  bquantum.noise "amplitude_damping" %d, %q {p = 0.1 : f64}
  func.return
}
