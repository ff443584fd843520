// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// decoder_id travels in transport.stage_payload, which takes [0, 256).

// CHECK: 'bqec.decode' decoder_id must be in [0, 256), got 256
func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
  bqec.decode %s, %c {decoder_id = 256 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
  func.return
}
