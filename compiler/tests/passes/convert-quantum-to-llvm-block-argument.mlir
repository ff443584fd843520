// RUN: ! backline-opt %s -p convert-quantum-to-llvm 2>&1 | filecheck %s

// CHECK: convert-quantum-to-llvm: a !bquantum.device block argument cannot be lowered; pass the !llvm.ptr and use bquantum.device_from_ptr
func.func @f(%d: !bquantum.device, %q: i32) {
  bquantum.reset %d, %q
  func.return
}
