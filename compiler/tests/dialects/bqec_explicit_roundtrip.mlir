// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s --print-generic | backline-opt - | filecheck %s
// RUN: backline-opt %s --print-generic | filecheck %s --check-prefix=GENERIC

// The explicit form: no matrix, only the decoder_id and the sizes (the coprocessor knows
// its code). coprocessor stays optional. Properties print in the order written.

// CHECK-LABEL: func.func @decode(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @decode(%syndrome: !llvm.ptr, %correction: !llvm.ptr) {
  // CHECK-NEXT: bqec.decode %{{.*}}, %{{.*}} {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, coprocessor = "dec"}
  bqec.decode %syndrome, %correction {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, coprocessor = "dec"}
  // CHECK-NEXT: bqec.decode %{{.*}}, %{{.*}} {decoder_id = 255 : i32, syndrome_bytes = 96 : i32, correction_bytes = 128 : i32}
  bqec.decode %syndrome, %correction {decoder_id = 255 : i32, syndrome_bytes = 96 : i32, correction_bytes = 128 : i32}
  // Both forms may sit side by side in one function.
  // CHECK-NEXT: bqec.decode %{{.*}}, %{{.*}} {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
  bqec.decode %syndrome, %correction {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
  // CHECK-NEXT: func.return
  func.return
}

// GENERIC: "bqec.decode"(%{{.*}}, %{{.*}}) <{decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, coprocessor = "dec"}> : (!llvm.ptr, !llvm.ptr) -> ()
