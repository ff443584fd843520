// RUN: backline-opt %s -p convert-quantum-to-llvm | filecheck %s

builtin.module {
  llvm.func @f(%p: !llvm.ptr, %mask: !llvm.ptr) {
    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    %w = llvm.mlir.constant(7 : i32) : i32
    bquantum.apply_mask "z" %d, %w, %mask {nbits = 7} : !bquantum.device
    llvm.return
  }
}

// CHECK:      llvm.func @bl_dev_apply_mask(!llvm.ptr, i32, i32, !llvm.ptr, i32) -> i32
// CHECK:      %[[Z:.*]] = llvm.mlir.constant(3 : i32) : i32
// CHECK-NEXT: %[[N:.*]] = llvm.mlir.constant(7 : i32) : i32
// CHECK-NEXT: %rc = llvm.call @bl_dev_apply_mask(%p, %[[Z]], %w, %mask, %[[N]]) : (!llvm.ptr, i32, i32, !llvm.ptr, i32) -> i32
// CHECK-NEXT: llvm.call @bl_status_record(%rc) : (i32) -> i32
