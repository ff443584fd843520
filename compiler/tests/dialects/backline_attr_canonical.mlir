// RUN: backline-opt %s | filecheck %s

// A valid placement in any spacing, with defaults left out, prints as the core's canonical
// text (Placement.to_attribute()); a '>' or an escaped quote inside a string does not end it.

// CHECK: builtin.module attributes {catalyst.backline = #transport.backline<transport = "memcpy", qec_code = "steane", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "coprocessor0", hardware = "cpu", executor_options = {python = "py>3 \"x\""}, coprocessor_fn = "echo">]>} {
module attributes {catalyst.backline = #transport.backline<
    qec_code = "steane",
    controller = #transport.node<>,
    coprocessors = [#transport.node<coprocessor_fn = "echo", executor_options = {python = "py>3 \"x\""}>]>} {
}
