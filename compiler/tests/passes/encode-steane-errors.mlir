// RUN: ! backline-opt %s -p encode-steane 2>&1 | filecheck %s

// A non-Clifford gate has no transversal Steane implementation.
builtin.module {
  llvm.func @f(%p: !llvm.ptr, %theta: f64) {
    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    %q0 = llvm.mlir.constant(0 : i32) : i32
    bquantum.gate "RZ" %d, %q0 (%theta) : !bquantum.device
    llvm.return
  }
}

// CHECK: encode-steane: logical gate RZ is not supported on the Steane code (supported: H, S, X, Z, CNOT; non-Clifford gates need magic states)
