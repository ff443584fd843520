// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: unknown transport 'rdma'. Installed transports:
// CHECK: memcpy
// CHECK: `pip install backline-transport-rdma`
module attributes {catalyst.backline = #transport.backline<transport = "rdma", controller = #transport.node<name = "controller", hardware = "cpu">>} {
}
