// RUN: backline-opt %s -p inject-transport-session | filecheck %s

// A placement with no coprocessors has no sessions: nothing is emitted.

// CHECK:      builtin.module attributes {backline.placement = #transport.backline<{{.*}}>} {
// CHECK-NEXT: }
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">>} {
}
