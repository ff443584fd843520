// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// A configuration key the transport's backend refuses is found by resolution (which asks
// the backend, bl_config_check), and the pass stops with its message.

// CHECK: inject-transport-session: coprocessor 'dec': init_args {'colour': 'blue'} refused: unknown configuration key 'colour' for transport 'memcpy'
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", init_args = {colour = "blue"}, coprocessor_fn = "steane">]>} {
}
