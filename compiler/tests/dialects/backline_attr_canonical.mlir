// RUN: backline-opt %s | filecheck %s
// RUN: backline-opt %s | backline-opt - | filecheck %s

// A valid placement in any spacing and field order, with defaults left out, prints in the
// canonical form: fields in a fixed order, defaults omitted (name and hardware always
// written, default names filled in), dict keys sorted; a '>' or an escaped quote inside a
// string does not end it.

// CHECK: builtin.module attributes {catalyst.backline = #transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = [#transport.node<name = "coprocessor0", hardware = "cpu", init_args = {idle_spin_us = 5000, slots = 8}, endpoint = #transport.endpoint<host = "::1", port = 9000>, coprocessor_fn = "echo", runs_in = "process">, #transport.node<name = "coprocessor1", hardware = "cpu", executor_options = {python = "py>3 \22x\22"}, coprocessor_fn = #transport.fn<name = "f", library = "/l.so", symbol = "s", decoder_ids = [0, 2], reply_bits = 7>>], transport = "memcpy", qec_code = "steane">} {
module attributes {catalyst.backline = #transport.backline<
    qec_code = "steane",
    controller = #transport.node<>,
    coprocessors = [
      #transport.node<coprocessor_fn = "echo", init_args = {slots = 8, idle_spin_us = 5000},
                      endpoint = #transport.endpoint<port = 9000, host = "::1">, runs_in = "process">,
      #transport.node<coprocessor_fn = #transport.fn<reply_bits = 7, decoder_ids = [0, 2], symbol = "s", library = "/l.so", name = "f">,
                      executor_options = {python = "py>3 \"x\""}, remote = false>]>} {
}
