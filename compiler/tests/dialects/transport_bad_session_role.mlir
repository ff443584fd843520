// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: Expected one of 'controller', 'coprocessor' as the !transport.session role
func.func @f() {
  %s = transport.get_session {key = "dec"} : !transport.session<decoder>
  func.return
}
