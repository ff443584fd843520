// @backline_setup and @backline_teardown share one session per address (kept in a module
// global), so what setup launches in the executor lives until teardown; backline.async
// calls start a launch whose token waits in a module global for the backline.await call.
// RUN: backline-opt %s -p dispatch-executor-targets | filecheck %s
// RUN: backline-opt %s -p dispatch-executor-targets | backline-opt - -p dispatch-executor-targets | filecheck %s
// Lowered, the sessions travel through their i64 globals as integers.
// RUN: backline-opt %s -p dispatch-executor-targets,convert-executor-to-llvm | filecheck %s --check-prefix=LOW

// One i64 global per asynchronously launched function, then one per program session.
// CHECK:      llvm.mlir.global internal @[[UP:__bl_executor_token_0]](0 : i64) {{.*}} : i64
// CHECK-NEXT: llvm.mlir.global internal @[[SERVE:__bl_executor_token_1]](0 : i64) {{.*}} : i64
// CHECK-NEXT: llvm.mlir.global internal @[[STOP:__bl_executor_token_2]](0 : i64) {{.*}} : i64
// CHECK-NEXT: llvm.mlir.global internal @[[SPIN:__bl_executor_token_3]](0 : i64) {{.*}} : i64
// CHECK-NEXT: llvm.mlir.global internal @[[S0:__bl_executor_session_0]](0 : i64) {{.*}} : i64
// CHECK-NEXT: llvm.mlir.global internal @[[S1:__bl_executor_session_1]](0 : i64) {{.*}} : i64
builtin.module attributes {backline.target = {name = "coprocessor_dec", address = "127.0.0.1:7000"}, backline.object_file = "/ws/coprocessor_dec.o"} {
  llvm.func @up() -> i32
  llvm.func @serve() -> i32
  llvm.func @stop() -> i32
}
builtin.module attributes {backline.target = {name = "stats", address = "[::1]:7001"}, backline.object_file = "/ws/stats.o"} {
  llvm.func @mean(f64, f64) -> f64
  llvm.func @spin() -> i32
}
llvm.func @up() -> i32
llvm.func @serve() -> i32
llvm.func @stop() -> i32
llvm.func @mean(f64, f64) -> f64
llvm.func @spin() -> i32
llvm.func @bl_status_take() -> i32

// Setup opens every program session and keeps it, then sends every object setup or
// teardown launches.
// CHECK-LABEL: llvm.func @backline_setup() -> i32 {
// CHECK-NEXT:    %[[A:.*]] = executor.open("127.0.0.1:7000") : !executor.session
// CHECK-NEXT:    %[[G0:.*]] = llvm.mlir.addressof @[[S0]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[A]], %[[G0]] : !executor.session, !llvm.ptr
// CHECK-NEXT:    %[[B:.*]] = executor.open("[::1]:7001") : !executor.session
// CHECK-NEXT:    %[[G1:.*]] = llvm.mlir.addressof @[[S1]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[B]], %[[G1]] : !executor.session, !llvm.ptr
// CHECK-NEXT:    executor.send_binary %[[A]]("/ws/coprocessor_dec.o") : !executor.session
// CHECK-NEXT:    executor.send_binary %[[B]]("/ws/stats.o") : !executor.session
// CHECK-NEXT:    %[[T0:.*]] = executor.launch_async %[[A]]("up", "/ws/coprocessor_dec.o") : !executor.session -> !executor.token
// CHECK-NEXT:    %[[U:.*]] = llvm.mlir.addressof @[[UP]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[T0]], %[[U]] : !executor.token, !llvm.ptr
// CHECK-NEXT:    %[[U2:.*]] = llvm.mlir.addressof @[[UP]] : !llvm.ptr
// CHECK-NEXT:    %[[T0L:.*]] = llvm.load %[[U2]] : !llvm.ptr -> !executor.token
// CHECK-NEXT:    executor.await %[[A]], %[[T0L]] : !executor.session
// CHECK-NEXT:    %[[T1:.*]] = executor.launch_async %[[A]]("serve", "/ws/coprocessor_dec.o") : !executor.session -> !executor.token
// CHECK-NEXT:    %[[V:.*]] = llvm.mlir.addressof @[[SERVE]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[T1]], %[[V]] : !executor.token, !llvm.ptr
// No close in setup: the sessions stay open.
// CHECK-NEXT:    %st = llvm.call @bl_status_take() : () -> i32
// CHECK-NEXT:    llvm.return %st : i32
// CHECK-NEXT:  }
llvm.func @backline_setup() -> i32 {
  %0 = llvm.call @up() {backline.async} : () -> i32
  %1 = llvm.call @up() {backline.await} : () -> i32
  %2 = llvm.call @serve() {backline.async} : () -> i32
  %st = llvm.call @bl_status_take() : () -> i32
  llvm.return %st : i32
}

// Teardown reads the sessions, awaits the serve launch setup started, and closes the
// sessions (zeroing their globals) before the status take its return hands back.
// CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
// CHECK-NEXT:    %[[H0:.*]] = llvm.mlir.addressof @[[S0]] : !llvm.ptr
// CHECK-NEXT:    %[[A2:.*]] = llvm.load %[[H0]] : !llvm.ptr -> !executor.session
// CHECK-NEXT:    %[[H1:.*]] = llvm.mlir.addressof @[[S1]] : !llvm.ptr
// CHECK-NEXT:    %[[B2:.*]] = llvm.load %[[H1]] : !llvm.ptr -> !executor.session
// CHECK-NEXT:    %[[T2:.*]] = executor.launch_async %[[A2]]("stop", "/ws/coprocessor_dec.o") : !executor.session -> !executor.token
// CHECK-NEXT:    %{{.*}} = llvm.mlir.addressof @[[STOP]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[T2]], %{{.*}} : !executor.token, !llvm.ptr
// CHECK-NEXT:    %{{.*}} = llvm.mlir.addressof @[[STOP]] : !llvm.ptr
// CHECK-NEXT:    %[[T2L:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !executor.token
// CHECK-NEXT:    executor.await %[[A2]], %[[T2L]] : !executor.session
// CHECK-NEXT:    %{{.*}} = llvm.mlir.addressof @[[SERVE]] : !llvm.ptr
// CHECK-NEXT:    %[[T1L:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !executor.token
// CHECK-NEXT:    executor.await %[[A2]], %[[T1L]] : !executor.session
// CHECK-NEXT:    %x = llvm.mlir.constant(1.000000e+00 : f64) : f64
// CHECK-NEXT:    %m = executor.launch %[[B2]]("mean", "/ws/stats.o")(%x, %x) : !executor.session, (f64, f64) -> f64
// CHECK-NEXT:    executor.close %[[B2]] : !executor.session
// CHECK-NEXT:    %[[Z1:.*]] = llvm.mlir.addressof @[[S1]] : !llvm.ptr
// CHECK-NEXT:    %[[ZERO1:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:    llvm.store %[[ZERO1]], %[[Z1]] : i64, !llvm.ptr
// CHECK-NEXT:    executor.close %[[A2]] : !executor.session
// CHECK-NEXT:    %[[Z0:.*]] = llvm.mlir.addressof @[[S0]] : !llvm.ptr
// CHECK-NEXT:    %[[ZERO0:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:    llvm.store %[[ZERO0]], %[[Z0]] : i64, !llvm.ptr
// CHECK-NEXT:    %[[ST:.*]] = llvm.call @bl_status_take() : () -> i32
// CHECK-NEXT:    %zero = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:    %ok = llvm.icmp "eq" %[[ST]], %zero : i32
// CHECK-NEXT:    %r = llvm.select %ok, %zero, %[[ST]] : i1, i32
// CHECK-NEXT:    llvm.return %r : i32
// CHECK-NEXT:  }
llvm.func @backline_teardown() -> i32 {
  %0 = llvm.call @stop() {backline.async} : () -> i32
  %1 = llvm.call @stop() {backline.await} : () -> i32
  %2 = llvm.call @serve() {backline.await} : () -> i32
  %x = llvm.mlir.constant(1.0) : f64
  %m = llvm.call @mean(%x, %x) : (f64, f64) -> f64
  %st = llvm.call @bl_status_take() : () -> i32
  %zero = llvm.mlir.constant(0 : i32) : i32
  %ok = llvm.icmp "eq" %st, %zero : i32
  %r = llvm.select %ok, %zero, %st : i1, i32
  llvm.return %r : i32
}

// Any other function keeps its own session; an async launch and its await may share it.
// CHECK-LABEL: llvm.func @work(%{{.*}}: f64) -> f64 {
// CHECK-NEXT:    %[[W:.*]] = executor.open("[::1]:7001") : !executor.session
// CHECK-NEXT:    executor.send_binary %[[W]]("/ws/stats.o") : !executor.session
// CHECK-NEXT:    %[[T3:.*]] = executor.launch_async %[[W]]("spin", "/ws/stats.o") : !executor.session -> !executor.token
// CHECK-NEXT:    %{{.*}} = llvm.mlir.addressof @[[SPIN]] : !llvm.ptr
// CHECK-NEXT:    llvm.store %[[T3]], %{{.*}} : !executor.token, !llvm.ptr
// CHECK-NEXT:    %{{.*}} = executor.launch %[[W]]("mean", "/ws/stats.o")
// CHECK-NEXT:    %{{.*}} = llvm.mlir.addressof @[[SPIN]] : !llvm.ptr
// CHECK-NEXT:    %[[T3L:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !executor.token
// CHECK-NEXT:    executor.await %[[W]], %[[T3L]] : !executor.session
// CHECK-NEXT:    executor.close %[[W]] : !executor.session
// CHECK-NEXT:    llvm.return
// CHECK-NEXT:  }
llvm.func @work(%x: f64) -> f64 {
  %0 = llvm.call @spin() {backline.async} : () -> i32
  %m = llvm.call @mean(%x, %x) : (f64, f64) -> f64
  %1 = llvm.call @spin() {backline.await} : () -> i32
  llvm.return %m : f64
}

// LOW-LABEL: llvm.func @backline_setup() -> i32 {
// LOW:         %session = llvm.call @bl_executor_open(%{{.*}}) : (!llvm.ptr) -> !llvm.ptr
// LOW-NEXT:    %[[G:.*]] = llvm.mlir.addressof @__bl_executor_session_0 : !llvm.ptr
// LOW-NEXT:    %[[I:.*]] = llvm.ptrtoint %session : !llvm.ptr to i64
// LOW-NEXT:    llvm.store %[[I]], %[[G]] : i64, !llvm.ptr
// LOW-LABEL: llvm.func @backline_teardown() -> i32 {
// LOW:         %[[H:.*]] = llvm.mlir.addressof @__bl_executor_session_0 : !llvm.ptr
// LOW-NEXT:    %[[W:.*]] = llvm.load %[[H]] : !llvm.ptr -> i64
// LOW-NEXT:    %[[S:.*]] = llvm.inttoptr %[[W]] : i64 to !llvm.ptr
// LOW:         llvm.call @bl_executor_launch_async(%[[S]],
