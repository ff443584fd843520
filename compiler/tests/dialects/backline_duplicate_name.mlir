// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// Node names are session keys: two nodes may not share one.

// CHECK: node name 'x' is used twice; node names are session keys and must be unique
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "x">, coprocessors = [#transport.node<name = "x", coprocessor_fn = "echo">]>} {
}
