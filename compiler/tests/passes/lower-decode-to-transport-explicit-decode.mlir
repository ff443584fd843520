// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s
// RUN: backline-opt %s -p lower-decode-to-transport | backline-opt - | filecheck %s

// An explicit decode (decoder_id + sizes, no matrix) lowers to the same round as an
// implicit one: the stage_payload length is syndrome_bytes, its decoder_id the op's, the
// collect capacity correction_bytes. Round-robin counts explicit and implicit decodes alike.

// The coprocessors run a function serving decoder_ids 0-7 (a Python callable: this pass
// only routes rounds; inject-transport-session would refuse it).
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "a", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>, #transport.node<name = "b", hardware = "cpu", coprocessor_fn = #transport.fn<name = "ids", decoder_ids = [0, 1, 2, 3, 4, 5, 6, 7], python = "operator:neg">>]>} {
  // CHECK-LABEL: llvm.func @kernel(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) -> i32 {
  llvm.func @kernel(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {
    // CHECK-NEXT: %[[S:.*]] = transport.get_session {key = "a"} : !transport.session<controller>
    // CHECK-NEXT: %[[LEN:.*]] = llvm.mlir.constant(5 : i32) : i32
    // CHECK-NEXT: transport.stage_payload %[[S]], %[[SYN:.*]], %[[LEN]] {decoder_id = 7 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S]] : !transport.session<controller>
    // CHECK-NEXT: %[[CAP:.*]] = llvm.mlir.constant(9 : i32) : i32
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S]], %[[CORR:.*]], %[[CAP]] : !transport.session<controller> -> i32
    bqec.decode %syn, %corr {decoder_id = 7 : i32, syndrome_bytes = 5 : i32, correction_bytes = 9 : i32}
    // CHECK-NEXT: %[[S2:.*]] = transport.get_session {key = "b"} : !transport.session<controller>
    // CHECK-NEXT: %[[LEN2:.*]] = llvm.mlir.constant(1 : i32) : i32
    // CHECK-NEXT: transport.stage_payload %[[S2]], %[[SYN]], %[[LEN2]] {decoder_id = 1 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S2]] : !transport.session<controller>
    // CHECK-NEXT: %[[CAP2:.*]] = llvm.mlir.constant(1 : i32) : i32
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S2]], %[[CORR]], %[[CAP2]] : !transport.session<controller> -> i32
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
    // A named coprocessor wins over the policy, as for implicit decodes.
    // CHECK-NEXT: %[[S3:.*]] = transport.get_session {key = "b"} : !transport.session<controller>
    // CHECK-NEXT: %[[LEN3:.*]] = llvm.mlir.constant(1 : i32) : i32
    // CHECK-NEXT: transport.stage_payload %[[S3]], %[[SYN]], %[[LEN3]] {decoder_id = 0 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S3]] : !transport.session<controller>
    // CHECK-NEXT: %[[CAP3:.*]] = llvm.mlir.constant(2 : i32) : i32
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S3]], %[[CORR]], %[[CAP3]] : !transport.session<controller> -> i32
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, coprocessor = "b"}
    // CHECK-NEXT: %[[ST:.*]] = transport.take_status : i32
    // CHECK-NEXT: llvm.return %[[ST]] : i32
    %st = transport.take_status : i32
    llvm.return %st : i32
  }
  // CHECK-NOT: bqec.decode
}
