// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// A dispatched coprocessor (it has executor_options) does not resolve: the core has no
// executors yet, so the pass stops with the resolution's message.

// CHECK: inject-transport-session: coprocessor 'remote-dec' is remote/dispatched (remote=True or executor_options); executors are not part of backline-core yet
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "remote-dec", hardware = "cpu", executor_options = {address = "decoder-host:9000"}, coprocessor_fn = "steane">]>} {
}
