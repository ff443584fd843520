// RUN: backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" | filecheck %s

// policy=by-check-type routes explicit decodes by decoder_id: 0 to the first coprocessor
// (as x decodes), 1 to the second (as z decodes). A decode naming its coprocessor may carry
// any decoder_id.

// The coprocessors run a function serving decoder_ids 0-7 (a Python callable: this pass
// only routes rounds; inject-transport-session would refuse it).
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>, #transport.node<name = "zdec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    // CHECK:      transport.get_session {key = "zdec"}
    // CHECK-NEXT: llvm.mlir.constant(3 : i32)
    // CHECK-NEXT: transport.stage_payload {{.*}} {decoder_id = 1 : i32}
    // CHECK:      llvm.mlir.constant(4 : i32)
    // CHECK-NEXT: transport.collect
    bqec.decode %syn, %corr {decoder_id = 1 : i32, syndrome_bytes = 3 : i32, correction_bytes = 4 : i32}
    // CHECK:      transport.get_session {key = "xdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 0 : i32}
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 3 : i32, correction_bytes = 4 : i32}
    // CHECK:      transport.get_session {key = "zdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 1 : i32}
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    // CHECK:      transport.get_session {key = "zdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 5 : i32}
    bqec.decode %syn, %corr {decoder_id = 5 : i32, syndrome_bytes = 3 : i32, correction_bytes = 4 : i32, coprocessor = "zdec"}
    func.return
  }
  // CHECK-NOT: bqec.decode
}
