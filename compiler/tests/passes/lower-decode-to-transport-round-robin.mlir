// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s
// RUN: backline-opt %s -p "lower-decode-to-transport{policy=round-robin}" | filecheck %s

// policy=round-robin (the default): the i-th decode of the module, in program order and
// across functions, goes to coprocessor i mod 2. The pinned decode (#2) counts too, so the
// decodes around it keep their places.

module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", coprocessor_fn = "steane">, #transport.node<name = "zdec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  // CHECK-LABEL: func.func @first
  // CHECK:       transport.get_session {key = "xdec"}
  // CHECK:       transport.stage_payload {{.*}} {decoder_id = 1 : i32}
  // CHECK:       transport.get_session {key = "zdec"}
  // CHECK:       transport.stage_payload {{.*}} {decoder_id = 1 : i32}
  func.func @first(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    func.return
  }
  // CHECK-LABEL: func.func @second
  // CHECK:       transport.get_session {key = "zdec"}
  // CHECK:       transport.get_session {key = "zdec"}
  // CHECK:       transport.get_session {key = "xdec"}
  func.func @second(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {check_type = "x", coprocessor = "zdec", tanner = #bqec.tanner<3x7, "787315">}
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    func.return
  }
  // CHECK-NOT: bqec.decode
}
