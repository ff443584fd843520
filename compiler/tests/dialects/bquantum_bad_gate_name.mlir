// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bquantum.gate' gate 'T' is unknown; choose from I, X, Y, Z, H, S, SDG, SX, CNOT, CZ, SWAP, RX, RY, RZ
func.func @f(%p: !llvm.ptr, %q: i32) {
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  bquantum.gate "t" %d, %q : !bquantum.device
  func.return
}
