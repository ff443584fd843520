// RUN: backline-opt %s -p inject-transport-session | filecheck %s
// RUN: backline-opt %s -p inject-transport-session | diff - <(backline-opt %s)

// Without a backline.placement attribute the pass does nothing: no setup, no teardown.
// (catalyst.backline is not the attribute this pass reads.)

// CHECK-NOT: llvm.func @backline_setup
// CHECK-NOT: transport.create
// CHECK:     llvm.func @kernel
// CHECK-NOT: llvm.func @backline_teardown
module attributes {catalyst.backline = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  llvm.func @kernel() -> i32 {
    %0 = llvm.mlir.constant(0 : i32) : i32
    llvm.return %0 : i32
  }
}
