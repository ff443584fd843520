// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// runs_in belongs to coprocessors: a controller with one fails the core's shape check.

// CHECK: invalid #transport.backline placement: unknown field 'runs_in' in the controller at controller.runs_in
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<runs_in = "thread">>} {
}
