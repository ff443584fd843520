// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s
// RUN: backline-opt %s -p lower-decode-to-transport | diff - <(backline-opt %s)

// Without backline.placement the decodes stay local: the module is unchanged.

// CHECK:     bqec.decode %{{.*}}, %{{.*}} {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
// CHECK-NOT: transport.
func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
  bqec.decode %syn, %corr {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
  func.return
}
