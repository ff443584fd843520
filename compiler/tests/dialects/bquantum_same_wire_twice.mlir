// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bquantum.gate' needs two distinct wires, got the same value twice
func.func @f(%p: !llvm.ptr, %q: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  bquantum.gate "CZ" %d, %q, %q : !bquantum.device
  func.return
}
