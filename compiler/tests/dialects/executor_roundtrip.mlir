// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s --print-generic | backline-opt - | filecheck %s

// CHECK-LABEL: func.func @host(%{{.*}}: memref<8xi8>, %{{.*}}: !llvm.ptr) -> memref<8xi8>
func.func @host(%in: memref<8xi8>, %out: !llvm.ptr) -> memref<8xi8> {
  // CHECK-NEXT: %[[S:.*]] = executor.open("decoder-host:9000") : !executor.session
  %s = executor.open("decoder-host:9000") : !executor.session
  // CHECK-NEXT: %{{.*}} = executor.open("[::1]:9001") : !executor.session
  %s6 = executor.open("[::1]:9001") : !executor.session
  // CHECK-NEXT: executor.send_binary %[[S]]("/tmp/workspace/decode.o") : !executor.session
  executor.send_binary %s("/tmp/workspace/decode.o") : !executor.session
  // CHECK-NEXT: %[[R:.*]] = executor.launch %[[S]]("decode", "/tmp/workspace/decode.o")(%{{.*}}) : !executor.session, (memref<8xi8>) -> memref<8xi8>
  %r = executor.launch %s("decode", "/tmp/workspace/decode.o")(%in) : !executor.session, (memref<8xi8>) -> memref<8xi8>
  // CHECK-NEXT: executor.launch %[[S]]("tick", "/tmp/workspace/decode.o")() : !executor.session, () -> ()
  executor.launch %s("tick", "/tmp/workspace/decode.o")() : !executor.session, () -> ()
  // CHECK-NEXT: %[[T:.*]] = executor.launch_async %[[S]]("spin", "/tmp/workspace/decode.o") : !executor.session -> !executor.token
  %t = executor.launch_async %s("spin", "/tmp/workspace/decode.o") : !executor.session -> !executor.token
  // CHECK-NEXT: executor.await %[[S]], %[[T]] : !executor.session
  executor.await %s, %t : !executor.session
  // CHECK-NEXT: %{{.*}} = executor.call %[[S]]("fill", "/opt/lib/libfill.so")(%{{.*}}, %{{.*}}) {num_input_args = 1 : i64} : !executor.session, (memref<8xi8>, !llvm.ptr) -> i32
  %rc = executor.call %s("fill", "/opt/lib/libfill.so")(%in, %out) {num_input_args = 1 : i64} : !executor.session, (memref<8xi8>, !llvm.ptr) -> i32
  // CHECK-NEXT: executor.close %[[S]] : !executor.session
  executor.close %s : !executor.session
  // CHECK-NEXT: func.return %[[R]] : memref<8xi8>
  func.return %r : memref<8xi8>
}
