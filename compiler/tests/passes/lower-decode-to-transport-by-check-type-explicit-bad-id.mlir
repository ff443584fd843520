// RUN: backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" > /dev/null
// The default policy, round-robin, takes any decoder_id.
// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s --check-prefix=RR

// CHECK: lower-decode-to-transport: bqec.decode #1 is an explicit decode with decoder_id 2, but policy by-check-type routes only decoder_id 0 (to the first coprocessor) and 1 (to the second); name the coprocessor on the op (coprocessor = "...") or use policy=round-robin
// RR: transport.stage_payload {{.*}} {decoder_id = 0 : i32}
// RR: transport.stage_payload {{.*}} {decoder_id = 2 : i32}
// The coprocessors run a function serving decoder_ids 0-7 (a Python callable: this pass
// only routes rounds; inject-transport-session would refuse it).
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>, #transport.node<name = "zdec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
    bqec.decode %syn, %corr {decoder_id = 2 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
    func.return
  }
}
