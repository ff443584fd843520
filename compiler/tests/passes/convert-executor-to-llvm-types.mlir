// !executor.session and !executor.token become !llvm.ptr and i64 wherever they appear,
// here in a func.func signature (llvm.func does not accept them).
// RUN: backline-opt %s -p convert-executor-to-llvm | filecheck %s

// CHECK-LABEL: func.func @wait_for(%s: !llvm.ptr, %t: i64) {
// CHECK-NEXT:    %rc = llvm.call @bl_executor_await(%s, %t) : (!llvm.ptr, i64) -> i32
// CHECK-NEXT:    %{{.*}} = llvm.call @bl_status_record(%rc) : (i32) -> i32
// CHECK-NEXT:    func.return
func.func @wait_for(%s: !executor.session, %t: !executor.token) {
  executor.await %s, %t : !executor.session
  func.return
}

// CHECK-LABEL: func.func @start() -> (!llvm.ptr, i64) {
// CHECK:         %s = llvm.call @bl_executor_open(
// CHECK:         %t = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK-NEXT:    func.call @wait_for(%s, %t) : (!llvm.ptr, i64) -> ()
// CHECK-NEXT:    func.return %s, %t : !llvm.ptr, i64
func.func @start() -> (!executor.session, !executor.token) {
  %s = executor.open("localhost:9000") : !executor.session
  %t = executor.launch_async %s("spin", "/ws/k.o") : !executor.session -> !executor.token
  func.call @wait_for(%s, %t) : (!executor.session, !executor.token) -> ()
  func.return %s, %t : !executor.session, !executor.token
}
