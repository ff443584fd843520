// RUN: backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" > /dev/null

// CHECK: lower-decode-to-transport: policy by-check-type sends decoder_id 0 to the first coprocessor and decoder_id 1 to the second, but the placement has only 1 ('dec'); add a coprocessor, use policy=round-robin, or name the coprocessor on each bqec.decode
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
    func.return
  }
}
