// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// A co-located coprocessor whose coprocessor_fn is a Python callable cannot be bound by
// compiled code: the pass says so and suggests a native decoder.

// CHECK: inject-transport-session: coprocessor 'dec' runs the Python callable 'neg' as its coprocessor_fn, and compiled code cannot bind a Python function. Use a native decoder
// CHECK-SAME: "steane"
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = #transport.fn<name = "neg", python = "operator:neg">>]>} {
}
