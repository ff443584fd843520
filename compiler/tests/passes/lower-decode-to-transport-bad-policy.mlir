// RUN: backline-opt %s -p "lower-decode-to-transport{policy=random}" --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p "lower-decode-to-transport{policy=random}" > /dev/null

// CHECK: lower-decode-to-transport: unknown policy 'random'; choose one of round-robin, by-check-type
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
}
