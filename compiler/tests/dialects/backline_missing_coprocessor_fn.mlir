// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// A coprocessor needs its coprocessor_fn.

// CHECK: invalid #transport.backline placement: coprocessors[0] at coprocessors[0] is missing the field 'coprocessor_fn'
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec">]>} {
}
