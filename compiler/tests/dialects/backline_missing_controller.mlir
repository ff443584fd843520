// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// A placement needs its controller.

// CHECK: #transport.backline needs the field 'controller'
module attributes {catalyst.backline = #transport.backline<transport = "memcpy">} {
}
