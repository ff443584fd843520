// transport.park waits for a coprocessor session's stop; a controller has nothing to park on.
// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.park' needs a !transport.session<coprocessor>, got !transport.session<controller>
func.func @f() {
  %s = transport.get_session {key = "dec"} : !transport.session<controller>
  transport.park %s : !transport.session<controller>
  func.return
}
