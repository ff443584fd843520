// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// A field the record does not have is named, with the fields it has.

// CHECK: #transport.node has no field 'colour'; its fields: name, hardware, remote, executor_options, init_args, endpoint, coprocessor_fn, runs_in
module attributes {catalyst.backline = #transport.backline<controller = #transport.node<colour = "blue">>} {
}
