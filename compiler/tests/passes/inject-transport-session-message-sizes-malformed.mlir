// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// CHECK: inject-transport-session: backline.message_sizes['a'] must be [in_bytes, out_bytes], two positive integers, got [16 : i64, 0 : i64]
module attributes {backline.message_sizes = {a = [16, 0]}, backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "a", hardware = "cpu", coprocessor_fn = "echo">]>} {
}
