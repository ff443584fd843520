// RUN: backline-opt %s -p lower-decode-to-transport | filecheck %s
// RUN: backline-opt %s -p "lower-decode-to-transport{policy=by-check-type}" | diff - <(backline-opt %s)

// A placement without coprocessors keeps the decodes local too (the policy is not
// consulted, so by-check-type does not complain either).

// CHECK:     bqec.decode %{{.*}}, %{{.*}} {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, "787315">}
// CHECK-NOT: transport.get_session
module attributes {backline.placement = #transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">>} {
  func.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) {
    bqec.decode %syn, %corr {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, "787315">}
    func.return
  }
}
