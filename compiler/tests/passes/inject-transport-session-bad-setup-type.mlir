// RUN: backline-opt %s -p inject-transport-session --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p inject-transport-session > /dev/null

// An existing @backline_setup must be an llvm.func () -> i32.

// CHECK: inject-transport-session: @backline_setup must have the type () -> i32, not !llvm.func<void (i32)>
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane">]>} {
  llvm.func @backline_setup(%x: i32) {
    llvm.return
  }
}
