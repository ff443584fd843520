// The host's declaration disagrees with the target's: the launch would marshal the wrong values.
// RUN: backline-opt %s -p dispatch-executor-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p dispatch-executor-targets > /dev/null

// CHECK: dispatch-executor-targets: in @host: the call to @decode has type (i32) -> (i64) but target 'decoder' declares it (i64) -> (i64)
builtin.module attributes {backline.target = {name = "decoder", address = "decoder-host:9000"}, backline.object_file = "/ws/decoder.o"} {
  llvm.func @decode(i64) -> i64
}
llvm.func @decode(i32) -> i64
llvm.func @host(%x: i32) -> i64 {
  %r = llvm.call @decode(%x) : (i32) -> i64
  llvm.return %r : i64
}
