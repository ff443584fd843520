// RUN: backline-opt %s -p cross-compile-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p cross-compile-targets > /dev/null

// CHECK: cross-compile-targets: target 'k' holds 'func.func': a target module holds only llvm.func and llvm.mlir.global (lower it to the llvm dialect first)
builtin.module {
  builtin.module attributes {backline.target = {name = "k"}} {
    func.func @k() {
      func.return
    }
  }
}
