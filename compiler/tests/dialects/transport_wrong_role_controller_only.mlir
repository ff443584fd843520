// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.stage_payload' needs a !transport.session<controller>, got !transport.session<coprocessor>
func.func @f(%p: !llvm.ptr, %n: i32) {
  %s = transport.get_session {key = "dec"} : !transport.session<coprocessor>
  transport.stage_payload %s, %p, %n {decoder_id = 0 : i32} : !transport.session<coprocessor>
  func.return
}
