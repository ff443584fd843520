// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// transport.create's runs_in is one of the core's places.

// CHECK: 'transport.create' runs_in 'inline' is not a place; use one of controller-thread, thread, process
func.func @f() {
  %c = transport.create {transport = "memcpy", backend_lib = "/x.so", key = "dec", config = "", hardware = "cpu", runs_in = "inline"} : !transport.session<coprocessor>
  func.return
}
