// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// The controller must be a #transport.node, not another record.

// CHECK: #transport.backline controller must be a #transport.node<...>
module attributes {catalyst.backline = #transport.backline<controller = #transport.endpoint<host = "h", port = 1>>} {
}
