// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// The attribute verifies (its shape is fine); resolving it against the installed plugins
// finds no transport 'nosuch', and the pass stops with the core's message.

// (Other installed transports may be listed before memcpy.)
// CHECK: inject-transport-session: unknown transport 'nosuch'. Installed transports:
// CHECK: memcpy (backline-transport-memcpy): serves
// CHECK: `pip install backline-transport-nosuch`
module attributes {backline.placement = #transport.backline<transport = "nosuch", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
}
