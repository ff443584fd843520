// RUN: backline-opt %s -p inject-transport-session,inject-transport-session | filecheck %s
// RUN: backline-opt %s -p inject-transport-session | backline-opt - -p inject-transport-session | filecheck %s

// Running the pass again (in one pipeline, or on its printed output) adds nothing: each
// (role, key) already created in @backline_setup, or destroyed in @backline_teardown, is
// skipped, and no second @backline_setup / @backline_teardown appears.

// CHECK-COUNT-1: llvm.func @backline_setup()
// CHECK-NOT:     llvm.func @backline_setup()
// CHECK-COUNT-1: transport.create {{.*}} : !transport.session<coprocessor>
// CHECK-COUNT-1: transport.create {{.*}} : !transport.session<controller>
// CHECK-NOT:     transport.create
// CHECK-COUNT-1: transport.take_status
// CHECK-NEXT:    llvm.return
// CHECK:         llvm.func @backline_teardown()
// CHECK-COUNT-2: transport.destroy
// CHECK-NOT:     transport.destroy
// CHECK-COUNT-1: transport.take_status
// CHECK-NOT:     llvm.func @backline_
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
}
