// RUN: backline-opt %s -p inject-noise{p=0.01} | filecheck %s

builtin.module {
  llvm.func @f(%p: !llvm.ptr, %m: !llvm.ptr) -> i32 {
    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    %q0 = llvm.mlir.constant(0 : i32) : i32
    %q1 = llvm.mlir.constant(1 : i32) : i32
    bquantum.gate "H" %d, %q0 : !bquantum.device
    bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
    bquantum.reset %d, %q1
    bquantum.apply_mask "X" %d, %q0, %m {nbits = 2 : i32} : !bquantum.device
    %r = bquantum.measure %d, %q1 : !bquantum.device -> i1
    bquantum.reset_all %d
    %z = llvm.zext %r : i1 to i32
    llvm.return %z : i32
  }
}

// CHECK:      bquantum.gate "H" %d, %q0 : !bquantum.device
// CHECK-NEXT: bquantum.noise "depolarize1" %d, %q0 {p = 1.000000e-02 : f64}
// CHECK-NEXT: bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
// CHECK-NEXT: bquantum.noise "depolarize2" %d, %q0, %q1 {p = 1.000000e-02 : f64}
// Resets and mask corrections stay noiseless; a measurement gets a bit flip first.
// CHECK-NEXT: bquantum.reset %d, %q1
// CHECK-NEXT: bquantum.apply_mask "X" %d, %q0, %m {nbits = 2 : i32} : !bquantum.device
// CHECK-NEXT: bquantum.noise "x_flip" %d, %q1 {p = 1.000000e-02 : f64}
// CHECK-NEXT: %r = bquantum.measure %d, %q1 : !bquantum.device -> i1
// CHECK-NEXT: bquantum.reset_all %d
