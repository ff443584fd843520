// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s --print-generic | backline-opt - | filecheck %s

// Every transport op in its custom form; the second RUN line goes through the generic form.

// CHECK: builtin.module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane", runs_in = "thread">], transport = "memcpy">} {
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane", runs_in = "thread">], transport = "memcpy">} {
  // CHECK-LABEL: func.func @setup()
  func.func @setup() {
    // CHECK-NEXT: %[[C:.*]] = transport.create {transport = "memcpy", backend_lib = "/x_controller.so", key = "controller", config = "", hardware = "cpu"} : !transport.session<controller>
    %c = transport.create {transport = "memcpy", backend_lib = "/x_controller.so", key = "controller", config = "", hardware = "cpu"} : !transport.session<controller>
    // CHECK-NEXT: %[[D:.*]] = transport.create {transport = "memcpy", backend_lib = "/x_coprocessor.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>
    %d = transport.create {transport = "memcpy", backend_lib = "/x_coprocessor.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>
    // CHECK-NEXT: %[[T:.*]] = transport.connect_async %[[D]] : !transport.session<coprocessor> -> !transport.token
    %t = transport.connect_async %d : !transport.session<coprocessor> -> !transport.token
    // CHECK-NEXT: transport.connect %[[C]] : !transport.session<controller>
    transport.connect %c : !transport.session<controller>
    // CHECK-NEXT: transport.await %[[T]]
    transport.await %t
    // CHECK-NEXT: %[[K:.*]] = transport.exchange_keys_async %[[D]] : !transport.session<coprocessor> -> !transport.token
    %k = transport.exchange_keys_async %d : !transport.session<coprocessor> -> !transport.token
    // CHECK-NEXT: transport.exchange_keys %[[C]] : !transport.session<controller>
    transport.exchange_keys %c : !transport.session<controller>
    // CHECK-NEXT: transport.await %[[K]]
    transport.await %k
    // CHECK-NEXT: transport.establish_channel %[[C]] : !transport.session<controller>
    transport.establish_channel %c : !transport.session<controller>
    // CHECK-NEXT: transport.establish_channel %[[D]] : !transport.session<coprocessor>
    transport.establish_channel %d : !transport.session<coprocessor>
    // CHECK-NEXT: transport.set_message_sizes %[[C]] {in_bytes = 1 : i64, out_bytes = 1 : i64} : !transport.session<controller>
    transport.set_message_sizes %c {in_bytes = 1 : i64, out_bytes = 1 : i64} : !transport.session<controller>
    // CHECK-NEXT: transport.set_coprocessor_fn %[[D]] {symbol = "steane_decode", library = "/libsteane.so", decoder_id = 0 : i32} : !transport.session<coprocessor>
    transport.set_coprocessor_fn %d {symbol = "steane_decode", library = "/libsteane.so", decoder_id = 0 : i32} : !transport.session<coprocessor>
    // CHECK-NEXT: transport.set_coprocessor_fn %[[D]] {symbol = "f", library = "/f.so", decoder_id = 1 : i32, init_symbol = "f_init", fini_symbol = "f_fini", context = "00ff10"} : !transport.session<coprocessor>
    transport.set_coprocessor_fn %d {symbol = "f", library = "/f.so", decoder_id = 1 : i32, init_symbol = "f_init", fini_symbol = "f_fini", context = "00ff10"} : !transport.session<coprocessor>
    // CHECK-NEXT: transport.start %[[D]] : !transport.session<coprocessor>
    transport.start %d : !transport.session<coprocessor>
    // CHECK-NEXT: transport.start %[[C]] : !transport.session<controller>
    transport.start %c : !transport.session<controller>
    func.return
  }

  // CHECK-LABEL: func.func @round(%{{.*}}: !llvm.ptr, %{{.*}}: i32) -> i64
  func.func @round(%buf: !llvm.ptr, %len: i32) -> i64 {
    // CHECK-NEXT: %[[S:.*]] = transport.get_session {key = "controller"} : !transport.session<controller>
    %s = transport.get_session {key = "controller"} : !transport.session<controller>
    // CHECK-NEXT: transport.stage_payload %[[S]], %{{.*}}, %{{.*}} {decoder_id = 1 : i32} : !transport.session<controller>
    transport.stage_payload %s, %buf, %len {decoder_id = 1 : i32} : !transport.session<controller>
    // CHECK-NEXT: transport.post %[[S]] : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    // CHECK-NEXT: %{{.*}} = transport.collect %[[S]], %{{.*}}, %{{.*}} : !transport.session<controller> -> i32
    %n = transport.collect %s, %buf, %len : !transport.session<controller> -> i32
    // CHECK-NEXT: %{{.*}} = transport.collect_value %[[S]] : !transport.session<controller> -> i64
    %v = transport.collect_value %s : !transport.session<controller> -> i64
    // CHECK-NEXT: %{{.*}}, %{{.*}} = transport.reply_slot %[[S]] : !transport.session<controller> -> !llvm.ptr, i32
    %slot, %slot_len = transport.reply_slot %s : !transport.session<controller> -> !llvm.ptr, i32
    // CHECK-NEXT: %{{.*}} = transport.last_rtt_ns %[[S]] : !transport.session<controller> -> i64
    %rtt = transport.last_rtt_ns %s : !transport.session<controller> -> i64
    func.return %v : i64
  }

  // CHECK-LABEL: func.func @teardown()
  func.func @teardown() {
    // CHECK-NEXT: %[[S:.*]] = transport.get_session {key = "dec"} : !transport.session<coprocessor>
    %s = transport.get_session {key = "dec"} : !transport.session<coprocessor>
    // CHECK-NEXT: transport.park %[[S]] : !transport.session<coprocessor>
    transport.park %s : !transport.session<coprocessor>
    // CHECK-NEXT: transport.stop %[[S]] : !transport.session<coprocessor>
    transport.stop %s : !transport.session<coprocessor>
    // CHECK-NEXT: transport.destroy %[[S]] : !transport.session<coprocessor>
    transport.destroy %s : !transport.session<coprocessor>
    func.return
  }
}
