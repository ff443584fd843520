// RUN: backline-opt %s -p lower-decode-to-transport --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p lower-decode-to-transport > /dev/null

// The resolved placement says what each coprocessor's function serves: steane serves
// decoder_ids 0 and 1, so a round with decoder_id 7 would fail at run time (BL_EDECODER).

// CHECK: lower-decode-to-transport: bqec.decode #0 sends decoder_id 7 to coprocessor 'dec', whose function 'steane' serves decoder_ids [0, 1]; use one of those, or route the decode to a coprocessor that serves it
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {decoder_id = 7 : i32, syndrome_bytes = 1 : i32, correction_bytes = 1 : i32}
    func.return
  }
}
