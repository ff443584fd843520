// RUN: backline-opt %s -p "inject-transport-session{in-bytes=2}" | filecheck %s

// backline.message_sizes = {key = [in_bytes, out_bytes]} overrides the options for a key;
// other keys keep the options (in-bytes=2 here, out-bytes left at its default of 8).

// CHECK:      transport.create {{.*}}key = "a"{{.*}} : !transport.session<controller>
// CHECK:      transport.set_message_sizes %{{.*}} {in_bytes = 2 : i64, out_bytes = 8 : i64}
// CHECK:      transport.create {{.*}}key = "b"{{.*}} : !transport.session<controller>
// CHECK:      transport.set_message_sizes %{{.*}} {in_bytes = 16 : i64, out_bytes = 2 : i64}
module attributes {backline.message_sizes = {b = [16, 2]}, backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "a", hardware = "cpu", runs_in = "process", coprocessor_fn = "echo">, #transport.node<name = "b", hardware = "cpu", runs_in = "process", coprocessor_fn = "echo">]>} {
}
