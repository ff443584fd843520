// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// A decoder_id next to check_type is a mix too (check_type already implies the id).

// CHECK: 'bqec.decode' mixes the two forms: it has tanner, check_type (implicit form) and decoder_id (explicit form); give either
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {check_type = "z", decoder_id = 1 : i32, tanner = #bqec.tanner<3x7, "787315">}
  func.return
}
