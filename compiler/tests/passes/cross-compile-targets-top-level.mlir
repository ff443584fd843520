// A file holding one builtin.module makes it the top level, not a target: say so rather
// than compile nothing.
// RUN: backline-opt %s -p cross-compile-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p cross-compile-targets > /dev/null

// CHECK: cross-compile-targets: the top-level module carries backline.target: a target module must be nested in the host module (a file holding a single builtin.module makes it the top level; wrap it in 'builtin.module { ... }')
builtin.module attributes {backline.target = {name = "k"}} {
  llvm.func @k() {
    llvm.return
  }
}
