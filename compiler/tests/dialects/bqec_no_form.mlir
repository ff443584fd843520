// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'bqec.decode' needs either tanner + check_type (an implicit QEC decode) or decoder_id + syndrome_bytes + correction_bytes (an explicit decode); it has neither
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {coprocessor = "dec"}
  func.return
}
