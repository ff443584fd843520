// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'executor.call' num_input_args = 3 must be in [0, 2] (the number of operands after the session)
func.func @f(%a: i64, %b: !llvm.ptr) {
  %s = executor.open("localhost:9000") : !executor.session
  executor.call %s("fn", "/lib.so")(%a, %b) {num_input_args = 3 : i64} : !executor.session, (i64, !llvm.ptr) -> ()
  func.return
}
