// RUN: backline-opt %s -p inject-transport-session | filecheck %s
// RUN: backline-opt %s -p inject-transport-session | backline-opt - -p inject-transport-session | filecheck %s
// The whole flow: the target module is lowered and compiled into one object, and the
// calls become launches in one executor session that setup opens and teardown closes.
// RUN: rm -rf %t && backline-opt %s -p 'inject-transport-session,convert-transport-to-llvm,cross-compile-targets{workspace="%t"},dispatch-executor-targets,convert-executor-to-llvm' \
// RUN:   | filecheck %s --check-prefix=FLOW
// RUN: test -f %t/coprocessor_remote-dec.x86_64-unknown-linux-gnu.o

// A coprocessor in an executor (executor_options; resolved runs_in = "executor"): its
// code is a target module of three functions -- bring-up, serve (park until stopped) and
// stop (stop and destroy) -- for the executor's triple and address.

// CHECK:      builtin.module attributes {backline.target = {name = "coprocessor_remote-dec", triple = "x86_64-unknown-linux-gnu", address = "127.0.0.1:9000"}} {
// CHECK-NEXT:   llvm.func @"backline_coprocessor_up_remote-dec"() -> i32 {
// CHECK-NEXT:     %[[D:.*]] = transport.create {transport = "memcpy", backend_lib = "{{.*}}libbackline_transport_memcpy.so", key = "remote-dec", config = "", hardware = "cpu", runs_in = "executor"} : !transport.session<coprocessor>
// CHECK-NEXT:     transport.connect %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:     transport.exchange_keys %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:     transport.establish_channel %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:     transport.set_coprocessor_fn %[[D]] {symbol = "bl_fn_steane", library = "{{.*}}libbackline.so", decoder_id = 0 : i32} : !transport.session<coprocessor>
// CHECK-NEXT:     transport.set_coprocessor_fn %[[D]] {symbol = "bl_fn_steane", library = "{{.*}}libbackline.so", decoder_id = 1 : i32} : !transport.session<coprocessor>
// CHECK-NEXT:     transport.start %[[D]] : !transport.session<coprocessor>
// CHECK-NEXT:     %[[S1:.*]] = transport.take_status : i32
// CHECK-NEXT:     llvm.return %[[S1]] : i32
// CHECK-NEXT:   }
// CHECK-NEXT:   llvm.func @"backline_coprocessor_serve_remote-dec"() -> i32 {
// CHECK-NEXT:     %[[P:.*]] = transport.get_session {key = "remote-dec"} : !transport.session<coprocessor>
// CHECK-NEXT:     transport.park %[[P]] : !transport.session<coprocessor>
// CHECK-NEXT:     %[[S2:.*]] = transport.take_status : i32
// CHECK-NEXT:     llvm.return %[[S2]] : i32
// CHECK-NEXT:   }
// CHECK-NEXT:   llvm.func @"backline_coprocessor_stop_remote-dec"() -> i32 {
// CHECK-NEXT:     %[[Q:.*]] = transport.get_session {key = "remote-dec"} : !transport.session<coprocessor>
// CHECK-NEXT:     transport.stop %[[Q]] : !transport.session<coprocessor>
// CHECK-NEXT:     transport.destroy %[[Q]] : !transport.session<coprocessor>
// CHECK-NEXT:     %[[S3:.*]] = transport.take_status : i32
// CHECK-NEXT:     llvm.return %[[S3]] : i32
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NEXT: llvm.func @"backline_coprocessor_up_remote-dec"() -> i32
// CHECK-NEXT: llvm.func @"backline_coprocessor_serve_remote-dec"() -> i32
// CHECK-NEXT: llvm.func @"backline_coprocessor_stop_remote-dec"() -> i32

// Setup: bring-up launched and awaited before the controller connects; serve left running.
// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_up_remote-dec"() {backline.async} : () -> i32
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_up_remote-dec"() {backline.await} : () -> i32
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_serve_remote-dec"() {backline.async} : () -> i32
// CHECK-NEXT:    %[[C:.*]] = transport.create {transport = "memcpy", backend_lib = "{{.*}}libbackline_transport_memcpy.so", key = "remote-dec", config = "", hardware = "cpu", runs_in = "executor"} : !transport.session<controller>
// CHECK-NEXT:    transport.connect %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.exchange_keys %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.establish_channel %[[C]] : !transport.session<controller>
// CHECK-NEXT:    transport.set_message_sizes %[[C]] {in_bytes = 8 : i64, out_bytes = 8 : i64} : !transport.session<controller>
// CHECK-NEXT:    transport.start %[[C]] : !transport.session<controller>
// CHECK-NEXT:    %[[ST:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST]] : i32
// CHECK-NEXT:  }

// Teardown: the controller first, then the coprocessor's stop, and the serve launch's end.
// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NEXT:    %[[TC:.*]] = transport.get_session {key = "remote-dec"} : !transport.session<controller>
// CHECK-NEXT:    transport.stop %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    transport.destroy %[[TC]] : !transport.session<controller>
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_stop_remote-dec"() {backline.async} : () -> i32
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_stop_remote-dec"() {backline.await} : () -> i32
// CHECK-NEXT:    %{{.*}} = llvm.call @"backline_coprocessor_serve_remote-dec"() {backline.await} : () -> i32
// CHECK-NEXT:    %[[ST2:.*]] = transport.take_status : i32
// CHECK-NEXT:    llvm.return %[[ST2]] : i32
// CHECK-NEXT:  }
// CHECK-NOT:   backline.target

// FLOW-NOT:    {{(^ +|= )(transport|executor)\.}}
// FLOW-NOT:    {{^ +}}builtin.module
// FLOW-LABEL:  llvm.func @backline_setup() -> i32 {
// FLOW:          %session = llvm.call @bl_executor_open(
// FLOW:          llvm.call @bl_executor_send_binary(%session,
// FLOW:          llvm.call @bl_executor_launch_async(%session,
// FLOW:          llvm.call @bl_executor_await(%session,
// FLOW:          llvm.call @bl_executor_launch_async(%session,
// FLOW:          llvm.call @bl_session_create(
// FLOW-NOT:      bl_executor_close
// FLOW:          llvm.call @bl_status_take()
// FLOW-LABEL:  llvm.func @backline_teardown() -> i32 {
// FLOW:          llvm.call @bl_destroy(
// FLOW:          llvm.call @bl_executor_launch_async(
// FLOW:          llvm.call @bl_executor_await(
// FLOW:          llvm.call @bl_executor_await(
// FLOW:          llvm.call @bl_executor_close(
// FLOW:          llvm.call @bl_status_take()
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "remote-dec", hardware = "cpu", executor_options = {address = "127.0.0.1:9000", secret_file = "/run/backline/secret", triple = "x86_64-unknown-linux-gnu"}, coprocessor_fn = "steane">]>} {
}
