"""The transport, executor, bqec and bquantum dialects: build, print, reparse, verify."""

from __future__ import annotations

import io

import numpy as np
import pytest
from backline_compiler.dialects import (
    BQEC,
    BQUANTUM,
    DIALECTS,
    EXECUTOR,
    TRANSPORT,
    bqec,
    executor,
    load_all,
    transport,
)
from backline_compiler.dialects.transport import (
    CONTROLLER_SESSION,
    COPROCESSOR_SESSION,
    PTR,
    BacklineAttr,
    SessionType,
    _scan_balanced,
)
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, llvm, memref
from xdsl.dialects.builtin import ModuleOp, StringAttr, i32, i64
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from backline_core.errors import PlacementError, PluginError
from backline_core.placement import Controller, Coprocessor, Endpoint, Placement

# -- helpers ------------------------------------------------------------------------------


def make_context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, llvm.LLVM, memref.MemRef):
        ctx.load_dialect(dialect)
    return load_all(ctx)


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def show(op: Operation, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(op)
    return out.getvalue()


def assert_round_trips(module: ModuleOp) -> str:
    """Custom and generic text both reparse to the same IR; returns the custom text."""
    module.verify()
    custom, generic = show(module), show(module, generic=True)
    assert show(parse(custom)) == custom
    assert show(parse(generic)) == custom
    assert show(parse(generic), generic=True) == generic
    return custom


def build_func(arg_types, body) -> ModuleOp:
    """A module holding ``func.func @f(arg_types)`` whose ops ``body(args)`` returns."""
    f = func.FuncOp("f", (list(arg_types), []))
    for i, arg in enumerate(f.body.block.args):
        arg.name_hint = f"arg{i}"
    ops = list(body(f.body.block.args))
    f.body.block.add_ops([*ops, func.ReturnOp()])
    return ModuleOp([f])


def core_message(text: str) -> str:
    try:
        Placement.from_attribute(text)
    except (PlacementError, PluginError) as exc:
        return str(exc)
    raise AssertionError("the core accepted the placement")


PLACEMENT = Placement(
    controller=Controller(),
    coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", init_args={"locality": "thread"})],
)
STEANE_H = [[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0, 1]]

# -- dialect registration -----------------------------------------------------------------


def test_dialects_are_exported_and_load_idempotently():
    assert [d.name for d in DIALECTS] == ["transport", "executor", "bqec", "bquantum"]
    assert (TRANSPORT, EXECUTOR, BQEC, BQUANTUM) == DIALECTS
    ctx = make_context()
    assert load_all(ctx) is ctx  # second load: no "already registered" error
    for name in ("transport.create", "transport.collect_value", "executor.launch", "bqec.decode",
                 "bquantum.gate", "bquantum.noise"):
        assert ctx.get_optional_op(name) is not None, name
    assert ctx.get_optional_attr("transport.backline") is BacklineAttr
    assert ctx.get_optional_type("transport.session") is SessionType


# -- transport ----------------------------------------------------------------------------


def all_transport_ops(args):
    buf, length = args
    c = transport.CreateOp("controller", transport="memcpy", backend_lib="/c.so", key="controller")
    d = transport.CreateOp(COPROCESSOR_SESSION, transport="memcpy", backend_lib="/d.so", key="dec",
                           config="locality=thread")
    t = transport.ConnectAsyncOp(d)
    k = transport.ExchangeKeysAsyncOp(d)
    s = transport.GetSessionOp("controller", "controller")
    for op, hint in ((c, "c"), (d, "d"), (t, "t"), (k, "k"), (s, "s")):
        op.results[0].name_hint = hint
    return [
        c, d,
        transport.ConnectOp(c), t, transport.AwaitOp(t),
        transport.ExchangeKeysOp(c), k, transport.AwaitOp(k),
        transport.EstablishChannelOp(c), transport.EstablishChannelOp(d),
        transport.SetMessageSizesOp(c, 2, 1),
        transport.SetCoprocessorFnOp(d, symbol="decode", library="/lib.so"),
        transport.SetCoprocessorFnOp(d, symbol="f", library="/f.so", decoder_id=1, init_symbol="fi",
                                     fini_symbol="ff", context=b"\x00\xff"),
        transport.StartOp(d), transport.StartOp(c),
        s,
        transport.StagePayloadOp(s, buf, length, decoder_id=1),
        transport.PostOp(s),
        transport.CollectOp(s, buf, length),
        transport.CollectValueOp(s),
        transport.ReplySlotOp(s),
        transport.LastRttNsOp(s),
        transport.StopOp(c), transport.DestroyOp(c),
    ]


def test_transport_ops_built_in_python_print_and_reparse():
    module = build_func([PTR, i32], all_transport_ops)
    module.attributes["catalyst.backline"] = BacklineAttr.from_placement(PLACEMENT)
    text = assert_round_trips(module)
    for line in (
        (
            'transport.create {transport = "memcpy", backend_lib = "/c.so", key = "controller", config = "", '
            'hardware = "cpu"} : !transport.session<controller>'
        ),
        "%t = transport.connect_async %d : !transport.session<coprocessor> -> !transport.token",
        "transport.set_message_sizes %c {in_bytes = 2 : i64, out_bytes = 1 : i64} : !transport.session<controller>",
        (
            'transport.set_coprocessor_fn %d {symbol = "f", library = "/f.so", decoder_id = 1 : i32, '
            'init_symbol = "fi", fini_symbol = "ff", context = "00ff"} : !transport.session<coprocessor>'
        ),
        "transport.stage_payload %s, %arg0, %arg1 {decoder_id = 1 : i32} : !transport.session<controller>",
        "= transport.collect %s, %arg0, %arg1 : !transport.session<controller> -> i32",
        "= transport.reply_slot %s : !transport.session<controller> -> !llvm.ptr, i32",
        "= transport.last_rtt_ns %s : !transport.session<controller> -> i64",
    ):
        assert line in text, line
    assert PLACEMENT.to_attribute() in text


def test_transport_accessors():
    ops = all_transport_ops(build_func([PTR, i32], lambda a: []).body.block.first_op.body.block.args)
    create = ops[0]
    assert create.session.type == CONTROLLER_SESSION
    assert isinstance(create.session.type, SessionType) and create.session.type.role_name == "controller"
    assert (create.transport.data, create.backend_lib.data, create.key.data, create.config.data,
            create.hardware.data) == ("memcpy", "/c.so", "controller", "", "cpu")
    sizes = next(op for op in ops if isinstance(op, transport.SetMessageSizesOp))
    assert (sizes.in_bytes.value.data, sizes.out_bytes.value.data) == (2, 1)
    assert sizes.in_bytes.type == i64
    fn = [op for op in ops if isinstance(op, transport.SetCoprocessorFnOp)]
    assert fn[0].init_symbol is None and fn[0].context is None and fn[0].decoder_id.value.data == 0
    assert fn[1].context.data == "00ff" and fn[1].decoder_id.type == i32
    slot = next(op for op in ops if isinstance(op, transport.ReplySlotOp))
    assert (slot.slot.type, slot.length.type) == (PTR, i32)


CONTROLLER_ONLY = {
    "transport.set_message_sizes": lambda s, p, n: transport.SetMessageSizesOp(s, 8, 8),
    "transport.stage_payload": lambda s, p, n: transport.StagePayloadOp(s, p, n),
    "transport.post": lambda s, p, n: transport.PostOp(s),
    "transport.collect": lambda s, p, n: transport.CollectOp(s, p, n),
    "transport.collect_value": lambda s, p, n: transport.CollectValueOp(s),
    "transport.reply_slot": lambda s, p, n: transport.ReplySlotOp(s),
    "transport.last_rtt_ns": lambda s, p, n: transport.LastRttNsOp(s),
}


def verify_error(build, arg_types=(PTR, i32)) -> str:
    module = build_func(arg_types, build)
    with pytest.raises(VerifyException) as info:
        module.verify()
    return str(info.value)


@pytest.mark.parametrize("name", sorted(CONTROLLER_ONLY))
def test_controller_only_ops_reject_a_coprocessor_session(name):
    def body(args):
        s = transport.GetSessionOp("coprocessor", "dec")
        return [s, CONTROLLER_ONLY[name](s, *args)]

    assert verify_error(body) == f"'{name}' needs a !transport.session<controller>, got !transport.session<coprocessor>"


def test_coprocessor_only_op_rejects_a_controller_session():
    def body(args):
        s = transport.GetSessionOp("controller", "controller")
        return [s, transport.SetCoprocessorFnOp(s, symbol="d", library="/l.so")]

    assert verify_error(body) == (
        "'transport.set_coprocessor_fn' needs a !transport.session<coprocessor>, got !transport.session<controller>"
    )


def test_role_check_in_parsed_text():
    text = """
    func.func @f() {
      %s = transport.get_session {key = "dec"} : !transport.session<coprocessor>
      transport.post %s : !transport.session<coprocessor>
      func.return
    }"""
    with pytest.raises(VerifyException, match=r"^'transport.post' needs a !transport.session<controller>, got "):
        parse(text)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda s, p, n: transport.SetMessageSizesOp(s, 0, 8),
         "'transport.set_message_sizes' in_bytes must be positive, got 0"),
        (lambda s, p, n: transport.SetMessageSizesOp(s, 8, -1),
         "'transport.set_message_sizes' out_bytes must be positive, got -1"),
        (lambda s, p, n: transport.StagePayloadOp(s, p, n, decoder_id=256),
         "'transport.stage_payload' decoder_id must be in [0, 256), got 256"),
        (lambda s, p, n: transport.StagePayloadOp(s, p, n, decoder_id=-1),
         "'transport.stage_payload' decoder_id must be in [0, 256), got -1"),
    ],
)
def test_controller_integer_checks(build, message):
    def body(args):
        s = transport.GetSessionOp("controller", "controller")
        return [s, build(s, *args)]

    assert verify_error(body) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"decoder_id": 300}, "'transport.set_coprocessor_fn' decoder_id must be in [0, 256), got 300"),
        ({"context": "xyz"}, "'transport.set_coprocessor_fn' context must be hex (two digits a byte), got 'xyz'"),
        ({"symbol": ""}, "'transport.set_coprocessor_fn' needs a non-empty symbol"),
    ],
)
def test_set_coprocessor_fn_checks(kwargs, message):
    def body(args):
        s = transport.GetSessionOp("coprocessor", "dec")
        return [s, transport.SetCoprocessorFnOp(s, **{"symbol": "d", "library": "/l.so", **kwargs})]

    assert verify_error(body) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"key": ""}, "'transport.create' needs a non-empty key (the node name)"),
        ({"hardware": "tpu"}, "'transport.create' hardware 'tpu' is unknown; use one of cpu, gpu, fpga"),
    ],
)
def test_create_checks(kwargs, message):
    def body(args):
        return [transport.CreateOp("controller", **{"transport": "memcpy", "backend_lib": "/x.so", "key": "c",
                                                    **kwargs})]

    assert verify_error(body) == message


def test_session_type_role():
    assert str(SessionType("coprocessor")) == "!transport.session<coprocessor>"
    assert SessionType("controller") == CONTROLLER_SESSION
    with pytest.raises(VerifyException, match="role 'worker' is unknown; use one of controller, coprocessor"):
        SessionType("worker")
    with pytest.raises(ParseError, match="Expected one of 'controller', 'coprocessor'"):
        parse('%s = "transport.get_session"() <{key = "k"}> : () -> !transport.session<worker>')


# -- the placement attribute --------------------------------------------------------------


def test_backline_attr_from_and_to_placement():
    attr = BacklineAttr.from_placement(PLACEMENT)
    assert attr.text.data == PLACEMENT.to_attribute()
    assert str(attr) == PLACEMENT.to_attribute()
    assert attr.placement() == PLACEMENT
    assert BacklineAttr(PLACEMENT.to_attribute()) == attr


def test_backline_attr_parses_the_canonical_text_verbatim():
    placement = Placement(
        controller=Controller(name="ctl"),
        coprocessors=[
            Coprocessor(name="a", coprocessor_fn="echo", executor_options={"python": 'py>3 "q" \\ {['}),
            Coprocessor(name="b", coprocessor_fn="steane", endpoint=Endpoint(host="::1", port=9000),
                        init_args={"locality": "process", "cpu": 3}),
        ],
        qec_code="steane",
    )
    text = placement.to_attribute()
    module = parse(f"module attributes {{catalyst.backline = {text}, other = 1 : i64}} {{}}")
    attr = module.attributes["catalyst.backline"]
    assert isinstance(attr, BacklineAttr) and attr.text.data == text and attr.placement() == placement
    assert module.attributes["other"] == builtin.IntegerAttr(1, i64)
    assert show(module).startswith(f"builtin.module attributes {{catalyst.backline = {text}, other = 1 : i64}}")
    assert_round_trips(module)


def test_backline_attr_canonicalizes_a_valid_spelling():
    module = parse(
        'module attributes {p = #transport.backline<\n  controller = #transport.node<>,\n'
        '  coprocessors = [#transport.node<coprocessor_fn = "echo">]\n>} {}'
    )
    expected = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="echo")])
    assert module.attributes["p"].text.data == expected.to_attribute()


BAD_PLACEMENTS = {
    "unknown transport": '#transport.backline<transport = "rdma", controller = #transport.node<name = "controller", '
    'hardware = "cpu">>',
    "unknown init_args key": '#transport.backline<transport = "memcpy", controller = #transport.node<name = '
    '"controller", hardware = "cpu">, coprocessors = [#transport.node<name = "dec", hardware = "cpu", '
    'init_args = {colour = "blue"}, coprocessor_fn = "steane">]>',
    "unknown decoder": '#transport.backline<controller = #transport.node<>, coprocessors = [#transport.node<'
    'coprocessor_fn = "nope">]>',
    "unknown field": '#transport.backline<controller = #transport.node<colour = 1>>',
    "duplicate name": '#transport.backline<controller = #transport.node<name = "x">, coprocessors = ['
    '#transport.node<name = "x", coprocessor_fn = "echo">]>',
}


@pytest.mark.parametrize("case", sorted(BAD_PLACEMENTS))
def test_bad_placement_message_is_the_cores(case):
    text = BAD_PLACEMENTS[case]
    expected = core_message(text)
    with pytest.raises(VerifyException) as built:
        BacklineAttr(text)
    assert str(built.value) == expected
    with pytest.raises(VerifyException) as parsed:
        parse(f"module attributes {{catalyst.backline = {text}}} {{}}")
    assert str(parsed.value) == expected


def test_bad_placement_messages_say_what_is_wrong():
    assert core_message(BAD_PLACEMENTS["unknown transport"]).startswith("unknown transport 'rdma'.")
    assert core_message(BAD_PLACEMENTS["unknown init_args key"]).startswith(
        "node 'dec' has init_args ['colour'] that transport 'memcpy' does not accept"
    )


def test_backline_attr_text_must_be_the_attribute():
    with pytest.raises(VerifyException, match="must start with '#transport.backline<'"):
        BacklineAttr('#transport.node<name = "x">')


@pytest.mark.parametrize(
    "text",
    [
        "#transport.backline<controller = #transport.node<>",  # no closing '>'
        '#transport.backline<controller = "unterminated>',
        "#transport.backline<controller = #transport.node<name = [}>>",
    ],
)
def test_unbalanced_backline_attr_is_a_parse_error(text):
    with pytest.raises(ParseError, match="unterminated #transport.backline"):
        parse(f"module attributes {{p = {text}}} {{}}")


def test_scan_balanced():
    s = '<a = "x>\\"y>", b = [<1>], c = {d = (e)}> tail'
    assert _scan_balanced(s, 1) == s.index("> tail")
    assert _scan_balanced("<a = [>", 1) == -1
    assert _scan_balanced('<"\\', 1) == -1
    assert _scan_balanced("<>", 1) == 1


# -- executor -----------------------------------------------------------------------------


def all_executor_ops(args):
    mem, ptr = args
    s = executor.OpenOp("decoder-host:9000")
    tok = executor.LaunchAsyncOp(s, "spin", "/tmp/k.o")
    s.session.name_hint, tok.token.name_hint = "s", "tok"
    return [
        s,
        executor.SendBinaryOp(s, "/tmp/k.o"),
        executor.LaunchOp(s, "decode", "/tmp/k.o", [mem], [mem.type]),
        executor.LaunchOp(s, "tick", "/tmp/k.o"),
        tok,
        executor.AwaitOp(s, tok),
        executor.CallOp(s, "fill", "/lib.so", [mem, ptr], num_input_args=1, result_types=[i32]),
        executor.CallOp(s, "all_in", "/lib.so", [mem]),
        executor.CloseOp(s),
    ]


def test_executor_ops_built_in_python_print_and_reparse():
    mem = memref.MemRefType(builtin.IntegerType(8), [8])
    text = assert_round_trips(build_func([mem, PTR], all_executor_ops))
    for line in (
        '%s = executor.open("decoder-host:9000") : !executor.session',
        'executor.send_binary %s("/tmp/k.o") : !executor.session',
        '= executor.launch %s("decode", "/tmp/k.o")(%arg0) : !executor.session, (memref<8xi8>) -> memref<8xi8>',
        'executor.launch %s("tick", "/tmp/k.o")() : !executor.session, () -> ()',
        '%tok = executor.launch_async %s("spin", "/tmp/k.o") : !executor.session -> !executor.token',
        "executor.await %s, %tok : !executor.session",
        (
            'executor.call %s("fill", "/lib.so")(%arg0, %arg1) {num_input_args = 1 : i64} : !executor.session, '
            "(memref<8xi8>, !llvm.ptr) -> i32"
        ),
        '{num_input_args = 1 : i64} : !executor.session, (memref<8xi8>) -> ()',
        "executor.close %s : !executor.session",
    ):
        assert line in text, line


def test_executor_accessors():
    mem = memref.MemRefType(builtin.IntegerType(8), [8])
    ops = all_executor_ops(build_func([mem, PTR], lambda a: []).body.block.first_op.body.block.args)
    assert ops[0].address == StringAttr("decoder-host:9000")
    assert ops[0].endpoint() == Endpoint(host="decoder-host", port=9000)
    launch = ops[2]
    assert (launch.symbol.data, launch.object_file.data, len(launch.inputs), len(launch.outputs)) == (
        "decode", "/tmp/k.o", 1, 1)
    call = ops[6]
    assert (call.library.data, call.num_input_args.value.data, len(call.args)) == ("/lib.so", 1, 2)


@pytest.mark.parametrize("address", ["decoder-host", "host:0", "[::1]9000", "::1:9000", "bad_host!:80", ""])
def test_executor_open_rejects_what_endpoint_parse_rejects(address):
    with pytest.raises(PlacementError) as core:
        Endpoint.parse(address)
    assert verify_error(lambda a: [executor.OpenOp(address)]) == f"'executor.open' {core.value}"


def test_executor_call_num_input_args():
    def body(args):
        s = executor.OpenOp("localhost:1")
        return [s, executor.CallOp(s, "f", "/l.so", list(args), num_input_args=3)]

    assert verify_error(body) == (
        "'executor.call' num_input_args = 3 must be in [0, 2] (the number of operands after the session)"
    )


# -- bqec ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (4, 2), (5, 13), (8, 8), (12, 31)])
def test_tanner_matrix_round_trip(shape):
    rng = np.random.default_rng(sum(shape))
    h = rng.integers(0, 2, size=shape, dtype=np.uint8)
    attr = bqec.TannerAttr.from_matrix(h)
    assert (attr.num_checks, attr.num_bits) == shape
    assert attr.syndrome_bytes == (shape[0] + 7) // 8 and attr.correction_bytes == (shape[1] + 7) // 8
    np.testing.assert_array_equal(attr.matrix(), h)
    assert attr.matrix().shape == shape
    assert bqec.TannerAttr.from_matrix(h.astype(bool)) == attr


def test_tanner_text_form():
    attr = bqec.TannerAttr.from_matrix(STEANE_H)
    assert str(attr) == '#bqec.tanner<3x7, "787315">'
    assert attr.packed.data == np.packbits(np.array(STEANE_H, np.uint8).ravel(), bitorder="little").tobytes().hex()


@pytest.mark.parametrize(
    "args, message",
    [
        ((3, 7, "7873"), "#bqec.tanner<3x7> needs 6 hex digits (3 bytes), got 4"),
        ((3, 7, "7873f5"), "#bqec.tanner<3x7>: the unused high bits of the last byte must be 0"),
        ((3, 7, "78731G"), "#bqec.tanner data must be lowercase hex digits"),
        ((3, 7, "78731A"), "#bqec.tanner data must be lowercase hex digits"),
        ((0, 7, ""), "#bqec.tanner needs at least one row and one column, got 0x7"),
    ],
)
def test_tanner_verifier(args, message):
    with pytest.raises(VerifyException, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        bqec.TannerAttr(*args)


def test_tanner_from_matrix_rejects_non_binary():
    with pytest.raises(ValueError, match="only 0 and 1"):
        bqec.TannerAttr.from_matrix([[0, 2]])
    with pytest.raises(ValueError, match="2-D"):
        bqec.TannerAttr.from_matrix([0, 1])


def test_decode_op_built_in_python_print_and_reparse():
    tanner = bqec.TannerAttr.from_matrix(STEANE_H)

    def body(args):
        syn, corr = args
        return [bqec.DecodeOp(syn, corr, tanner, "x"), bqec.DecodeOp(syn, corr, tanner, "z", coprocessor="dec")]

    module = build_func([PTR, PTR], body)
    text = assert_round_trips(module)
    assert 'bqec.decode %arg0, %arg1 {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}' in text
    assert 'bqec.decode %arg0, %arg1 {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, ' in text
    ops = list(module.body.block.first_op.body.block.ops)
    assert (ops[0].decoder_id, ops[1].decoder_id) == (0, 1)
    assert ops[0].coprocessor is None and ops[1].coprocessor.data == "dec"
    assert ops[0].tanner == tanner


def test_decode_op_check_type():
    tanner = bqec.TannerAttr.from_matrix(STEANE_H)
    message = verify_error(lambda a: [bqec.DecodeOp(a[0], a[1], tanner, "y")], (PTR, PTR))
    assert message == "'bqec.decode' check_type must be \"x\" or \"z\", got 'y'"


def test_decode_op_parses_a_spaced_shape():
    module = parse(
        'func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {\n'
        '  bqec.decode %s, %c {check_type = "x", tanner = #bqec.tanner<3 x 7, "787315">}\n'
        "  func.return\n}"
    )
    assert '#bqec.tanner<3x7, "787315">' in show(module)
