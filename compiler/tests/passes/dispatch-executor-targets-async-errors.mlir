// The rules for backline.async / backline.await calls and program sessions; each variant
// breaks one (sed rewrites a marked line).
// RUN: backline-opt %s -p dispatch-executor-targets | filecheck %s --check-prefix=OK
// OK: executor.launch_async

// A function that is not () -> i32.
// RUN: sed 's/%0 = llvm.call @spin() {backline.async} : () -> i32 \/\/ START/%0 = llvm.call @mean(%x, %x) {backline.async} : (f64, f64) -> f64/' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=TYPE
// TYPE: dispatch-executor-targets: in @work: the backline.async call to @mean: an asynchronous launch runs a function of type () -> (i32) (the executor calls it as int32_t fn(void), a bl_status), but it is (f64, f64) -> (f64)

// The async call's result is used.
// RUN: sed 's/llvm.return %m : f64 \/\/ RET/%u = llvm.sitofp %0 : i32 to f64\n  llvm.return %u : f64/' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=USED
// USED: dispatch-executor-targets: in @work: the backline.async call to @spin: its i32 result is used, but an asynchronous launch's status arrives at the await

// Both attributes on one call.
// RUN: sed 's/{backline.async} : () -> i32 \/\/ START/{backline.async, backline.await} : () -> i32/' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=BOTH
// BOTH: dispatch-executor-targets: in @work: the call to @spin carries both backline.async and backline.await

// An await of a function never launched asynchronously.
// RUN: sed 's/%0 = llvm.call @spin() {backline.async} : () -> i32 \/\/ START//' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=NEVER
// NEVER: dispatch-executor-targets: @spin is awaited (backline.await) but never launched with backline.async

// Launched in one function and awaited in another that does not share its session.
// RUN: sed 's/%1 = llvm.call @spin() {backline.await} : () -> i32 \/\/ WAIT//; s/\/\/ OTHER //' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=SCOPE
// SCOPE: dispatch-executor-targets: @spin is launched asynchronously and awaited in @other, @work, which do not share an executor session (only @backline_setup and @backline_teardown do); launch and await it in one function

// A marked call of a function that runs in this process.
// RUN: sed 's/llvm.call @twice(%x) : (f64) -> f64 \/\/ LOCAL/llvm.call @twice(%x) {backline.async} : (f64) -> f64/' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=LOCAL
// LOCAL: dispatch-executor-targets: in @work: the call to @twice carries backline.async, but @twice is not a function of a target with an executor address

// Setup calls a target but there is no teardown to close the program session.
// RUN: sed 's/llvm.func @backline_teardown() -> i32 {/llvm.func @not_teardown() -> i32 {/' %s \
// RUN:   | backline-opt - -p dispatch-executor-targets --verify-diagnostics | filecheck %s --check-prefix=PAIR
// PAIR: dispatch-executor-targets: @backline_setup calls executor targets, which run in a session opened in @backline_setup and closed in @backline_teardown; define @backline_teardown too
builtin.module attributes {backline.target = {name = "stats", address = "[::1]:7001"}, backline.object_file = "/ws/stats.o"} {
  llvm.func @mean(f64, f64) -> f64
  llvm.func @spin() -> i32
}
builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "/ws/local.o"} {
  llvm.func @twice(f64) -> f64
}
llvm.func @mean(f64, f64) -> f64
llvm.func @spin() -> i32
llvm.func @twice(f64) -> f64
llvm.func @work(%x: f64) -> f64 {
  %0 = llvm.call @spin() {backline.async} : () -> i32 // START
  %m = llvm.call @mean(%x, %x) : (f64, f64) -> f64
  %t = llvm.call @twice(%x) : (f64) -> f64 // LOCAL
  %1 = llvm.call @spin() {backline.await} : () -> i32 // WAIT
  llvm.return %m : f64 // RET
}
llvm.func @other() {
  // OTHER %1 = llvm.call @spin() {backline.await} : () -> i32
  llvm.return
}
llvm.func @backline_setup() -> i32 {
  %x = llvm.mlir.constant(1.0) : f64
  %m = llvm.call @mean(%x, %x) : (f64, f64) -> f64
  %z = llvm.mlir.constant(0 : i32) : i32
  llvm.return %z : i32
}
llvm.func @backline_teardown() -> i32 {
  %z = llvm.mlir.constant(0 : i32) : i32
  llvm.return %z : i32
}
