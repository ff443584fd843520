// RUN: backline-opt %s -p lower-decode-to-transport --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p lower-decode-to-transport > /dev/null

// CHECK: lower-decode-to-transport: bqec.decode #1 names coprocessor 'ydec', which is not in the placement; coprocessors: 'xdec', 'zdec'
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", coprocessor_fn = "steane">, #transport.node<name = "zdec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    bqec.decode %syn, %corr {check_type = "x", coprocessor = "ydec", tanner = #bqec.tanner<3x7, "787315">}
    func.return
  }
}
