// RUN: backline-opt %s -p convert-quantum-to-llvm | filecheck %s
// RUN: backline-opt %s -p convert-quantum-to-llvm | filecheck %s --check-prefix=ONLY-LLVM

builtin.module {
  llvm.func @circuit(%p: !llvm.ptr, %q0: i32, %q1: i32, %theta: f64) -> i32 {
    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    bquantum.gate "H" %d, %q0 : !bquantum.device
    bquantum.gate "SX" %d, %q1 : !bquantum.device
    bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
    bquantum.gate "SWAP" %d, %q1, %q0 : !bquantum.device
    bquantum.gate "RY" %d, %q1 (%theta) : !bquantum.device
    bquantum.noise "x_flip" %d, %q1 {p = 2.000000e-01 : f64}
    bquantum.noise "depolarize2" %d, %q0, %q1 {p = 1.000000e-02 : f64}
    %m = bquantum.measure %d, %q0 : !bquantum.device -> i1
    bquantum.reset %d, %q1
    bquantum.reset_all %d
    %r = llvm.zext %m : i1 to i32
    llvm.return %r : i32
  }
}

// The device runtime functions are declared once each, at the top.
// CHECK:      llvm.func @bl_dev_gate1(!llvm.ptr, i32, i32) -> i32
// CHECK:      llvm.func @bl_status_record(i32) -> i32
// CHECK:      llvm.func @bl_dev_gate2(!llvm.ptr, i32, i32, i32) -> i32
// CHECK:      llvm.func @bl_dev_rotation(!llvm.ptr, i32, i32, f64) -> i32
// CHECK:      llvm.func @bl_dev_noise(!llvm.ptr, i32, !llvm.ptr, i32, f64) -> i32
// CHECK:      llvm.func @bl_dev_measure(!llvm.ptr, i32) -> i32
// CHECK:      llvm.func @bl_dev_reset(!llvm.ptr, i32) -> i32
// CHECK:      llvm.func @bl_dev_reset_all(!llvm.ptr) -> i32

// device_from_ptr is gone: the bl_device pointer argument is used directly. Noise wire
// arrays are entry-block slots.
// CHECK-LABEL: llvm.func @circuit(%p: !llvm.ptr, %q0: i32, %q1: i32, %theta: f64) -> i32
// CHECK:        %[[W1:.*]] = llvm.alloca %{{.*}} x i32
// CHECK:        %[[TWO:.*]] = llvm.mlir.constant(2) : i64
// CHECK-NEXT:   %[[W2:.*]] = llvm.alloca %[[TWO]] x i32
// Gates: bl_gate ids H=4, SX=7, CNOT=8, SWAP=10, RY=12; every status recorded.
// CHECK:        %[[H:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT:   %[[RC0:.*]] = llvm.call @bl_dev_gate1(%p, %[[H]], %q0) : (!llvm.ptr, i32, i32) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC0]])
// CHECK-NEXT:   %[[SX:.*]] = llvm.mlir.constant(7 : i32) : i32
// CHECK-NEXT:   %[[RC1:.*]] = llvm.call @bl_dev_gate1(%p, %[[SX]], %q1)
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC1]])
// CHECK-NEXT:   %[[CNOT:.*]] = llvm.mlir.constant(8 : i32) : i32
// CHECK-NEXT:   %[[RC2:.*]] = llvm.call @bl_dev_gate2(%p, %[[CNOT]], %q0, %q1) : (!llvm.ptr, i32, i32, i32) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC2]])
// CHECK-NEXT:   %[[SWAP:.*]] = llvm.mlir.constant(10 : i32) : i32
// CHECK-NEXT:   %[[RC3:.*]] = llvm.call @bl_dev_gate2(%p, %[[SWAP]], %q1, %q0)
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC3]])
// CHECK-NEXT:   %[[RY:.*]] = llvm.mlir.constant(12 : i32) : i32
// CHECK-NEXT:   %[[RC4:.*]] = llvm.call @bl_dev_rotation(%p, %[[RY]], %q1, %theta) : (!llvm.ptr, i32, i32, f64) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC4]])
// Noise: wires stored into the slot, then bl_dev_noise(dev, bl_noise id, wires, count, p).
// CHECK-NEXT:   llvm.store %q1, %[[W1]] : i32, !llvm.ptr
// CHECK-NEXT:   %[[P1:.*]] = llvm.mlir.constant(2.000000e-01 : f64) : f64
// CHECK-NEXT:   %[[XF:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[N1:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:   %[[RC5:.*]] = llvm.call @bl_dev_noise(%p, %[[XF]], %[[W1]], %[[N1]], %[[P1]]) : (!llvm.ptr, i32, !llvm.ptr, i32, f64) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC5]])
// CHECK-NEXT:   llvm.store %q0, %[[W2]] : i32, !llvm.ptr
// CHECK-NEXT:   %[[SECOND:.*]] = llvm.getelementptr %[[W2]][1] : (!llvm.ptr) -> !llvm.ptr, i32
// CHECK-NEXT:   llvm.store %q1, %[[SECOND]] : i32, !llvm.ptr
// CHECK-NEXT:   %[[P2:.*]] = llvm.mlir.constant(1.000000e-02 : f64) : f64
// CHECK-NEXT:   %[[DP2:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT:   %[[N2:.*]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT:   %[[RC6:.*]] = llvm.call @bl_dev_noise(%p, %[[DP2]], %[[W2]], %[[N2]], %[[P2]])
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC6]])
// Measure: a negative result is a status (recorded); otherwise 0 is recorded, and the
// outcome is rc == 1.
// CHECK-NEXT:   %[[RC7:.*]] = llvm.call @bl_dev_measure(%p, %q0) : (!llvm.ptr, i32) -> i32
// CHECK-NEXT:   %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[NEG:.*]] = llvm.icmp "slt" %[[RC7]], %[[ZERO]] : i32
// CHECK-NEXT:   %[[ERR:.*]] = llvm.select %[[NEG]], %[[RC7]], %[[ZERO]] : i1, i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[ERR]])
// CHECK-NEXT:   %[[ONE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:   %m = llvm.icmp "eq" %[[RC7]], %[[ONE]] : i32
// CHECK-NEXT:   %[[RC8:.*]] = llvm.call @bl_dev_reset(%p, %q1) : (!llvm.ptr, i32) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC8]])
// CHECK-NEXT:   %[[RC9:.*]] = llvm.call @bl_dev_reset_all(%p) : (!llvm.ptr) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC9]])
// CHECK-NEXT:   %r = llvm.zext %m : i1 to i32
// CHECK-NEXT:   llvm.return %r : i32

// ONLY-LLVM-NOT: bquantum
