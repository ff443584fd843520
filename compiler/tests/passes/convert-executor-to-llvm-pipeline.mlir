// The whole target flow: cross-compile, dispatch, lower. The result is a flat module of
// llvm.func / llvm.mlir.global only, with the in-process object left to link.
// RUN: rm -rf %t && backline-opt %s -p 'cross-compile-targets{workspace="%t"},dispatch-executor-targets,convert-executor-to-llvm' \
// RUN:   | filecheck %s
// RUN: backline-opt %s -p 'cross-compile-targets{workspace="%t"},dispatch-executor-targets,convert-executor-to-llvm' \
// RUN:   | filecheck %s --check-prefix=CLEAN
// CLEAN-NOT: executor.
// CLEAN-NOT: {{^ +}}builtin.module

// CHECK:      builtin.module attributes {backline.workspace = "[[WS:.*]]", backline.link_objects = ["[[WS]]/local.{{.+}}.o"]} {
// CHECK-NEXT:   llvm.mlir.global internal constant @__bl_str_0("decoder-host:9000\00")
// CHECK-NEXT:   llvm.mlir.global internal constant @__bl_str_1("[[WS]]/decoder.aarch64-unknown-linux-gnu.o\00")
// CHECK:        llvm.func @twice(i64) -> i64
// CHECK-NEXT:   llvm.func @host(%x: i64) -> i64 {
// CHECK:          %session = llvm.call @bl_executor_open(
// CHECK:          llvm.call @bl_executor_send_binary(%session,
// CHECK:          llvm.call @bl_executor_launch(%session,
// CHECK:          %r = llvm.load
// CHECK-NEXT:     %q = llvm.call @twice(%r) : (i64) -> i64
// CHECK-NEXT:     %{{.*}} = llvm.call @bl_executor_close(%session)
// CHECK:          llvm.return %q : i64
builtin.module attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}} {
  llvm.func @decode(%x: i64) -> i64 {
    %c = llvm.mlir.constant(3) : i64
    %y = llvm.mul %x, %c : i64
    llvm.return %y : i64
  }
}
builtin.module attributes {backline.target = {name = "local"}} {
  llvm.func @twice(%x: i64) -> i64 {
    %y = llvm.add %x, %x : i64
    llvm.return %y : i64
  }
}
llvm.func @decode(i64) -> i64
llvm.func @twice(i64) -> i64
llvm.func @host(%x: i64) -> i64 {
  %r = llvm.call @decode(%x) : (i64) -> i64
  %q = llvm.call @twice(%r) : (i64) -> i64
  llvm.return %q : i64
}
