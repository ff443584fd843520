// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.set_coprocessor_fn' context must be hex (two digits a byte), got 'abc'
func.func @f() {
  %s = transport.get_session {key = "dec"} : !transport.session<coprocessor>
  transport.set_coprocessor_fn %s {symbol = "decode", library = "/lib.so", decoder_id = 0 : i32, context = "abc"} : !transport.session<coprocessor>
  func.return
}
