// RUN: backline-opt %s -p convert-bqec-to-llvm --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p convert-bqec-to-llvm > /dev/null
// Routed to a coprocessor first, nothing is left for convert-bqec-to-llvm to reject.
// RUN: sed 's/^builtin.module {/builtin.module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {/' %s \
// RUN:   | backline-opt - -p lower-decode-to-transport,convert-bqec-to-llvm | filecheck %s --check-prefix=ROUTED

// An explicit decode carries no Tanner matrix, so it cannot be decoded locally. The check
// comes before any rewrite (passes/test_explicit_decode_passes.py checks the module is left
// unchanged).

// CHECK: convert-bqec-to-llvm: bqec.decode #1 is an explicit decode (decoder_id 0, no tanner matrix), which can only run on a coprocessor; give the module a backline.placement with a coprocessor and run lower-decode-to-transport first

// ROUTED:     transport.stage_payload {{.*}} {decoder_id = 1 : i32}
// ROUTED:     transport.stage_payload {{.*}} {decoder_id = 0 : i32}
// ROUTED-NOT: bqec.decode
// ROUTED-NOT: llvm.call @bl_fn_steane
builtin.module {
  llvm.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "0f1b1b">}
    bqec.decode %syn, %corr {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32}
    %st = llvm.mlir.constant(0 : i32) : i32
    llvm.return %st : i32
  }
}
