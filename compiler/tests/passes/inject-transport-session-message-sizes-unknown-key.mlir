// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// CHECK: inject-transport-session: backline.message_sizes names 'c', which is not a coprocessor of the placement; coprocessors: 'a', 'b'
module attributes {backline.message_sizes = {c = [16, 2]}, backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "a", hardware = "cpu", coprocessor_fn = "echo">, #transport.node<name = "b", hardware = "cpu", coprocessor_fn = "echo">]>} {
}
