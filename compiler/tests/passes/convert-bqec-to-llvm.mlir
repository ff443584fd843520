// RUN: backline-opt %s -p convert-bqec-to-llvm | filecheck %s
// RUN: backline-opt %s -p convert-bqec-to-llvm{function=my_decoder} | filecheck %s --check-prefix=NAMED

builtin.module {
  llvm.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {
    bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "0f1b1b">}
    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<3x7, "0f1b1b">}
    %st = llvm.mlir.constant(0 : i32) : i32
    llvm.return %st : i32
  }
}

// CHECK:      llvm.func @bl_fn_steane(!llvm.ptr, i32, !llvm.ptr, i32, !llvm.ptr, i32, !llvm.ptr) -> i32
// CHECK-NEXT: llvm.func @bl_status_record(i32) -> i32
// CHECK:      llvm.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {
// CHECK-NEXT:   %[[ONE:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT:   %[[LEN0:.*]] = llvm.alloca %[[ONE]] x i32 : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[LEN1:.*]] = llvm.alloca %[[ONE]] x i32 : (i64) -> !llvm.ptr
// CHECK-NEXT:   %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK-NEXT:   %[[X:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[SB:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:   %[[CB:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:   %rc = llvm.call @bl_fn_steane(%[[NULL]], %[[X]], %syn, %[[SB]], %corr, %[[CB]], %[[LEN0]])
// CHECK-NEXT:   %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[FAILED:.*]] = llvm.icmp "ne" %rc, %[[ZERO]] : i32
// CHECK-NEXT:   %[[EFN:.*]] = llvm.mlir.constant(-11 : i32) : i32
// CHECK-NEXT:   %[[ST:.*]] = llvm.select %[[FAILED]], %[[EFN]], %[[ZERO]] : i1, i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[ST]]) : (i32) -> i32
// CHECK-NEXT:   %[[NULL1:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK-NEXT:   %[[Z:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK:        llvm.call @bl_fn_steane(%[[NULL1]], %[[Z]], %syn, %{{.*}}, %corr, %{{.*}}, %[[LEN1]])
// CHECK-NOT:    bqec.decode

// NAMED: llvm.func @my_decoder(!llvm.ptr, i32, !llvm.ptr, i32, !llvm.ptr, i32, !llvm.ptr) -> i32
// NAMED: llvm.call @my_decoder(
