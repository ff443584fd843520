// Without the workspace option the objects go to a fresh temporary directory, recorded
// in backline.workspace (the second RUN line removes it again).
// RUN: backline-opt %s -p cross-compile-targets | tee %t.out | filecheck %s
// RUN: grep -o '"/[^"]*backline-workspace-[^"/]*"' %t.out | head -n 1 | xargs rm -r

// CHECK: builtin.module attributes {backline.workspace = "[[WS:[^"]*backline-workspace-[^"]*]]"} {
// CHECK-NEXT: builtin.module attributes {backline.target = {name = "k"}, backline.object_file = "[[WS]]/k.{{.+}}.o"} {
// CHECK-NEXT:   llvm.func @k() -> i32
builtin.module {
  builtin.module attributes {backline.target = {name = "k"}} {
    llvm.func @k() -> i32 {
      %c = llvm.mlir.constant(7 : i32) : i32
      llvm.return %c : i32
    }
  }
}
