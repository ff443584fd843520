// RUN: backline-opt %s | filecheck %s

// Verifying the attribute checks the placement's shape only and consults no plugin: an
// unknown transport, an init_args key no transport knows and an unknown decoder all parse
// and print. Resolution (in the passes that need plugins) is where they fail.

// CHECK: #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", init_args = {colour = "blue"}, coprocessor_fn = "nope">], transport = "rdma">
module attributes {catalyst.backline = #transport.backline<transport = "rdma", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", init_args = {colour = "blue"}, coprocessor_fn = "nope">]>} {
}
