// RUN: backline-opt %s -p inject-transport-session | filecheck %s

// Existing @backline_setup / @backline_teardown are extended, not replaced: bring-up is
// prepended to setup's entry block; teardown goes before teardown's return (before the
// take_status it returns, if it returns one). A return of some other value now returns
// that value only when the runtime recorded no failure.

module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  // CHECK-LABEL: llvm.func @backline_setup() -> i32 {
  // CHECK-NEXT:    transport.create {{.*}} : !transport.session<coprocessor>
  // CHECK:         transport.start %{{.*}} : !transport.session<controller>
  // CHECK-NEXT:    %[[MINE:.*]] = llvm.mlir.constant(7 : i32) : i32
  // CHECK-NEXT:    %[[ST:.*]] = transport.take_status : i32
  // CHECK-NEXT:    %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
  // CHECK-NEXT:    %[[OK:.*]] = llvm.icmp "eq" %[[ST]], %[[ZERO]] : i32
  // CHECK-NEXT:    %[[R:.*]] = llvm.select %[[OK]], %[[MINE]], %[[ST]] : i1, i32
  // CHECK-NEXT:    llvm.return %[[R]] : i32
  // CHECK-NEXT:  }
  llvm.func @backline_setup() -> i32 {
    %mine = llvm.mlir.constant(7 : i32) : i32
    llvm.return %mine : i32
  }

  // CHECK-LABEL: llvm.func @backline_teardown() -> i32 {
  // CHECK-NEXT:    %{{.*}} = llvm.mlir.constant(1 : i32) : i32
  // CHECK-NEXT:    transport.get_session {key = "dec"} : !transport.session<controller>
  // CHECK:         transport.destroy %{{.*}} : !transport.session<coprocessor>
  // CHECK-NEXT:    %[[ST2:.*]] = transport.take_status : i32
  // CHECK-NEXT:    llvm.return %[[ST2]] : i32
  // CHECK-NEXT:  }
  llvm.func @backline_teardown() -> i32 {
    %unrelated = llvm.mlir.constant(1 : i32) : i32
    %st = transport.take_status : i32
    llvm.return %st : i32
  }
  // CHECK-NOT: llvm.func @backline_
}
