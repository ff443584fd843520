// RUN: ! backline-opt %s -p encode-steane 2>&1 | filecheck %s

// Logical wires must be constants: the pass maps them to data blocks at compile time.
builtin.module {
  llvm.func @f(%p: !llvm.ptr, %w: i32) {
    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    bquantum.gate "H" %d, %w : !bquantum.device
    llvm.return
  }
}

// CHECK: encode-steane: 'bquantum.gate' needs its logical wires as llvm.mlir.constant i32 values
