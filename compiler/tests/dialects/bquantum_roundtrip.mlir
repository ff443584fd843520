// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s --print-generic | filecheck %s --check-prefix=GENERIC
// RUN: backline-opt %s --print-generic | backline-opt - | filecheck %s
// RUN: backline-opt %s | backline-opt - | filecheck %s

// CHECK-LABEL: func.func @circuit(%{{.*}}: !llvm.ptr, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: f64) -> i1
func.func @circuit(%p: !llvm.ptr, %q0: i32, %q1: i32, %theta: f64) -> i1 {
  // CHECK-NEXT: %[[D:.*]] = bquantum.device_from_ptr %{{.*}} : !llvm.ptr -> !bquantum.device
  %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
  // Gate names are read in any case and printed upper case.
  // CHECK-NEXT: bquantum.gate "H" %[[D]], %[[Q0:[^ ]*]] : !bquantum.device
  bquantum.gate "h" %d, %q0 : !bquantum.device
  // CHECK-NEXT: bquantum.gate "SDG" %[[D]], %[[Q0]] : !bquantum.device
  bquantum.gate "Sdg" %d, %q0 : !bquantum.device
  // CHECK-NEXT: bquantum.gate "CNOT" %[[D]], %[[Q0]], %[[Q1:[^ ]*]] : !bquantum.device
  bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
  // CHECK-NEXT: bquantum.gate "SWAP" %[[D]], %[[Q1]], %[[Q0]] : !bquantum.device
  bquantum.gate "swap" %d, %q1, %q0 : !bquantum.device
  // CHECK-NEXT: bquantum.gate "RZ" %[[D]], %[[Q0]] (%[[T:[^)]*]]) {tag = 1 : i32} : !bquantum.device
  bquantum.gate "rz" %d, %q0 (%theta) {tag = 1 : i32} : !bquantum.device
  // CHECK-NEXT: %{{.*}} = bquantum.measure %[[D]], %[[Q0]] : !bquantum.device -> i1
  %m = bquantum.measure %d, %q0 : !bquantum.device -> i1
  // CHECK-NEXT: bquantum.reset %[[D]], %[[Q1]]
  bquantum.reset %d, %q1
  // Channel names are read in any case and printed lower case.
  // CHECK-NEXT: bquantum.noise "depolarize1" %[[D]], %[[Q0]] {p = 1.000000e-02 : f64}
  bquantum.noise "DEPOLARIZE1" %d, %q0 {p = 0.01 : f64}
  // CHECK-NEXT: bquantum.noise "x_flip" %[[D]], %[[Q1]] {p = 0.000000e+00 : f64}
  bquantum.noise "x_flip" %d, %q1 {p = 0.0 : f64}
  // CHECK-NEXT: bquantum.noise "depolarize2" %[[D]], %[[Q0]], %[[Q1]] {p = 1.000000e+00 : f64, tag = 2 : i32}
  bquantum.noise "depolarize2" %d, %q0, %q1 {p = 1.0 : f64, tag = 2 : i32}
  // CHECK-NEXT: bquantum.reset_all %[[D]]
  bquantum.reset_all %d
  // CHECK-NEXT: func.return
  func.return %m : i1
}

// GENERIC: "bquantum.device_from_ptr"(%{{.*}}) : (!llvm.ptr) -> !bquantum.device
// GENERIC: "bquantum.gate"(%{{.*}}, %{{.*}}) <{gate = "H", operandSegmentSizes = array<i32: 1, 1, 0>}> : (!bquantum.device, i32) -> ()
// GENERIC: "bquantum.gate"(%{{.*}}, %{{.*}}, %{{.*}}) <{gate = "CNOT", operandSegmentSizes = array<i32: 1, 2, 0>}> : (!bquantum.device, i32, i32) -> ()
// GENERIC: "bquantum.gate"(%{{.*}}, %{{.*}}, %{{.*}}) <{gate = "RZ", operandSegmentSizes = array<i32: 1, 1, 1>}> {tag = 1 : i32} : (!bquantum.device, i32, f64) -> ()
// GENERIC: "bquantum.measure"(%{{.*}}, %{{.*}}) : (!bquantum.device, i32) -> i1
// GENERIC: "bquantum.reset"(%{{.*}}, %{{.*}}) : (!bquantum.device, i32) -> ()
// GENERIC: "bquantum.noise"(%{{.*}}, %{{.*}}) <{channel = "depolarize1", p = 1.000000e-02 : f64}> : (!bquantum.device, i32) -> ()
// GENERIC: "bquantum.reset_all"(%{{.*}}) : (!bquantum.device) -> ()
