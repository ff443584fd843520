// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' has tanner but is missing check_type; the implicit form needs tanner + check_type (or give decoder_id + syndrome_bytes + correction_bytes instead for an explicit decode)
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {tanner = #bqec.tanner<3x7, "787315">}
  func.return
}
