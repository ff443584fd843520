// A target module is lowered on its own: its runtime declarations and string globals go
// into it, so cross-compile-targets compiles it to a standalone object; the host's go to
// the top. transport.park becomes bl_park.
// RUN: backline-opt %s -p convert-transport-to-llvm | filecheck %s
// RUN: rm -rf %t && backline-opt %s -p 'convert-transport-to-llvm,cross-compile-targets{workspace="%t"}' > /dev/null
// RUN: test -f %t/coprocessor_dec.x86_64-unknown-linux-gnu.o

// CHECK:      builtin.module {
// CHECK-NEXT:   llvm.mlir.global internal constant @__bl_str_0("host\00")
// CHECK-NEXT:   llvm.func @bl_session_get(i32, !llvm.ptr) -> !llvm.ptr
// CHECK-NEXT:   llvm.func @bl_stop(!llvm.ptr) -> i32
// CHECK-NEXT:   llvm.func @bl_status_record(i32) -> i32
// CHECK-NEXT:   builtin.module attributes {backline.target = {name = "coprocessor_dec", triple = "x86_64-unknown-linux-gnu", address = "127.0.0.1:9000"}} {
// CHECK-NEXT:     llvm.mlir.global internal constant @__bl_str_0("dec\00")
// CHECK-NEXT:     llvm.func @bl_session_get(i32, !llvm.ptr) -> !llvm.ptr
// CHECK-NEXT:     llvm.func @bl_park(!llvm.ptr) -> i32
// CHECK-NEXT:     llvm.func @bl_status_record(i32) -> i32
// CHECK-NEXT:     llvm.func @bl_status_take() -> i32
// CHECK-NEXT:     llvm.func @serve() -> i32 {
// CHECK-NEXT:       %{{.*}} = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:       %{{.*}} = llvm.mlir.addressof @__bl_str_0 : !llvm.ptr
// CHECK-NEXT:       %[[S:.*]] = llvm.call @bl_session_get(
// CHECK-NEXT:       %[[RC:.*]] = llvm.call @bl_park(%[[S]]) : (!llvm.ptr) -> i32
// CHECK-NEXT:       %{{.*}} = llvm.call @bl_status_record(%[[RC]]) : (i32) -> i32
// CHECK-NEXT:       %[[ST:.*]] = llvm.call @bl_status_take() : () -> i32
// CHECK-NEXT:       llvm.return %[[ST]] : i32
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   llvm.func @host() {
// CHECK-NEXT:     %{{.*}} = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:     %{{.*}} = llvm.mlir.addressof @__bl_str_0 : !llvm.ptr
// CHECK-NEXT:     %[[H:.*]] = llvm.call @bl_session_get(
// CHECK-NEXT:     %[[RC2:.*]] = llvm.call @bl_stop(%[[H]]) : (!llvm.ptr) -> i32
// CHECK-NEXT:     %{{.*}} = llvm.call @bl_status_record(%[[RC2]]) : (i32) -> i32
// CHECK-NEXT:     llvm.return
// CHECK-NEXT:   }
// CHECK-NEXT: }
builtin.module {
  builtin.module attributes {backline.target = {name = "coprocessor_dec", triple = "x86_64-unknown-linux-gnu", address = "127.0.0.1:9000"}} {
    llvm.func @serve() -> i32 {
      %s = transport.get_session {key = "dec"} : !transport.session<coprocessor>
      transport.park %s : !transport.session<coprocessor>
      %st = transport.take_status : i32
      llvm.return %st : i32
    }
  }
  llvm.func @host() {
    %s = transport.get_session {key = "host"} : !transport.session<controller>
    transport.stop %s : !transport.session<controller>
    llvm.return
  }
}
