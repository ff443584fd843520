// RUN: backline-opt %s -p lower-decode-to-transport --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p lower-decode-to-transport > /dev/null

// A function that declares its reply width (reply_bits = 20: 3 bytes) needs that much room
// in the correction buffer; 2 bytes would cut the reply short.

// CHECK: lower-decode-to-transport: bqec.decode #0 gives the reply of coprocessor 'dec' 2 correction bytes, but its function 'wide' replies with 20 bits (3 bytes)
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "wide", python = "operator:neg", reply_bits = 20>>]>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32}
    func.return
  }
}
