// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.set_coprocessor_fn' needs a !transport.session<coprocessor>, got !transport.session<controller>
func.func @f() {
  %s = transport.get_session {key = "controller"} : !transport.session<controller>
  transport.set_coprocessor_fn %s {symbol = "decode", library = "/lib.so", decoder_id = 0 : i32} : !transport.session<controller>
  func.return
}
