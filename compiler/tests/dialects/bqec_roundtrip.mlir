// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s --print-generic | backline-opt - | filecheck %s

// The Steane code's H: rows 0001111, 0110011, 1010101, bit-packed row-major, LSB first.

// CHECK-LABEL: func.func @decode(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @decode(%syndrome: !llvm.ptr, %correction: !llvm.ptr) {
  // CHECK-NEXT: bqec.decode %{{.*}}, %{{.*}} {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
  bqec.decode %syndrome, %correction {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
  // The shape may also be spaced out; it prints compact.
  // CHECK-NEXT: bqec.decode %{{.*}}, %{{.*}} {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, "787315">}
  bqec.decode %syndrome, %correction {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3 x 7, "787315">}
  // CHECK-NEXT: func.return
  func.return
}
