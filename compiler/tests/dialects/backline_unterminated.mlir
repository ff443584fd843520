// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: unterminated #transport.backline<...>: no balancing '>'
module attributes {catalyst.backline = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller"} {
}
