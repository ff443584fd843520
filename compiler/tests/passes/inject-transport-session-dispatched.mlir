// RUN: backline-opt %s -p inject-transport-session | filecheck %s

// A dispatched coprocessor (it has executor_options: an executor runs it out of process)
// brings up its own session there; the program only brings up the controller side.

// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NEXT:    %{{.*}} = transport.create {transport = "memcpy", backend_lib = "{{.*}}", key = "remote-dec", config = "", hardware = "cpu"} : !transport.session<controller>
// CHECK-NOT:   !transport.session<coprocessor>
// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NOT:   !transport.session<coprocessor>
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "remote-dec", hardware = "cpu", executor_options = {address = "decoder-host:9000"}, coprocessor_fn = "steane">]>} {
}
