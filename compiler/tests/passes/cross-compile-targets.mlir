// RUN: rm -rf %t && backline-opt %s -p 'cross-compile-targets{workspace="%t"}' | filecheck %s
// RUN: test -f %t/decoder.aarch64-unknown-linux-gnu.o && test -f %t/remote_x86.x86_64-unknown-linux-gnu.o
// The ELF e_machine field (bytes 18-19, little-endian): 183 = EM_AARCH64, 62 = EM_X86_64.
// RUN: od -An -tu2 -j18 -N2 %t/decoder.aarch64-unknown-linux-gnu.o | filecheck %s --check-prefix=ARM
// RUN: od -An -tu2 -j18 -N2 %t/remote_x86.x86_64-unknown-linux-gnu.o | filecheck %s --check-prefix=X86
// Running the pass twice compiles nothing the second time (objects already recorded):
// RUN: backline-opt %s -p 'cross-compile-targets{workspace="%t"},cross-compile-targets{workspace="%t"}' | filecheck %s

// ARM: 183
// X86: 62

// CHECK:      builtin.module attributes {backline.workspace = "[[WS:.*]]"} {

// Only exported functions stay, as body-less external declarations; the internal helper,
// the global and the target's own external declaration are gone.
// CHECK-NEXT:   builtin.module @decoder attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}, backline.object_file = "[[WS]]/decoder.aarch64-unknown-linux-gnu.o"} {
// CHECK-NEXT:     llvm.func @decode(i64) -> i64
// CHECK-NEXT:     llvm.func @reset()
// CHECK-NEXT:   }
builtin.module @decoder attributes {backline.target = {name = "decoder", triple = "aarch64-unknown-linux-gnu", address = "decoder-host:9000"}} {
  llvm.mlir.global internal constant @table(3 : i64) {addr_space = 0 : i32} : i64
  llvm.func @log_it(i64)
  llvm.func internal @helper(%x: i64) -> i64 {
    %c = llvm.mlir.constant(3) : i64
    %y = llvm.mul %x, %c : i64
    llvm.return %y : i64
  }
  llvm.func @decode(%x: i64) -> i64 {
    %y = llvm.call @helper(%x) : (i64) -> i64
    llvm.call @log_it(%y) : (i64) -> ()
    llvm.return %y : i64
  }
  llvm.func @reset() {
    llvm.return
  }
}

// CHECK-NEXT:   builtin.module attributes {backline.target = {name = "remote_x86", triple = "x86_64-unknown-linux-gnu", address = "[::1]:9001"}, backline.object_file = "[[WS]]/remote_x86.x86_64-unknown-linux-gnu.o"} {
// CHECK-NEXT:     llvm.func @scale(!llvm.ptr, i32) -> f64
// CHECK-NEXT:   }
builtin.module attributes {backline.target = {name = "remote_x86", triple = "x86_64-unknown-linux-gnu", address = "[::1]:9001"}} {
  llvm.func @scale(%p: !llvm.ptr, %n: i32) -> f64 {
    %v = llvm.load %p : !llvm.ptr -> f64
    llvm.return %v : f64
  }
}

// No triple: the host's. No address: runs in process.
// CHECK-NEXT:   builtin.module attributes {backline.target = {name = "local"}, backline.object_file = "[[WS]]/local.{{.+}}.o"} {
// CHECK-NEXT:     llvm.func @twice(i64) -> i64
// CHECK-NEXT:   }
builtin.module attributes {backline.target = {name = "local"}} {
  llvm.func @twice(%x: i64) -> i64 {
    %y = llvm.add %x, %x : i64
    llvm.return %y : i64
  }
}

// The host module is not touched.
// CHECK-NEXT:   llvm.func @decode(i64) -> i64
// CHECK-NEXT:   llvm.func @twice(i64) -> i64
// CHECK-NEXT:   llvm.func @host(%x: i64) -> i64 {
// CHECK-NEXT:     %r = llvm.call @decode(%x) : (i64) -> i64
// CHECK-NEXT:     %q = llvm.call @twice(%r) : (i64) -> i64
// CHECK-NEXT:     llvm.return %q : i64
// CHECK-NEXT:   }
// CHECK-NEXT: }
llvm.func @decode(i64) -> i64
llvm.func @twice(i64) -> i64
llvm.func @host(%x: i64) -> i64 {
  %r = llvm.call @decode(%x) : (i64) -> i64
  %q = llvm.call @twice(%r) : (i64) -> i64
  llvm.return %q : i64
}
