// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// An attribute cut short is a parse error at the point where it stops.

// CHECK: Expected ',' or '>' after #transport.node field 'name'
module attributes {catalyst.backline = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller"} {
}
