// An in-process target's functions are hoisted to the top level; the host may declare them
// (same type) but not define them.
// RUN: backline-opt %s -p convert-executor-to-llvm --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p convert-executor-to-llvm > /dev/null
// RUN: sed 's/llvm.func @twice(i32) -> i64 \/\/ HOST/llvm.func @twice(%x: i64) -> i64 { llvm.return %x : i64 }/' %s \
// RUN:   | backline-opt - -p convert-executor-to-llvm --verify-diagnostics | filecheck %s --check-prefix=DEFINED

// CHECK: convert-executor-to-llvm: the host declares @twice as !llvm.func<i64 (i32)> but target 'local' defines it as !llvm.func<i64 (i64)>
// DEFINED: convert-executor-to-llvm: @twice is defined in the host module and by target 'local'
builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "/ws/local.o"} {
  llvm.func @twice(i64) -> i64
}
llvm.func @twice(i32) -> i64 // HOST
