// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// runs_in is one of the core's places; the message is the core's shape check.

// CHECK: invalid #transport.backline placement: coprocessors[0] at coprocessors[0]: coprocessor 'dec': runs_in='inline' is not a place; use one of 'controller-thread', 'thread', 'process'
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", runs_in = "inline", coprocessor_fn = "steane">]>} {
}
