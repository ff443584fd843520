// RUN: backline-opt %s -p cross-compile-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p cross-compile-targets > /dev/null

// CHECK: cross-compile-targets: two target modules are named 'decoder'; target names must be unique (each names an object file)
builtin.module {
  builtin.module attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu"}} {
    llvm.func @a() {
      llvm.return
    }
  }
  builtin.module attributes {backline.target = {name = "decoder"}} {
    llvm.func @b() {
      llvm.return
    }
  }
}
