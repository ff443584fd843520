// RUN: backline-opt %s -p convert-transport-to-llvm --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p convert-transport-to-llvm > /dev/null

// A module that already has a runtime function of another type cannot be lowered.
builtin.module {
  llvm.func @bl_post(i64) -> i64
  llvm.func @f() -> i32 {
    %s = transport.get_session {key = "k"} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %st = transport.take_status : i32
    llvm.return %st : i32
  }
}

// CHECK: convert-transport-to-llvm: @bl_post is declared with type {{.*}}, but the runtime's C ABI (backline/backline.h) gives it
