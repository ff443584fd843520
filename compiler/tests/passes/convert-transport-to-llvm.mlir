// RUN: backline-opt %s -p convert-transport-to-llvm | filecheck %s

builtin.module {
  llvm.func @bringup() -> i32 {
    %c = transport.create {transport = "memcpy", backend_lib = "/lib/backend.so", key = "dec", config = "", hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>
    %t0 = transport.connect_async %c : !transport.session<coprocessor> -> !transport.token
    transport.await %t0
    %t1 = transport.exchange_keys_async %c : !transport.session<coprocessor> -> !transport.token
    transport.await %t1
    transport.establish_channel %c : !transport.session<coprocessor>
    transport.set_coprocessor_fn %c {symbol = "bl_fn_echo", library = "/lib/libbackline.so", decoder_id = 1 : i32} : !transport.session<coprocessor>
    transport.start %c : !transport.session<coprocessor>
    %s = transport.create {transport = "memcpy", backend_lib = "/lib/backend.so", key = "dec", config = "", hardware = "cpu"} : !transport.session<controller>
    transport.connect %s : !transport.session<controller>
    transport.exchange_keys %s : !transport.session<controller>
    transport.establish_channel %s : !transport.session<controller>
    transport.set_message_sizes %s {in_bytes = 8 : i64, out_bytes = 4 : i64} : !transport.session<controller>
    transport.start %s : !transport.session<controller>
    %st = transport.take_status : i32
    llvm.return %st : i32
  }
  llvm.func @round(%p: !llvm.ptr, %n: i32, %out: !llvm.ptr) -> i64 {
    %s = transport.get_session {key = "dec"} : !transport.session<controller>
    transport.stage_payload %s, %p, %n {decoder_id = 1 : i32} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %len = transport.collect %s, %out, %n : !transport.session<controller> -> i32
    transport.post %s : !transport.session<controller>
    %v = transport.collect_value %s : !transport.session<controller> -> i64
    transport.post %s : !transport.session<controller>
    %slot, %slen = transport.reply_slot %s : !transport.session<controller> -> !llvm.ptr, i32
    %rtt = transport.last_rtt_ns %s : !transport.session<controller> -> i64
    transport.stop %s : !transport.session<controller>
    transport.destroy %s : !transport.session<controller>
    llvm.return %rtt : i64
  }
}

// Runtime declarations and string globals are created once, at the top.
// CHECK:      llvm.mlir.global internal constant @[[LIB:__bl_str_[0-9]+]]("/lib/backend.so\00")
// CHECK:      llvm.mlir.global internal constant @[[KEY:__bl_str_[0-9]+]]("dec\00")
// CHECK:      llvm.func @bl_session_create(!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, i32, !llvm.ptr) -> i32
// CHECK:      llvm.func @bl_connect_async(!llvm.ptr) -> i64
// CHECK:      llvm.func @bl_await(i64) -> i32
// CHECK-NOT:  transport.

// Bring-up: the session pointer comes back through an entry-block slot; runs_in becomes its
// bl_runs_in value (BL_RUNS_THREAD = 1; absent on a controller: BL_RUNS_ANY = -1); async
// steps return an i64 token that bl_await turns into a status, recorded like every other status.
// CHECK-LABEL: llvm.func @bringup() -> i32
// CHECK:        %[[SLOT:.*]] = llvm.alloca %{{.*}} x !llvm.ptr
// CHECK:        %[[ROLE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK:        %[[WHERE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT:   %[[RC:.*]] = llvm.call @bl_session_create(%{{.*}}, %[[ROLE]], %{{.*}}, %{{.*}}, %[[WHERE]], %[[SLOT]])
// CHECK-NEXT:   llvm.call @bl_status_record(%[[RC]])
// CHECK-NEXT:   %[[C:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:   %[[T0:.*]] = llvm.call @bl_connect_async(%[[C]]) : (!llvm.ptr) -> i64
// CHECK-NEXT:   %[[A0:.*]] = llvm.call @bl_await(%[[T0]]) : (i64) -> i32
// CHECK-NEXT:   llvm.call @bl_status_record(%[[A0]])
// CHECK-NEXT:   %[[T1:.*]] = llvm.call @bl_exchange_keys_async(%[[C]]) : (!llvm.ptr) -> i64
// CHECK-NEXT:   %[[A1:.*]] = llvm.call @bl_await(%[[T1]]) : (i64) -> i32
// CHECK:        llvm.call @bl_establish_channel(%[[C]])
// CHECK:        llvm.call @bl_set_coprocessor_fn_by_name(%[[C]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:        llvm.call @bl_start(%[[C]])
// CHECK:        %[[CROLE:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK:        %[[ANY:.*]] = llvm.mlir.constant(-1 : i32) : i32
// CHECK-NEXT:   llvm.call @bl_session_create(%{{.*}}, %[[CROLE]], %{{.*}}, %{{.*}}, %[[ANY]], %{{.*}})
// The synchronous exchange_keys also provisions the memory.
// CHECK:        llvm.call @bl_connect(%[[S:.*]]) : (!llvm.ptr) -> i32
// CHECK:        llvm.call @bl_alloc_memory(%[[S]])
// CHECK:        llvm.call @bl_exchange_keys(%[[S]])
// CHECK:        %[[IN:.*]] = llvm.mlir.constant(8 : i32) : i32
// CHECK-NEXT:   %[[OUT:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT:   llvm.call @bl_set_message_sizes(%[[S]], %[[IN]], %[[OUT]])
// CHECK:        %[[ST:.*]] = llvm.call @bl_status_take() : () -> i32
// CHECK-NEXT:   llvm.return %[[ST]] : i32

// Rounds: get_session by (role, key); collect's length and reply_slot's results come back
// through entry-block slots; collect_value reads at most 8 bytes into a zeroed i64.
// CHECK-LABEL: llvm.func @round(
// CHECK:        %[[LEN:.*]] = llvm.alloca %{{.*}} x i32
// CHECK:        %[[VAL:.*]] = llvm.alloca %{{.*}} x i64
// CHECK:        %[[CTL:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[K:.*]] = llvm.mlir.addressof @[[KEY]] : !llvm.ptr
// CHECK-NEXT:   %[[SS:.*]] = llvm.call @bl_session_get(%[[CTL]], %[[K]]) : (i32, !llvm.ptr) -> !llvm.ptr
// CHECK:        llvm.call @bl_stage_payload(%[[SS]], %p, %n, %{{.*}})
// CHECK:        llvm.call @bl_post(%[[SS]])
// CHECK:        llvm.call @bl_collect(%[[SS]], %out, %n, %[[LEN]])
// CHECK:        %len = llvm.load %[[LEN]] : !llvm.ptr -> i32
// CHECK:        llvm.store %{{.*}}, %[[VAL]] : i64, !llvm.ptr
// CHECK:        %v = llvm.load %[[VAL]] : !llvm.ptr -> i64
// CHECK:        llvm.call @bl_reply_slot(%[[SS]], %{{.*}}, %{{.*}})
// CHECK:        %rtt = llvm.call @bl_last_rtt_ns(%[[SS]]) : (!llvm.ptr) -> i64
// CHECK:        llvm.call @bl_stop(%[[SS]])
// CHECK:        llvm.call @bl_destroy(%[[SS]])
// CHECK-NEXT:   llvm.call @bl_status_record
// CHECK-NEXT:   llvm.return %rtt : i64
