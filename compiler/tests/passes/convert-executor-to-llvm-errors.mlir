// Each variant breaks one rule (sed rewrites a marked line).
// A direct call to a remote target's function: dispatch-executor-targets did not run.
// RUN: backline-opt %s -p convert-executor-to-llvm --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p convert-executor-to-llvm > /dev/null
// CHECK: convert-executor-to-llvm: @decode runs on the executor of target 'decoder' but is still called directly: run dispatch-executor-targets first

// A target module never cross-compiled.
// RUN: sed 's/, backline.object_file = "\/ws\/decoder.o"//' %s | backline-opt - -p convert-executor-to-llvm --verify-diagnostics \
// RUN:   | filecheck %s --check-prefix=NOOBJ
// NOOBJ: convert-executor-to-llvm: target 'decoder' has no backline.object_file: run cross-compile-targets first

// An operand without an LLVM lowering.
// RUN: sed 's/llvm.func @bl_executor_close(i64) \/\/ CLASH//; s/%r = llvm.call @decode(%x) : (i64) -> i64 \/\/ CALL/%r = executor.launch %h("decode", "\/ws\/decoder.o")(%m) : !executor.session, (memref<8xi8>) -> i64/' %s \
// RUN:   | backline-opt - -p convert-executor-to-llvm --verify-diagnostics | filecheck %s --check-prefix=MEMREF
// MEMREF: convert-executor-to-llvm: 'executor.launch' operand #0 has type memref<8xi8>, which has no LLVM lowering: lower it to the llvm dialect first (the executor ABI passes integers, floats, arrays and literal structs by value, and !llvm.ptr buffers)

// A host function already named like a runtime function, with another type.
// RUN: sed 's/llvm.func @bl_executor_close(i64) \/\/ CLASH//; s/%r = llvm.call @decode(%x) : (i64) -> i64 \/\/ CALL/%r = llvm.mlir.constant(0) : i64/' %s \
// RUN:   | backline-opt - -p convert-executor-to-llvm --verify-diagnostics | filecheck %s --check-prefix=OK
// RUN: sed 's/%r = llvm.call @decode(%x) : (i64) -> i64 \/\/ CALL/%r = llvm.mlir.constant(0) : i64/' %s \
// RUN:   | backline-opt - -p convert-executor-to-llvm --verify-diagnostics | filecheck %s --check-prefix=CLASH
// OK: llvm.func @bl_executor_close(!llvm.ptr) -> i32
// CLASH: convert-executor-to-llvm: @bl_executor_close is declared with type !llvm.func<void (i64)>, but the executor runtime ABI (backline/executor.h) gives it !llvm.func<i32 (!llvm.ptr)>
builtin.module attributes {backline.target = {name = "decoder", address = "decoder-host:9000"}, backline.object_file = "/ws/decoder.o"} {
  llvm.func @decode(i64) -> i64
}
llvm.func @decode(i64) -> i64
llvm.func @bl_executor_close(i64) // CLASH
func.func @host(%x: i64, %m: memref<8xi8>) -> i64 {
  %h = executor.open("decoder-host:9000") : !executor.session
  %r = llvm.call @decode(%x) : (i64) -> i64 // CALL
  executor.close %h : !executor.session
  func.return %r : i64
}
