// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// The custom form normalizes the case; the generic form must already be canonical.
// CHECK: 'bquantum.gate' gate 'cnot' must be written 'CNOT'
func.func @f(%p: !llvm.ptr, %q0: i32, %q1: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  "bquantum.gate"(%d, %q0, %q1) <{gate = "cnot", operandSegmentSizes = array<i32: 1, 2, 0>}> : (!bquantum.device, i32, i32) -> ()
  func.return
}
