// RUN: backline-opt %s -p inject-transport-session | filecheck %s

// The same Python callable is fine on a coprocessor served out of the program
// (runs_in = "process"): the program only brings up the controller side.

// CHECK:     transport.create {{.*}}key = "dec"{{.*}} : !transport.session<controller>
// CHECK-NOT: transport.set_coprocessor_fn
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", runs_in = "process", coprocessor_fn = #transport.fn<name = "neg", python = "operator:neg">>]>} {
}
