// RUN: backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" | filecheck %s

// policy=by-check-type: x decodes go to the first coprocessor, z decodes to the second.

module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", coprocessor_fn = "steane">, #transport.node<name = "zdec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    // CHECK:      transport.get_session {key = "zdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 1 : i32}
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    // CHECK:      transport.get_session {key = "xdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 0 : i32}
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    // CHECK:      transport.get_session {key = "xdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 0 : i32}
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    // CHECK:      transport.get_session {key = "zdec"}
    // CHECK:      transport.stage_payload {{.*}} {decoder_id = 1 : i32}
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    func.return
  }
  // CHECK-NOT: bqec.decode
}
