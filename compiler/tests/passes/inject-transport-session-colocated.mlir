// RUN: backline-opt %s -p inject-transport-session | filecheck %s
// RUN: backline-opt %s -p inject-transport-session | backline-opt - | filecheck %s

// A co-located coprocessor (runs_in = "thread": in the controller's process): setup brings up its
// coprocessor session first -- connect and exchange_keys asynchronously, each awaited --
// binds the native steane function to each decoder_id it serves, and starts it; then the
// controller side. Teardown: controller, then coprocessor. Both return take_status.

// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NEXT:    %[[D:.*]] = transport.create {transport = "memcpy", backend_lib = "{{.*}}libbackline_transport_memcpy.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>
// CHECK-NEXT:    %[[T0:.*]] = transport.connect_async %[[D]] : !transport.session<coprocessor> -> !transport.token
// CHECK-NEXT:    transport.await %[[T0]]
// CHECK-NEXT:    %[[T1:.*]] = transport.exchange_keys_async %[[D]] : !transport.session<coprocessor> -> !transport.token
// CHECK-NEXT:    transport.await %[[T1]]
// CHECK-NEXT:    transport.establish_channel %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:    transport.set_coprocessor_fn %[[D]] {symbol = "bl_fn_steane", library = "{{.*}}libbackline.so", decoder_id = 0 : i32} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.set_coprocessor_fn %[[D]] {symbol = "bl_fn_steane", library = "{{.*}}libbackline.so", decoder_id = 1 : i32} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.start %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:    %[[C:.*]] = transport.create {transport = "memcpy", backend_lib = "{{.*}}libbackline_transport_memcpy.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<controller>
// CHECK-NEXT:    transport.connect %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.exchange_keys %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.establish_channel %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.set_message_sizes %[[C]] {in_bytes = 8 : i64, out_bytes = 8 : i64} : !transport.session<controller>
// CHECK-NEXT:    transport.start %[[C]] : !transport.session<controller>
// CHECK-NEXT:    %[[ST:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST]] : i32
// CHECK-NEXT:  }

// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NEXT:    %[[TC:.*]] = transport.get_session {key = "dec"} : !transport.session<controller>
// CHECK-NEXT:    transport.stop %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    transport.destroy %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    %[[TD:.*]] = transport.get_session {key = "dec"} : !transport.session<coprocessor>
// CHECK-NEXT:    transport.stop %[[TD]] : !transport.session<coprocessor>
// CHECK-NEXT:    transport.destroy %[[TD]] : !transport.session<coprocessor>
// CHECK-NEXT:    %[[ST2:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST2]] : i32
// CHECK-NEXT:  }
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", runs_in = "thread", coprocessor_fn = "steane">]>} {
}
