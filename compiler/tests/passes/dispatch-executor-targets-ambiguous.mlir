// Host calls name functions by their plain name, so two targets may not export the same one.
// RUN: backline-opt %s -p dispatch-executor-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p dispatch-executor-targets > /dev/null
// RUN: sed 's/@decode(i64) -> i64 \/\/ SECOND/@decode_b(i64) -> i64/' %s | backline-opt - -p dispatch-executor-targets --verify-diagnostics \
// RUN:   | filecheck %s --check-prefix=HOST

// CHECK: dispatch-executor-targets: function @decode is declared by targets 'a' and 'b'; a host call to it would be ambiguous
// HOST: dispatch-executor-targets: function @decode is defined in the host module and declared by target 'a'; rename one of them
builtin.module attributes {backline.target = {name = "a", address = "host-a:9000"}, backline.object_file = "/ws/a.o"} {
  llvm.func @decode(i64) -> i64
}
builtin.module attributes {backline.target = {name = "b", address = "host-b:9000"}, backline.object_file = "/ws/b.o"} {
  llvm.func @decode(i64) -> i64 // SECOND
}
llvm.func @decode(%x: i64) -> i64 {
  llvm.return %x : i64
}
