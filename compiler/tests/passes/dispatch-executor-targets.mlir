// The input is what cross-compile-targets leaves (object files need not exist: dispatch
// only reads the recorded paths).
// RUN: backline-opt %s -p dispatch-executor-targets | filecheck %s
// RUN: backline-opt %s -p dispatch-executor-targets | backline-opt - -p dispatch-executor-targets | filecheck %s

// The target modules stay (convert-executor-to-llvm folds them away).
// CHECK:      builtin.module @dec attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}, backline.object_file = "/ws/decoder.aarch64-unknown-linux-gnu.o"} {
// CHECK-NEXT:   llvm.func @decode(i64) -> i64
// CHECK-NEXT:   llvm.func @reset()
// CHECK-NEXT: }
// CHECK-NEXT: builtin.module attributes {backline.target = {name = "stats", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}, backline.object_file = "/ws/stats.aarch64-unknown-linux-gnu.o"} {
// CHECK-NEXT:   llvm.func @mean(f64, f64) -> f64
// CHECK-NEXT: }
// CHECK-NEXT: builtin.module attributes {backline.target = {name = "gpu", address = "[::1]:9001"}, backline.object_file = "/ws/gpu.x86_64-unknown-linux-gnu.o"} {
// CHECK-NEXT:   llvm.func @kick(!llvm.ptr) -> i32
// CHECK-NEXT: }
// CHECK-NEXT: builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "/ws/local.x86_64-unknown-linux-gnu.o"} {
// CHECK-NEXT:   llvm.func @twice(i64) -> i64
// CHECK-NEXT: }
builtin.module @dec attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}, backline.object_file = "/ws/decoder.aarch64-unknown-linux-gnu.o"} {
  llvm.func @decode(i64) -> i64
  llvm.func @reset()
}
builtin.module attributes {backline.target = {name = "stats", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}, backline.object_file = "/ws/stats.aarch64-unknown-linux-gnu.o"} {
  llvm.func @mean(f64, f64) -> f64
}
builtin.module attributes {backline.target = {name = "gpu", address = "[::1]:9001"}, backline.object_file = "/ws/gpu.x86_64-unknown-linux-gnu.o"} {
  llvm.func @kick(!llvm.ptr) -> i32
}
builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "/ws/local.x86_64-unknown-linux-gnu.o"} {
  llvm.func @twice(i64) -> i64
}

// Host declarations of dispatched functions go once nothing calls them; @kick is still
// named by an llvm.mlir.addressof, and the in-process @twice and the host's own @puts stay.
// CHECK-NEXT: llvm.func @kick(!llvm.ptr) -> i32
// CHECK-NEXT: llvm.func @twice(i64) -> i64
// CHECK-NEXT: llvm.func @puts(!llvm.ptr) -> i32
llvm.func @decode(i64) -> i64
llvm.func @reset()
llvm.func @mean(f64, f64) -> f64
llvm.func @kick(!llvm.ptr) -> i32
llvm.func @twice(i64) -> i64
llvm.func @puts(!llvm.ptr) -> i32

// One session per address, opened at the entry in first-use order; each object sent once
// per session however often it is launched; the closes in reverse order before every
// return. The call to the in-process @twice is left alone.
// CHECK-LABEL: llvm.func @host(%x: i64, %p: !llvm.ptr, %c: i1) -> i64 {
// CHECK-NEXT:   %[[S:.*]] = executor.open("decoder-host:9000") : !executor.session
// CHECK-NEXT:   %[[G:.*]] = executor.open("[::1]:9001") : !executor.session
// CHECK-NEXT:   executor.send_binary %[[S]]("/ws/decoder.aarch64-unknown-linux-gnu.o") : !executor.session
// CHECK-NEXT:   executor.send_binary %[[G]]("/ws/gpu.x86_64-unknown-linux-gnu.o") : !executor.session
// CHECK-NEXT:   executor.send_binary %[[S]]("/ws/stats.aarch64-unknown-linux-gnu.o") : !executor.session
// CHECK-NEXT:   %a = executor.launch %[[S]]("decode", "/ws/decoder.aarch64-unknown-linux-gnu.o")(%x) : !executor.session, (i64) -> i64
// CHECK-NEXT:   %b = llvm.call @twice(%a) : (i64) -> i64
// CHECK-NEXT:   %k = executor.launch %[[G]]("kick", "/ws/gpu.x86_64-unknown-linux-gnu.o")(%p) : !executor.session, (!llvm.ptr) -> i32
// CHECK-NEXT:   llvm.cond_br %c, ^bb{{.*}}, ^bb{{.*}}
// CHECK-NEXT: ^bb{{.*}}:
// CHECK-NEXT:   %d = executor.launch %[[S]]("decode", "/ws/decoder.aarch64-unknown-linux-gnu.o")(%b) : !executor.session, (i64) -> i64
// CHECK-NEXT:   executor.launch %[[S]]("reset", "/ws/decoder.aarch64-unknown-linux-gnu.o")() : !executor.session, () -> ()
// CHECK-NEXT:   executor.close %[[G]] : !executor.session
// CHECK-NEXT:   executor.close %[[S]] : !executor.session
// CHECK-NEXT:   llvm.return %d : i64
// CHECK-NEXT: ^bb{{.*}}:
// CHECK-NEXT:   %f = llvm.sitofp %b : i64 to f64
// CHECK-NEXT:   %m = executor.launch %[[S]]("mean", "/ws/stats.aarch64-unknown-linux-gnu.o")(%f, %f) : !executor.session, (f64, f64) -> f64
// CHECK-NEXT:   executor.close %[[G]] : !executor.session
// CHECK-NEXT:   executor.close %[[S]] : !executor.session
// CHECK-NEXT:   llvm.return %b : i64
// CHECK-NEXT: }
llvm.func @host(%x: i64, %p: !llvm.ptr, %c: i1) -> i64 {
  %a = llvm.call @decode(%x) : (i64) -> i64
  %b = llvm.call @twice(%a) : (i64) -> i64
  %k = llvm.call @kick(%p) : (!llvm.ptr) -> i32
  llvm.cond_br %c, ^bb0, ^bb1
^bb0:
  %d = llvm.call @decode(%b) : (i64) -> i64
  llvm.call @reset() : () -> ()
  llvm.return %d : i64
^bb1:
  %f = llvm.sitofp %b : i64 to f64
  %m = llvm.call @mean(%f, %f) : (f64, f64) -> f64
  llvm.return %b : i64
}

// A second host function gets its own session.
// CHECK-LABEL: llvm.func @other() -> !llvm.ptr {
// CHECK-NEXT:   %[[S2:.*]] = executor.open("decoder-host:9000") : !executor.session
// CHECK-NEXT:   executor.send_binary %[[S2]]("/ws/decoder.aarch64-unknown-linux-gnu.o") : !executor.session
// CHECK-NEXT:   executor.launch %[[S2]]("reset", "/ws/decoder.aarch64-unknown-linux-gnu.o")() : !executor.session, () -> ()
// CHECK-NEXT:   %fp = llvm.mlir.addressof @kick : !llvm.ptr
// CHECK-NEXT:   executor.close %[[S2]] : !executor.session
// CHECK-NEXT:   llvm.return %fp : !llvm.ptr
// CHECK-NEXT: }
llvm.func @other() -> !llvm.ptr {
  llvm.call @reset() : () -> ()
  %fp = llvm.mlir.addressof @kick : !llvm.ptr
  llvm.return %fp : !llvm.ptr
}

// A function without remote calls gets no session.
// CHECK-LABEL: llvm.func @quiet(%{{.*}}: i64) -> i64 {
// CHECK-NEXT:   %y = llvm.call @twice(%{{.*}}) : (i64) -> i64
// CHECK-NEXT:   llvm.return %y : i64
// CHECK-NEXT: }
llvm.func @quiet(%x: i64) -> i64 {
  %y = llvm.call @twice(%x) : (i64) -> i64
  llvm.return %y : i64
}
