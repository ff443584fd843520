// RUN: backline-opt %s -p cross-compile-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p cross-compile-targets > /dev/null

// CHECK: cross-compile-targets: target 'fpga': unknown target triple 'frobnicator-unknown-none' (LLVM: No available targets are compatible with triple "frobnicator-unknown-none")
builtin.module {
  builtin.module attributes {backline.target = {name = "fpga", triple = "frobnicator-unknown-none"}} {
    llvm.func @a() {
      llvm.return
    }
  }
}
