// RUN: backline-opt %s -p inject-transport-session | filecheck %s

// A coprocessor with runs_in = "process" is served outside the program (e.g.
// `backline coprocessor serve --key far`): only the controller side is emitted, expecting
// its coprocessor in another process (runs_in = "process"); the controller's own init_args
// become its config.

// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NOT:     !transport.session<coprocessor>
// CHECK:         %[[C:.*]] = transport.create {transport = "memcpy", backend_lib = "{{.*}}libbackline_transport_memcpy.so", key = "far", config = "timeout_ms=500", hardware = "cpu", runs_in = "process"} : !transport.session<controller>
// CHECK-NEXT:    transport.connect %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.exchange_keys %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.establish_channel %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.set_message_sizes %[[C]] {in_bytes = 8 : i64, out_bytes = 8 : i64} : !transport.session<controller>
// CHECK-NEXT:    transport.start %[[C]] : !transport.session<controller>
// CHECK-NEXT:    %[[ST:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST]] : i32
// CHECK-NEXT:  }
// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NEXT:    %[[TC:.*]] = transport.get_session {key = "far"} : !transport.session<controller>
// CHECK-NEXT:    transport.stop %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    transport.destroy %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    %[[ST2:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST2]] : i32
// CHECK-NEXT:  }
// CHECK-NOT:   !transport.session<coprocessor>
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu", init_args = {timeout_ms = 500}>, coprocessors = [#transport.node<name = "far", hardware = "cpu", runs_in = "process", coprocessor_fn = "echo">]>} {
}
