// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'transport.stage_payload' decoder_id must be in [0, 256), got 256
func.func @f(%p: !llvm.ptr, %n: i32) {
  %s = transport.get_session {key = "controller"} : !transport.session<controller>
  transport.stage_payload %s, %p, %n {decoder_id = 256 : i32} : !transport.session<controller>
  func.return
}
