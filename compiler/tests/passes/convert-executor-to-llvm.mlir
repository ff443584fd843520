// RUN: backline-opt %s -p convert-executor-to-llvm | filecheck %s
// Only llvm-dialect ops are left:
// RUN: backline-opt %s -p convert-executor-to-llvm | filecheck %s --check-prefix=CLEAN
// CLEAN-NOT: executor.
// CLEAN-NOT: !executor

// One NUL-terminated internal constant per distinct string, named around existing symbols.
// CHECK:      llvm.mlir.global internal constant @__bl_str_1("decoder-host:9000\00") {addr_space = 0 : i32} : !llvm.array<18 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_2("/ws/decode.o\00") {addr_space = 0 : i32} : !llvm.array<13 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_3("i64 (i64, ptr)\00") {addr_space = 0 : i32} : !llvm.array<15 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_4("decode\00") {addr_space = 0 : i32} : !llvm.array<7 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_5("void ()\00") {addr_space = 0 : i32} : !llvm.array<8 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_6("tick\00") {addr_space = 0 : i32} : !llvm.array<5 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_7("spin\00") {addr_space = 0 : i32} : !llvm.array<5 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_8("i32 (i64, ptr)\00") {addr_space = 0 : i32} : !llvm.array<15 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_9("fill\00") {addr_space = 0 : i32} : !llvm.array<5 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_10("/opt/lib/libfill.so\00") {addr_space = 0 : i32} : !llvm.array<20 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_11("{i64, double} (i64)\00") {addr_space = 0 : i32} : !llvm.array<20 x i8>
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_12("pair\00") {addr_space = 0 : i32} : !llvm.array<5 x i8>

// The runtime functions used, declared once, in first-use order.
// CHECK-NEXT: llvm.func @bl_executor_open(!llvm.ptr) -> !llvm.ptr
// CHECK-NEXT: llvm.func @bl_executor_send_binary(!llvm.ptr, !llvm.ptr) -> i32
// CHECK-NEXT: llvm.func @bl_status_record(i32) -> i32
// CHECK-NEXT: llvm.func @bl_executor_launch(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i64) -> i32
// CHECK-NEXT: llvm.func @bl_executor_launch_async(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-NEXT: llvm.func @bl_executor_await(!llvm.ptr, i64) -> i32
// CHECK-NEXT: llvm.func @bl_executor_call(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, !llvm.ptr, i64) -> i32
// CHECK-NEXT: llvm.func @bl_executor_close(!llvm.ptr) -> i32
// CHECK-NEXT: llvm.mlir.global internal constant @__bl_str_0
llvm.mlir.global internal constant @__bl_str_0("taken\00") {addr_space = 0 : i32} : !llvm.array<6 x i8>

// CHECK-LABEL: llvm.func @host(%x: i64, %p: !llvm.ptr) -> i64 {
// Entry block: the marshalling slots, once, before anything else.
// CHECK-NEXT:   %[[ONE:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[A0:.*]] = llvm.alloca %[[ONE]] x i64 : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[A1:.*]] = llvm.alloca %[[ONE]] x !llvm.ptr : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[N:.*]] = llvm.mlir.constant(2) : i64
// CHECK-NEXT:   %[[ARGV:.*]] = llvm.alloca %[[N]] x !llvm.ptr : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[G0:.*]] = llvm.getelementptr %[[ARGV]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   llvm.store %[[A0]], %[[G0]] : !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %[[G1:.*]] = llvm.getelementptr %[[ARGV]][1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   llvm.store %[[A1]], %[[G1]] : !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %[[R0:.*]] = llvm.alloca %[[ONE]] x i64 : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[N1:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[RESV:.*]] = llvm.alloca %[[N1]] x !llvm.ptr : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[G2:.*]] = llvm.getelementptr %[[RESV]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   llvm.store %[[R0]], %[[G2]] : !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %[[TOK:.*]] = llvm.alloca %[[ONE]] x i64 : (i64) -> !llvm.ptr
// CHECK:        %argv_2 = llvm.alloca %{{.*}} x !llvm.ptr : (i64) -> !llvm.ptr
// CHECK-NEXT:   %{{.*}} = llvm.getelementptr %argv_2[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   llvm.store
// CHECK-NEXT:   %[[SLOT_PAIR_A:.*]] = llvm.alloca %[[ONE]] x i64 : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[SLOT_PAIR_B:.*]] = llvm.alloca %[[ONE]] x f64 : (i64) -> !llvm.ptr

// open
// CHECK:        %[[ADDR:.*]] = llvm.mlir.addressof @__bl_str_1 : !llvm.ptr
// CHECK-NEXT:   %[[S:.*]] = llvm.call @bl_executor_open(%[[ADDR]]) : (!llvm.ptr) -> !llvm.ptr
// send_binary: the status is recorded
// CHECK-NEXT:   %[[OBJ:.*]] = llvm.mlir.addressof @__bl_str_2 : !llvm.ptr
// CHECK-NEXT:   %[[RC:.*]] = llvm.call @bl_executor_send_binary(%[[S]], %[[OBJ]]) : (!llvm.ptr, !llvm.ptr) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC]]) : (i32) -> i32
// launch: store the operands, call, record, load the result
// CHECK-NEXT:   llvm.store %x, %[[A0]] : i64, !llvm.ptr
// CHECK-NEXT:   llvm.store %p, %[[A1]] : !llvm.ptr, !llvm.ptr
// CHECK-NEXT:   %[[SIG:.*]] = llvm.mlir.addressof @__bl_str_3 : !llvm.ptr
// CHECK-NEXT:   %[[SYM:.*]] = llvm.mlir.addressof @__bl_str_4 : !llvm.ptr
// CHECK-NEXT:   %[[OBJ2:.*]] = llvm.mlir.addressof @__bl_str_2 : !llvm.ptr
// CHECK-NEXT:   %[[NA:.*]] = llvm.mlir.constant(2) : i64
// CHECK-NEXT:   %[[NR:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[RC1:.*]] = llvm.call @bl_executor_launch(%[[S]], %[[SYM]], %[[OBJ2]], %[[SIG]], %[[ARGV]], %[[NA]], %[[RESV]], %[[NR]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i64) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC1]]) : (i32) -> i32
// CHECK-NEXT:   %r = llvm.load %[[R0]] : !llvm.ptr -> i64
// launch without operands or results: null arrays, zero counts
// CHECK-NEXT:   %{{.*}} = llvm.mlir.addressof @__bl_str_5 : !llvm.ptr
// CHECK-NEXT:   %[[NULL0:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK-NEXT:   %[[NULL1:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK-NEXT:   %{{.*}} = llvm.mlir.addressof @__bl_str_6 : !llvm.ptr
// CHECK-NEXT:   %{{.*}} = llvm.mlir.addressof @__bl_str_2 : !llvm.ptr
// CHECK-NEXT:   %[[Z0:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:   %[[Z1:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:   %[[RC2:.*]] = llvm.call @bl_executor_launch(%[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %[[NULL0]], %[[Z0]], %[[NULL1]], %[[Z1]])
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC2]]) : (i32) -> i32
// launch_async: the token comes back through an i64 slot, zeroed first
// CHECK-NEXT:   %[[ZERO:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT:   llvm.store %[[ZERO]], %[[TOK]] : i64, !llvm.ptr
// CHECK-NEXT:   %{{.*}} = llvm.mlir.addressof @__bl_str_7 : !llvm.ptr
// CHECK-NEXT:   %{{.*}} = llvm.mlir.addressof @__bl_str_2 : !llvm.ptr
// CHECK-NEXT:   %[[RC3:.*]] = llvm.call @bl_executor_launch_async(%[[S]], %{{.*}}, %{{.*}}, %[[TOK]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC3]]) : (i32) -> i32
// CHECK-NEXT:   %t = llvm.load %[[TOK]] : !llvm.ptr -> i64
// await
// CHECK-NEXT:   %[[RC4:.*]] = llvm.call @bl_executor_await(%[[S]], %t) : (!llvm.ptr, i64) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC4]]) : (i32) -> i32
// call: also passes num_input_args
// CHECK:        %[[NARGS:.*]] = llvm.mlir.constant(2) : i64
// CHECK-NEXT:   %[[NIN:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[NRES:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[RC5:.*]] = llvm.call @bl_executor_call(%[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NARGS]], %[[NIN]], %{{.*}}, %[[NRES]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, !llvm.ptr, i64) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC5]]) : (i32) -> i32
// CHECK-NEXT:   %filled = llvm.load %{{.*}} : !llvm.ptr -> i32
// two results: one slot each
// CHECK:        llvm.call @bl_executor_launch(
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(
// CHECK-NEXT:   %a = llvm.load %[[SLOT_PAIR_A]] : !llvm.ptr -> i64
// CHECK-NEXT:   %b = llvm.load %[[SLOT_PAIR_B]] : !llvm.ptr -> f64
// close
// CHECK-NEXT:   %[[RC6:.*]] = llvm.call @bl_executor_close(%[[S]]) : (!llvm.ptr) -> i32
// CHECK-NEXT:   %{{.*}} = llvm.call @bl_status_record(%[[RC6]]) : (i32) -> i32
// CHECK-NEXT:   llvm.return %r : i64
// CHECK-NEXT: }
llvm.func @host(%x: i64, %p: !llvm.ptr) -> i64 {
  %s = executor.open("decoder-host:9000") : !executor.session
  executor.send_binary %s("/ws/decode.o") : !executor.session
  %r = executor.launch %s("decode", "/ws/decode.o")(%x, %p) : !executor.session, (i64, !llvm.ptr) -> i64
  executor.launch %s("tick", "/ws/decode.o")() : !executor.session, () -> ()
  %t = executor.launch_async %s("spin", "/ws/decode.o") : !executor.session -> !executor.token
  executor.await %s, %t : !executor.session
  %filled = executor.call %s("fill", "/opt/lib/libfill.so")(%x, %p) {num_input_args = 1 : i64} : !executor.session, (i64, !llvm.ptr) -> i32
  %a, %b = executor.launch %s("pair", "/ws/decode.o")(%x) : !executor.session, (i64) -> (i64, f64)
  executor.close %s : !executor.session
  llvm.return %r : i64
}
