// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: node 'dec' has init_args ['colour'] that transport 'memcpy' does not accept; known keys: {{.*}}locality (coprocessor:
module attributes {catalyst.backline = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", init_args = {colour = "blue"}, coprocessor_fn = "steane">]>} {
}
