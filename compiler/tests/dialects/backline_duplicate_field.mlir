// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// A field given twice.

// CHECK: #transport.backline field 'transport' is given twice
module attributes {catalyst.backline = #transport.backline<transport = "memcpy", transport = "rdma", controller = #transport.node<name = "controller", hardware = "cpu">>} {
}
