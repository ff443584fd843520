"""The transport, executor, bqec and bquantum dialects: build, print, reparse, verify."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping

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
    EndpointAttr,
    FnAttr,
    NodeAttr,
    SessionType,
)
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, llvm, memref
from xdsl.dialects.builtin import ModuleOp, StringAttr, i32, i64
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from backline_core import CoprocessorFunction
from backline_core._errors import PlacementError
from backline_core._placement import Controller, Coprocessor, Endpoint, Placement

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


PLACEMENT = Placement(
    controller=Controller(),
    coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in="thread")],
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
                           config="cpu=1", runs_in="thread")
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
    assert str(BacklineAttr.from_placement(PLACEMENT)) in text
    assert ('transport.create {transport = "memcpy", backend_lib = "/d.so", key = "dec", config = "cpu=1", '
            'hardware = "cpu", runs_in = "thread"} : !transport.session<coprocessor>') in text


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
    assert str(attr) == (
        '#transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = ['
        '#transport.node<name = "dec", hardware = "cpu", coprocessor_fn = "steane", runs_in = "thread">], '
        'transport = "memcpy">'
    )
    assert attr.placement() == PLACEMENT
    assert attr.to_dict() == PLACEMENT.to_dict()
    assert BacklineAttr.from_dict(PLACEMENT.to_dict()) == attr
    # typed parameters, builtin attributes inside
    assert attr.transport == StringAttr("memcpy") and isinstance(attr.qec_code, builtin.NoneAttr)
    assert isinstance(attr.controller, NodeAttr) and attr.controller.node_name == StringAttr("controller")
    (dec,) = attr.coprocessors.data
    assert isinstance(dec, NodeAttr) and dec.runs_in == StringAttr("thread")
    assert dec.coprocessor_fn == StringAttr("steane") and dec.init_args == builtin.DictionaryAttr({})


RICH = Placement(
    controller=Controller(name="ctl", init_args={"slots": 8, "timeout_ms": 500}),
    coprocessors=[
        Coprocessor(name="a", coprocessor_fn="echo", executor_options={"python": 'py>3 "q" \\ {[ é', "port": 22}),
        Coprocessor(name="b", coprocessor_fn="steane", endpoint=Endpoint(host="::1", port=9000), runs_in="process",
                    init_args={"cpu": 3, "idle_spin_us": 5000, "ratio": 1e-05, "neg": -2, "flag": True}),
        Coprocessor(name="c", coprocessor_fn=CoprocessorFunction(
            name="f", library="/l.so", symbol="s", decoder_ids=(0, 2), context=b"\x00\xff", init_symbol="i",
            fini_symbol="x", reply_bits=9), runs_in="controller-thread"),
    ],
    qec_code="steane",
)


def test_backline_attr_round_trips_every_field():
    attr = BacklineAttr.from_placement(RICH)
    assert attr.placement() == RICH
    text = str(attr)
    for piece in ('executor_options = {port = 22, python = "py>3 \\22q\\22 \\\\ {[ \\C3\\A9"}',
                  "init_args = {cpu = 3, flag = true, idle_spin_us = 5000, neg = -2, ratio = 1.0e-05}",
                  'endpoint = #transport.endpoint<host = "::1", port = 9000>, coprocessor_fn = "steane"',
                  '#transport.fn<name = "f", library = "/l.so", symbol = "s", decoder_ids = [0, 2], context = "00ff", '
                  'init_symbol = "i", fini_symbol = "x", reply_bits = 9>'):
        assert piece in text, piece
    module = parse(f"module attributes {{catalyst.backline = {text}, other = 1 : i64}} {{}}")
    assert module.attributes["catalyst.backline"] == attr
    assert module.attributes["other"] == builtin.IntegerAttr(1, i64)
    assert show(module).startswith(f"builtin.module attributes {{catalyst.backline = {text}, other = 1 : i64}}")
    assert_round_trips(module)


def test_backline_attr_canonicalizes_a_valid_spelling():
    module = parse(
        'module attributes {p = #transport.backline<\n  coprocessors = [#transport.node<coprocessor_fn = "echo", '
        'init_args = {b = 1, a = 2}, remote = false>],\n  controller = #transport.node<>\n>} {}'
    )
    expected = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="echo",
                                                                            init_args={"a": 2, "b": 1})])
    assert module.attributes["p"] == BacklineAttr.from_placement(expected)
    assert str(module.attributes["p"]) == (
        '#transport.backline<controller = #transport.node<name = "controller", hardware = "cpu">, coprocessors = ['
        '#transport.node<name = "coprocessor0", hardware = "cpu", init_args = {a = 2, b = 1}, coprocessor_fn = "echo">], '
        'transport = "memcpy">'
    )


def test_backline_attr_verifies_shape_only():
    # No plugin is asked: an unknown transport, decoder or configuration key is resolution's business.
    text = ('#transport.backline<transport = "rdma", controller = #transport.node<>, coprocessors = ['
            '#transport.node<init_args = {colour = "blue"}, coprocessor_fn = "nope">]>')
    attr = parse(f"module attributes {{p = {text}}} {{}}").attributes["p"]
    assert attr.placement().transport == "rdma"


def core_message(data: dict) -> str:
    try:
        Placement.from_dict(data)
    except PlacementError as exc:
        return str(exc).replace("invalid placement JSON", "invalid #transport.backline placement")
    raise AssertionError("the core accepted the placement")


def _bad(**changes):
    data = PLACEMENT.to_dict()
    for path, value in changes.items():
        *outer, last = path.split("__")
        target = data
        for key in outer:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value
    return data


BAD_SHAPES = {
    "bad runs_in": _bad(coprocessors__0__runs_in="inline"),
    "duplicate name": _bad(coprocessors__0__name="controller"),
    "bad hardware": _bad(controller__hardware="tpu"),
    "bad qec_code": _bad(qec_code="7 codes"),
    "bad port": _bad(coprocessors__0__endpoint={"host": "h", "port": 70000}),
}


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_bad_placement_message_is_the_cores(case):
    data = BAD_SHAPES[case]
    expected = core_message(data)
    with pytest.raises(VerifyException) as built:
        BacklineAttr.from_dict(data)
    assert str(built.value) == expected
    text = _text(data)
    with pytest.raises(ParseError) as parsed:
        parse(f"module attributes {{catalyst.backline = {text}}} {{}}")
    assert str(parsed.value).rstrip().endswith(expected)


def _text(data: dict) -> str:
    """The attribute text of a placement dict, printed from its records (which do not verify a placement)."""
    parts = [f'transport = "{data["transport"]}"']
    if "qec_code" in data:
        parts.append(f'qec_code = "{data["qec_code"]}"')
    parts.append(f"controller = {NodeAttr.from_dict(data['controller'])}")
    if data.get("coprocessors"):
        parts.append(f"coprocessors = [{', '.join(str(NodeAttr.from_dict(n)) for n in data['coprocessors'])}]")
    return f"#transport.backline<{', '.join(parts)}>"


NESTED = "[" * 500 + "]" * 500
PATHOLOGICAL = {
    "nested brackets in a value": (f"#transport.backline<controller = #transport.node<init_args = {{a = {NESTED}}}>>",
                                   "init_args['a'] must be a string, an integer, a float or a boolean"),
    "nested brackets for the coprocessors": (f"#transport.backline<coprocessors = {NESTED}>",
                                             "coprocessors item must be a #transport.node<...>"),
    "nested records": ("#transport.backline<controller = " + "#transport.node<" * 500 + ">" * 501,
                       "expected a field of #transport.node"),
    "nested dicts": ("#transport.backline<controller = #transport.node<init_args = " + "{a = " * 500 + "1"
                     + "}" * 500 + ">>", "init_args['a'] must be a string, an integer, a float or a boolean"),
    "5,000-digit init_args value": ("#transport.backline<controller = #transport.node<init_args = {slots = "
                                    + "9" * 5000 + "}>>", "the integer literal is too long (it must fit in 64 bits)"),
    "5,000-digit port": ('#transport.backline<controller = #transport.node<>, coprocessors = [#transport.node<'
                         'coprocessor_fn = "echo", endpoint = #transport.endpoint<host = "h", port = ' + "1" * 5000
                         + ">>]>", "#transport.endpoint port: the integer literal is too long"),
    "5,000-digit decoder id": ('#transport.backline<controller = #transport.node<>, coprocessors = [#transport.node<'
                               'coprocessor_fn = #transport.fn<name = "f", decoder_ids = [' + "3" * 5000 + "]>>]>",
                               "decoder_ids item: the integer literal is too long"),
    "20-digit integer": ("#transport.backline<controller = #transport.node<init_args = {slots = "
                         + "9" * 20 + "}>>", "the integer literal is too long (it must fit in 64 bits)"),
    "unterminated": ('#transport.backline<transport = "memcpy", controller = #transport.node<name = "controller"',
                     "Expected ',' or '>' after #transport.node field 'name'"),
    "unknown field": ('#transport.backline<controller = #transport.node<colour = 1>>',
                      "#transport.node has no field 'colour'; its fields: name, hardware, remote"),
    "field twice": ('#transport.backline<controller = #transport.node<>, controller = #transport.node<>>',
                    "#transport.backline field 'controller' is given twice"),
    "missing controller": ("#transport.backline<>", "#transport.backline needs the field 'controller'"),
    "wrong record": ('#transport.backline<controller = #transport.fn<name = "f">>',
                     "#transport.backline controller must be a #transport.node<...>"),
    "typed integer": ("#transport.backline<controller = #transport.node<init_args = {slots = 8 : i32}>>",
                      "'}' expected in #transport.node init_args"),
}


@pytest.mark.defect("placement parsers: 500 nested brackets were a RecursionError, a 5,000-digit integer a ValueError")
@pytest.mark.parametrize("case", sorted(PATHOLOGICAL))
def test_malformed_backline_attr_is_a_clear_parse_error(case):
    text, message = PATHOLOGICAL[case]
    with pytest.raises(ParseError) as info:
        parse(f"module attributes {{p = {text}}} {{}}")
    assert message in str(info.value)


def test_records_parse_on_their_own():
    module = parse('module attributes {e = #transport.endpoint<port = 1, host = "h">, '
                   'f = #transport.fn<name = "f", python = "operator:neg">} {}')
    assert module.attributes["e"] == EndpointAttr(host=StringAttr("h"), port=builtin.IntegerAttr(1, i64))
    assert module.attributes["f"].to_dict() == {"name": "f", "python": "operator:neg"}
    assert isinstance(module.attributes["f"], FnAttr)


def test_records_build_from_plain_values():
    attr = BacklineAttr(controller=NodeAttr(name="c"), coprocessors=[
        NodeAttr(name="d", runs_in="thread", init_args={"slots": 8, "flag": True}, coprocessor_fn="echo",
                 endpoint={"host": "h", "port": 9})])
    assert attr.placement() == Placement(controller=Controller(name="c"), coprocessors=[
        Coprocessor(name="d", runs_in="thread", init_args={"slots": 8, "flag": True}, coprocessor_fn="echo",
                    endpoint=Endpoint(host="h", port=9))])
    with pytest.raises(VerifyException, match=r"init_args\['a'\]: None has no #transport.backline form"):
        NodeAttr(name="x", init_args={"a": None})
    with pytest.raises(TypeError, match=r"NodeAttr has no fields \['colour'\]"):
        NodeAttr(colour="blue")


def _model_fields(*classes: type) -> list[str]:
    names: list[str] = []
    for cls in classes:
        names += [f.name for f in dataclasses.fields(cls) if f.init and f.compare and not f.name.startswith("_")
                  and f.name not in names]
    return names


def test_record_fields_are_the_core_dataclass_fields():
    for attr, classes in ((BacklineAttr, [Placement]), (NodeAttr, [Controller, Coprocessor]),
                          (EndpointAttr, [Endpoint]), (FnAttr, [CoprocessorFunction])):
        assert [f.name for f in attr.FIELDS] == _model_fields(*classes), attr
    required = {attr.name: [f.name for f in attr.FIELDS if f.default is None]
                for attr in (BacklineAttr, NodeAttr, EndpointAttr, FnAttr)}
    # coprocessor_fn is required of a coprocessor only: the core's check says so, not the record
    assert required == {"transport.backline": ["controller"], "transport.node": [],
                        "transport.endpoint": ["host", "port"], "transport.fn": ["name"]}
    assert [f.name for f in NodeAttr.FIELDS if f.always] == ["hardware"]
    assert [f.name for f in BacklineAttr.FIELDS if f.always] == ["transport"]


def test_a_field_added_to_a_core_dataclass_needs_no_dialect_change():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Weighted(Endpoint):
        weight: int = 1
        labels: Mapping[str, str | int] = dataclasses.field(default_factory=dict)
        note: str | None = None

    attr = transport._record(transport._Record, "WeightedAttr", "transport.weighted_test", "a test record",
                             [Weighted], [])
    assert [f.name for f in attr.FIELDS] == ["host", "port", "weight", "labels", "note"]
    value = attr(host="h", port=1, weight=3, labels={"b": 2, "a": "x"})
    assert str(value) == '#transport.weighted_test<host = "h", port = 1, weight = 3, labels = {a = "x", b = 2}>'
    assert value.to_dict() == {"host": "h", "port": 1, "weight": 3, "labels": {"a": "x", "b": 2}}
    assert attr.from_dict(value.to_dict()) == value
    assert str(attr(host="h", port=1)) == '#transport.weighted_test<host = "h", port = 1>'  # defaults left out


def test_a_field_type_without_a_value_kind_is_an_error_at_definition():
    @dataclasses.dataclass(frozen=True)
    class Odd:
        ids: frozenset[int] = frozenset()

    with pytest.raises(TypeError, match=r"Odd.ids: the placement attributes have no value kind for the type"):
        transport._record(transport._Record, "OddAttr", "transport.odd_test", "a test record", [Odd], [])


def test_transport_create_runs_in():
    create = transport.CreateOp("coprocessor", transport="memcpy", backend_lib="/x.so", key="k", runs_in="process")
    assert create.runs_in == StringAttr("process")
    assert transport.CreateOp("controller", transport="memcpy", backend_lib="/x.so", key="k").runs_in is None

    def body(args):
        return [transport.CreateOp("controller", transport="memcpy", backend_lib="/x.so", key="k", runs_in="inline")]

    assert verify_error(body) == (
        "'transport.create' runs_in 'inline' is not a place; use one of controller-thread, thread, process, executor"
    )


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
