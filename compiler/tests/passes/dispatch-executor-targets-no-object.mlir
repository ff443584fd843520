// RUN: backline-opt %s -p dispatch-executor-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p dispatch-executor-targets > /dev/null

// CHECK: dispatch-executor-targets: target 'decoder' has no backline.object_file: run cross-compile-targets first
builtin.module attributes {backline.target = {name = "decoder", address = "decoder-host:9000"}} {
  llvm.func @decode(%x: i64) -> i64 {
    llvm.return %x : i64
  }
}
llvm.func @decode(i64) -> i64
llvm.func @host(%x: i64) -> i64 {
  %r = llvm.call @decode(%x) : (i64) -> i64
  llvm.return %r : i64
}
