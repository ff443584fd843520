// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s
// RUN: backline-opt %s -p lower-decode-to-transport | backline-opt - | filecheck %s

// One decode becomes get_session + stage_payload + post + collect on the chosen key's
// controller session. The lengths come from the Tanner matrix: a 9x13 H has 2 syndrome
// bytes and 2 correction bytes; a 3x7 H has 1 and 1. check_type "x" is decoder_id 0,
// "z" is 1.

module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  // CHECK-LABEL: llvm.func @kernel(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) -> i32 {
  llvm.func @kernel(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {
    // CHECK-NEXT: %[[S:.*]] = transport.get_session {key = "dec"} : !transport.session<controller>
    // CHECK-NEXT: %[[LEN:.*]] = llvm.mlir.constant(2 : i32) : i32
    // CHECK-NEXT: transport.stage_payload %[[S]], %[[SYN:.*]], %[[LEN]] {decoder_id = 1 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S]] : !transport.session<controller>
    // CHECK-NEXT: %[[CAP:.*]] = llvm.mlir.constant(2 : i32) : i32
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S]], %[[CORR:.*]], %[[CAP]] : !transport.session<controller> -> i32
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<9x13, "07fe6f760ae0e67e3d6c73c928531d">}
    // CHECK-NEXT: %[[S2:.*]] = transport.get_session {key = "dec"} : !transport.session<controller>
    // CHECK-NEXT: %[[LEN2:.*]] = llvm.mlir.constant(1 : i32) : i32
    // CHECK-NEXT: transport.stage_payload %[[S2]], %[[SYN]], %[[LEN2]] {decoder_id = 0 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S2]] : !transport.session<controller>
    // CHECK-NEXT: %[[CAP2:.*]] = llvm.mlir.constant(1 : i32) : i32
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S2]], %[[CORR]], %[[CAP2]] : !transport.session<controller> -> i32
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
    // CHECK-NEXT: %[[ST:.*]] = transport.take_status : i32
    // CHECK-NEXT: llvm.return %[[ST]] : i32
    %st = transport.take_status : i32
    llvm.return %st : i32
  }
  // CHECK-NOT: bqec.decode
}
