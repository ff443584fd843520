// RUN: backline-opt %s -p encode-steane | filecheck %s
// RUN: backline-opt %s -p encode-steane{apply-correction=false} | filecheck %s --check-prefix=BASELINE

// One logical qubit: H_L, then a logical measurement.
builtin.module {
  llvm.func @one(%dev: !llvm.ptr) -> i32 {
    %d = bquantum.device_from_ptr %dev : !llvm.ptr -> !bquantum.device
    %q0 = llvm.mlir.constant(0 : i32) : i32
    bquantum.gate "H" %d, %q0 : !bquantum.device
    %m = bquantum.measure %d, %q0 : !bquantum.device -> i1
    %r = llvm.zext %m : i1 to i32
    llvm.return %r : i32
  }
}

// Syndrome and correction bytes live in the entry block.
// CHECK:      %syndrome = llvm.alloca %{{.*}} x i8 : (i64) -> !llvm.ptr
// CHECK-NEXT: %correction = llvm.alloca %{{.*}} x i8 : (i64) -> !llvm.ptr
// CHECK:      %q0 = llvm.mlir.constant(0 : i32) : i32
// |0_L>: H on data 0, 4, 6, then CNOT 0->{1,2,3}, 4->{1,2,5}, 6->{2,3,5}.
// CHECK:      %[[W0:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT: bquantum.gate "H" %d, %[[W0]] : !bquantum.device
// CHECK-NEXT: %[[W4:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT: bquantum.gate "H" %d, %[[W4]] : !bquantum.device
// CHECK-NEXT: %[[W6:.*]] = llvm.mlir.constant(6 : i32) : i32
// CHECK-NEXT: bquantum.gate "H" %d, %[[W6]] : !bquantum.device
// CHECK-NEXT: %[[W1:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W0]], %[[W1]] : !bquantum.device
// CHECK-NEXT: %[[W2:.*]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W0]], %[[W2]] : !bquantum.device
// CHECK-NEXT: %[[W3:.*]] = llvm.mlir.constant(3 : i32) : i32
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W0]], %[[W3]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W4]], %[[W1]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W4]], %[[W2]] : !bquantum.device
// CHECK-NEXT: %[[W5:.*]] = llvm.mlir.constant(5 : i32) : i32
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W4]], %[[W5]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W6]], %[[W2]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W6]], %[[W3]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W6]], %[[W5]] : !bquantum.device
// H_L: transversal H.
// CHECK-COUNT-7: bquantum.gate "H" %d, %{{.*}} : !bquantum.device
// Z-check row 0 on ancilla 7: reset, CNOT data 0..3 -> ancilla, measure.
// CHECK:      %[[A0:.*]] = llvm.mlir.constant(7 : i32) : i32
// CHECK-NEXT: bquantum.reset %d, %[[A0]]
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W0]], %[[A0]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W1]], %[[A0]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W2]], %[[A0]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[W3]], %[[A0]] : !bquantum.device
// CHECK-NEXT: %[[S0:.*]] = bquantum.measure %d, %[[A0]] : !bquantum.device -> i1
// CHECK:      %[[A2:.*]] = llvm.mlir.constant(9 : i32) : i32
// CHECK-NEXT: bquantum.reset %d, %[[A2]]
// CHECK:      %[[S2:.*]] = bquantum.measure %d, %[[A2]] : !bquantum.device -> i1
// The syndrome byte: s0 | s1 << 1 | s2 << 2, stored, decoded, the X correction applied.
// CHECK:      llvm.zext %[[S0]] : i1 to i8
// CHECK:      llvm.or %{{.*}}, %{{.*}} : i8
// CHECK:      %[[SYN:.*]] = llvm.or %{{.*}}, %{{.*}} : i8
// CHECK-NEXT: llvm.store %[[SYN]], %syndrome : i8, !llvm.ptr
// CHECK-NEXT: bqec.decode %syndrome, %correction {check_type = "z", tanner = #bqec.tanner<3x7, "0f1b1b">}
// CHECK-NEXT: bquantum.apply_mask "X" %d, %[[W0]], %correction {nbits = 7 : i32} : !bquantum.device
// X-check row 0: reset, H, CNOT ancilla -> data, H, measure.
// CHECK-NEXT: bquantum.reset %d, %[[A0]]
// CHECK-NEXT: bquantum.gate "H" %d, %[[A0]] : !bquantum.device
// CHECK-NEXT: bquantum.gate "CNOT" %d, %[[A0]], %[[W0]] : !bquantum.device
// CHECK:      bquantum.gate "H" %d, %[[A0]] : !bquantum.device
// CHECK-NEXT: bquantum.measure %d, %[[A0]] : !bquantum.device -> i1
// CHECK:      bqec.decode %syndrome, %correction {check_type = "x", tanner = #bqec.tanner<3x7, "0f1b1b">}
// CHECK-NEXT: bquantum.apply_mask "Z" %d, %[[W0]], %correction {nbits = 7 : i32} : !bquantum.device
// The logical measurement: 7 data measurements, Hz parities, a z decode, the corrected parity of {0,1,4}.
// CHECK-COUNT-7: bquantum.measure %d, %{{.*}} : !bquantum.device -> i1
// CHECK:      llvm.xor %{{.*}}, %{{.*}} : i1
// CHECK:      bqec.decode %syndrome, %correction {check_type = "z", tanner = #bqec.tanner<3x7, "0f1b1b">}
// CHECK:      %[[MASK:.*]] = llvm.load %correction : !llvm.ptr -> i8
// CHECK-NEXT: %[[FIXED:.*]] = llvm.xor %{{.*}}, %[[MASK]] : i8
// CHECK-NEXT: %[[L:.*]] = llvm.mlir.constant(19 : i8) : i8
// CHECK-NEXT: llvm.and %[[FIXED]], %[[L]] : i8
// CHECK:      %m = llvm.trunc %{{.*}} : i8 to i1
// CHECK-NEXT: %r = llvm.zext %m : i1 to i32
// CHECK-NOT:  bquantum.gate

// Without correction the decodes stay, the masks are not applied and the readout is raw.
// BASELINE:     bqec.decode %syndrome, %correction {check_type = "z"
// BASELINE-NOT: bquantum.apply_mask
// BASELINE:     bqec.decode %syndrome, %correction {check_type = "x"
// BASELINE-NOT: bquantum.apply_mask
// BASELINE:     bqec.decode %syndrome, %correction {check_type = "z"
// BASELINE-NOT: llvm.load %correction
// BASELINE:     %m = llvm.trunc
