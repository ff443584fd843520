// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.set_message_sizes' out_bytes must be positive, got 0
func.func @f() {
  %s = transport.get_session {key = "controller"} : !transport.session<controller>
  transport.set_message_sizes %s {in_bytes = 8 : i64, out_bytes = 0 : i64} : !transport.session<controller>
  func.return
}
