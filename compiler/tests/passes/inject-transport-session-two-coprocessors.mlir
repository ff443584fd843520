// RUN: backline-opt %s -p "inject-transport-session{in-bytes=16 out-bytes=4}" | filecheck %s

// Two co-located coprocessors, in placement order; each key gets its coprocessor then its
// controller. The in-bytes/out-bytes options set every key's message sizes. "echo" binds
// decoder_ids 0 and 1; runs_in = "controller-thread" is co-located too.

// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NEXT:    %[[XD:.*]] = transport.create {{{.*}}key = "xdec", config = "cpu=0", hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>
// CHECK:         transport.set_coprocessor_fn %[[XD]] {symbol = "bl_fn_echo", library = "{{.*}}libbackline.so", decoder_id = 0 : i32}
// CHECK-NEXT:    transport.set_coprocessor_fn %[[XD]] {symbol = "bl_fn_echo", library = "{{.*}}libbackline.so", decoder_id = 1 : i32}
// CHECK-NEXT:    transport.start %[[XD]] : !transport.session<coprocessor>
// CHECK-NEXT:    %[[XC:.*]] = transport.create {{{.*}}key = "xdec"{{.*}}runs_in = "thread"} : !transport.session<controller>
// CHECK:         transport.set_message_sizes %[[XC]] {in_bytes = 16 : i64, out_bytes = 4 : i64} : !transport.session<controller>
// CHECK-NEXT:    transport.start %[[XC]] : !transport.session<controller>
// CHECK-NEXT:    %[[ZD:.*]] = transport.create {{{.*}}key = "zdec", config = "", hardware = "cpu", runs_in = "controller-thread"} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.connect_async %[[ZD]]
// CHECK:         transport.set_coprocessor_fn %[[ZD]] {symbol = "bl_fn_steane"{{.*}}decoder_id = 0 : i32}
// CHECK-NEXT:    transport.set_coprocessor_fn %[[ZD]] {symbol = "bl_fn_steane"{{.*}}decoder_id = 1 : i32}
// CHECK-NEXT:    transport.start %[[ZD]] : !transport.session<coprocessor>
// CHECK-NEXT:    %[[ZC:.*]] = transport.create {{{.*}}key = "zdec"{{.*}}runs_in = "controller-thread"} : !transport.session<controller>
// CHECK:         transport.set_message_sizes %[[ZC]] {in_bytes = 16 : i64, out_bytes = 4 : i64} : !transport.session<controller>
// CHECK-NEXT:    transport.start %[[ZC]] : !transport.session<controller>
// CHECK-NEXT:    transport.take_status

// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NEXT:    transport.get_session {key = "xdec"} : !transport.session<controller>
// CHECK-NEXT:    transport.stop
// CHECK-NEXT:    transport.destroy
// CHECK-NEXT:    transport.get_session {key = "xdec"} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.stop
// CHECK-NEXT:    transport.destroy
// CHECK-NEXT:    transport.get_session {key = "zdec"} : !transport.session<controller>
// CHECK-NEXT:    transport.stop
// CHECK-NEXT:    transport.destroy
// CHECK-NEXT:    transport.get_session {key = "zdec"} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.stop
// CHECK-NEXT:    transport.destroy
// CHECK-NEXT:    transport.take_status
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "xdec", hardware = "cpu", runs_in = "thread", init_args = {cpu = 0}, coprocessor_fn = "echo">, #transport.node<name = "zdec", hardware = "cpu", runs_in = "controller-thread", coprocessor_fn = "steane">]>} {
}
