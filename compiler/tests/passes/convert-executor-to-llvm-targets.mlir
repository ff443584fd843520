// Target modules are folded away: a remote one is dropped (its object reaches the executor
// through executor.send_binary); a local one leaves its declarations at the top level and
// its object in backline.link_objects.
// RUN: backline-opt %s -p convert-executor-to-llvm | filecheck %s
// RUN: backline-opt %s -p convert-executor-to-llvm | filecheck %s --check-prefix=FLAT
// FLAT-NOT: backline.target
// FLAT-NOT: {{^ +}}builtin.module

// CHECK:      builtin.module attributes {backline.link_objects = ["/ws/old.o", "/ws/local.x86_64-unknown-linux-gnu.o", "/ws/more.x86_64-unknown-linux-gnu.o"]} {
// CHECK-NEXT:   llvm.func @thrice(i64) -> i64
// CHECK-NEXT:   llvm.mlir.global internal constant @__bl_str_0
// CHECK:        llvm.func @bl_executor_open(!llvm.ptr) -> !llvm.ptr
// CHECK:        llvm.func @bl_executor_close(!llvm.ptr) -> i32
// CHECK-NEXT:   llvm.func @twice(i64) -> i64
// CHECK-NEXT:   llvm.func @host(%x: i64) -> i64 {
// CHECK:          %q = llvm.call @twice(%r) : (i64) -> i64
// CHECK:        }
// CHECK-NEXT: }
builtin.module attributes {backline.link_objects = ["/ws/old.o"]} {
  builtin.module attributes {backline.target = {name = "decoder", address = "decoder-host:9000"}, backline.object_file = "/ws/decoder.x86_64-unknown-linux-gnu.o"} {
    llvm.func @decode(i64) -> i64
  }
  builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "/ws/local.x86_64-unknown-linux-gnu.o"} {
    llvm.func @twice(i64) -> i64
  }
  builtin.module attributes {backline.target = {name = "more"}, backline.object_file = "/ws/more.x86_64-unknown-linux-gnu.o"} {
    llvm.func @thrice(i64) -> i64
  }
  llvm.func @twice(i64) -> i64
  llvm.func @host(%x: i64) -> i64 {
    %s = executor.open("decoder-host:9000") : !executor.session
    executor.send_binary %s("/ws/decoder.x86_64-unknown-linux-gnu.o") : !executor.session
    %r = executor.launch %s("decode", "/ws/decoder.x86_64-unknown-linux-gnu.o")(%x) : !executor.session, (i64) -> i64
    %q = llvm.call @twice(%r) : (i64) -> i64
    executor.close %s : !executor.session
    llvm.return %q : i64
  }
}
