"""The two serialized forms of a placement: attribute text and JSON.

Runs with only the core installed: the transports and decoder it needs are registered
in process by the ``placement_plugins`` fixture (conftest.py) instead of coming from entry points.
"""

from __future__ import annotations

import json
import re

import pytest

import backline_core.plugins as plugins
import backline_core.serialization as serialization
from backline_core.coprocessor_function import CoprocessorFunction
from backline_core.errors import PlacementError, UnknownPluginError
from backline_core.placement import Controller, Coprocessor, Endpoint, Placement


pytestmark = pytest.mark.usefixtures("placement_plugins")


def echo(decoder_id: int, payload: bytes) -> bytes:
    """Module level, so it serializes as ``<this module>:echo``."""
    return payload


NATIVE = CoprocessorFunction(
    name="native", library="/opt/qec/libdec.so", symbol="bl_decode", decoder_ids=(1, 7),
    context=b"\x00\xff\x10", init_symbol="bl_init", fini_symbol="bl_fini",
)

# Every character class the string escaper handles.
AWKWARD = 'C:\\keys\\"id"\n\tend\x01\x7f é ✓'


def simple() -> Placement:
    return Placement(
        controller=Controller(),
        coprocessors=[Coprocessor(name="decoder", init_args={"slots": 64, "locality": "thread"},
                                  coprocessor_fn="lookup")],
        transport="shm",
        qec_code="steane",
    )


SIMPLE_TEXT = (
    '#transport.backline<transport = "shm", qec_code = "steane", '
    'controller = #transport.node<name = "controller", hardware = "cpu">, '
    'coprocessors = [#transport.node<name = "decoder", hardware = "cpu", '
    'init_args = {locality = "thread", slots = 64}, coprocessor_fn = "lookup">]>'
)


def full() -> Placement:
    """Every field away from its default, across both transports' needs."""
    return Placement(
        controller=Controller(
            name="ctl",
            remote=True,
            executor_options={"address": "10.0.0.2:7000", "user": "qec", "ssh_port": 2222, "identity_file": AWKWARD},
            init_args={"slots": 128, "timeout_ms": 2.5, "cpu": True, "locality": "process",
                       "connect_timeout_ms": -1, "slot_bytes": 1e3},
            endpoint=Endpoint(host="ctl.lab.example", port=1),
        ),
        coprocessors=[
            Coprocessor(name="gpu0", hardware="gpu", endpoint=Endpoint(host="::1", port=65535), coprocessor_fn=echo),
            Coprocessor(endpoint=Endpoint(host="10.0.0.3", port=9000), coprocessor_fn=NATIVE,
                        executor_options={"host": "10.0.0.3", "port": 7000, "python": "/usr/bin/python3",
                                          "token_file": "/run/token"}, init_args={"cpu": False}),
            Coprocessor(name="lut", endpoint=Endpoint(host="lut", port=9001), coprocessor_fn="lookup"),
        ],
        transport="shm",
        qec_code="rotated-surface.d3",
    )


# -- attribute text ------------------------------------------------------------------------


def test_canonical_text_is_stable():
    assert simple().to_attribute() == SIMPLE_TEXT
    assert serialization.placement_to_attribute(simple()) == SIMPLE_TEXT


def test_canonical_text_does_not_depend_on_mapping_order():
    a = Placement(controller=Controller(init_args={"slots": 8, "cpu": 1, "locality": "x"}), transport="shm")
    b = Placement(controller=Controller(init_args={"locality": "x", "cpu": 1, "slots": 8}), transport="shm")
    assert a.to_attribute() == b.to_attribute()
    assert "init_args = {cpu = 1, locality = \"x\", slots = 8}" in a.to_attribute()


def test_defaults_are_omitted_but_identity_fields_are_written():
    text = Placement(controller=Controller(), transport="shm").to_attribute()
    assert text == (
        '#transport.backline<transport = "shm", controller = #transport.node<name = "controller", hardware = "cpu">>'
    )


@pytest.mark.parametrize("make", [simple, full])
def test_attribute_round_trip(make):
    p = make()
    text = p.to_attribute()
    back = Placement.from_attribute(text)
    assert back == p
    assert back.to_attribute() == text
    assert serialization.placement_from_attribute(text) == p


def test_round_trip_keeps_value_types():
    back = Placement.from_attribute(full().to_attribute())
    args = back.controller.init_args
    assert type(args["slots"]) is int and type(args["timeout_ms"]) is float and type(args["cpu"]) is bool
    assert args["connect_timeout_ms"] == -1 and args["slot_bytes"] == 1000.0
    assert type(back.controller.executor_options["ssh_port"]) is int
    assert back.controller.executor_options["identity_file"] == AWKWARD


def test_round_trip_keeps_functions():
    back = Placement.from_attribute(full().to_attribute())
    gpu0, native, lut = back.coprocessors
    assert gpu0.coprocessor_fn.python is echo
    assert native.name == "coprocessor1"
    assert native.coprocessor_fn == NATIVE and native.coprocessor_fn.context == b"\x00\xff\x10"
    assert lut.coprocessor_fn == "lookup"
    assert gpu0.endpoint == Endpoint(host="::1", port=65535)


@pytest.mark.parametrize("value", [1e16, 1e-05, -2.5, 0.1, 123456789.125, 0.0, -0.0])
def test_floats_round_trip_through_repr(value):
    p = Placement(controller=Controller(init_args={"timeout_ms": value}), transport="shm")
    assert f"timeout_ms = {value!r}" in p.to_attribute()
    for back in (Placement.from_attribute(p.to_attribute()), Placement.from_json(p.to_json())):
        assert repr(back.controller.init_args["timeout_ms"]) == repr(value)


@pytest.mark.parametrize("literal, value", [("1E3", 1000.0), ("2e+2", 200.0), ("-7", -7), ("0", 0)])
def test_parser_reads_number_forms(literal, value):
    text = (
        '#transport.backline<transport = "shm", controller = #transport.node<'
        f"init_args = {{timeout_ms = {literal}}}>>"
    )
    parsed = Placement.from_attribute(text).controller.init_args["timeout_ms"]
    assert parsed == value and type(parsed) is type(value)


def test_function_records_are_written_as_fn_attributes():
    text = full().to_attribute()
    assert f'coprocessor_fn = #transport.fn<name = "echo", python = "{__name__}:echo">' in text
    assert (
        'coprocessor_fn = #transport.fn<name = "native", library = "/opt/qec/libdec.so", symbol = "bl_decode", '
        'decoder_ids = [1, 7], context = "00ff10", init_symbol = "bl_init", fini_symbol = "bl_fini">'
    ) in text
    assert 'endpoint = #transport.endpoint<host = "::1", port = 65535>' in text
    assert "remote = true" in text and "slot_bytes = 1000.0" in text and "connect_timeout_ms = -1" in text


def test_strings_are_escaped():
    text = full().to_attribute()
    assert 'identity_file = "C:\\\\keys\\\\\\"id\\"\\n\\tend\\01\\7F é ✓"' in text


def test_hex_escapes_decode_and_print_canonically():
    text = (
        '#transport.backline<transport = "shm", controller = #transport.node<name = "controller", hardware = "cpu", '
        'executor_options = {"user" = "a\\0Ab\\5c"}>>'
    )
    p = Placement.from_attribute(text)
    assert p.controller.executor_options["user"] == "a\nb\\"
    assert 'executor_options = {user = "a\\nb\\\\"}' in p.to_attribute()


def test_parser_accepts_whitespace_and_omitted_defaults():
    text = '  #transport.backline< controller=#transport.node<>,transport="shm"  >\n'
    p = Placement.from_attribute(text)
    assert p == Placement(controller=Controller(), transport="shm")


def test_omitted_transport_means_memcpy():
    text = "#transport.backline<controller = #transport.node<>>"
    try:
        plugins.get("transport", "memcpy")
    except UnknownPluginError:
        with pytest.raises(UnknownPluginError, match="'memcpy'"):
            Placement.from_attribute(text)
    else:  # the memcpy plugin is installed alongside the core
        assert Placement.from_attribute(text).transport == "memcpy"


VALID = SIMPLE_TEXT


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "expected a value"),
        ("   ", "expected a value"),
        ('#transport.backline<transport = "shm', "unterminated string"),
        (VALID[:-1], "expected ',' or '>'"),
        (VALID[:-1] + ', colour = "red">', "unknown field 'colour'"),
        (VALID.replace('transport = "shm"', 'transport = "shm", transport = "shm"'), "duplicate field 'transport'"),
        (VALID.replace('transport = "shm"', "transport = 3"), "must be a string, found integer 3"),
        (VALID.replace('hardware = "cpu">,', "hardware = true>,"), "must be a string, found boolean true"),
        (VALID + " x", "expected end of input"),
        (VALID + ">", "expected end of input"),
        (VALID.replace('"steane"', '"st\\qeane"'), "invalid escape"),
        (VALID.replace('"steane"', '"st\\4"'), "invalid escape"),
        (VALID.replace('"steane"', '"st\neane"'), "unescaped control character"),
        (VALID.replace('transport = "shm"', 'transport "shm"'), "expected '='"),
        (VALID.replace('hardware = "cpu">,', "hardware = cpu>,"), "expected a value"),
        (VALID.replace("slots = 64", "slots = @"), "unexpected character '@'"),
        (VALID.replace("slots = 64", "slots = -x"), "expected a digit"),
        (VALID.replace("slots = 64", "slots = 1.e3"), "expected a digit"),
        (VALID.replace("slots = 64", "slots = [64]"), "must be a string, number or boolean, found a list"),
        (VALID.replace("slots = 64", "slots = 64, slots = 32"), "duplicate key 'slots'"),
        (VALID.replace('">]>', '">,]>'), "expected a value"),
        (VALID.replace("controller = #transport.node<", "controller = #transport.nodes<"),
         "must be #transport.node<...>, found #transport.nodes<...>"),
        (VALID.replace("#transport.backline<", "#transport.placement<"), "must be #transport.backline<...>"),
        (VALID.replace("#transport.backline", "#"), "attribute name after '#'"),
        (VALID.replace(', coprocessor_fn = "lookup"', ""), "missing the field 'coprocessor_fn'"),
        (VALID.replace('hardware = "cpu">,', 'hardware = "cpu", coprocessor_fn = "lookup">,'),
         "unknown field 'coprocessor_fn'"),
        (VALID.replace('controller = #transport.node<name = "controller", hardware = "cpu">, ', ""),
         "missing the field 'controller'"),
        (VALID.replace("coprocessors = [", "coprocessors = ").replace('">]>', '">>'), "must be a list"),
        (VALID.replace("init_args = {", "init_args = {3 = 1, "), "expected a key name"),
        (VALID.replace("#transport.node<name", "#transport.node<\"name\" = \"x\", name"), "expected a field name"),
        (VALID.replace('hardware = "cpu">,', 'hardware = "tpu">,'), "'tpu' is unknown"),
        (VALID.replace('hardware = "cpu">,', 'hardware = "cpu", endpoint = #transport.endpoint<host = "h">>,'),
         "missing the field 'port'"),
        (VALID.replace('hardware = "cpu">,', 'hardware = "cpu", endpoint = #transport.endpoint<host = "h", port = 0>>,'),
         "1 to 65535"),
        (VALID.replace('coprocessor_fn = "lookup"', 'coprocessor_fn = #transport.fn<name = "f", library = "/l.so", '
                       'symbol = "s", context = "xyz">'), "hex string"),
        (VALID.replace('coprocessor_fn = "lookup"', 'coprocessor_fn = #transport.fn<name = "f", library = "/l.so", '
                       'symbol = "s", decoder_ids = [1, "2"]>'), "must be an integer"),
        (VALID.replace('coprocessor_fn = "lookup"', 'coprocessor_fn = #transport.fn<name = "f", python = "nomodule_x:f">'),
         "cannot import"),
        (VALID.replace('coprocessor_fn = "lookup"', 'coprocessor_fn = #transport.fn<name = "f", colour = 1>'),
         "unknown field 'colour'"),
        (VALID.replace('coprocessor_fn = "lookup"', "coprocessor_fn = 5"), "must be #transport.fn<...>"),
    ],
)
def test_malformed_attribute_text(text, words):
    with pytest.raises(PlacementError) as info:
        Placement.from_attribute(text)
    message = str(info.value)
    assert words in message
    assert re.search(r"at offset \d+", message), message


@pytest.mark.parametrize(
    "text, offset, found",
    [
        (VALID[:-1], len(VALID) - 1, "end of input"),
        (VALID + ", x", len(VALID), "','"),
        (VALID.replace('transport = "shm"', 'transport = "shm", colour = 1'), 39, None),
        ('#transport.backline<transport = "a\\q">', 34, None),
        ("", 0, "end of input"),
        ('#transport.backline<transport "shm">', 30, 'string "shm"'),
    ],
)
def test_error_offsets_point_at_the_problem(text, offset, found):
    with pytest.raises(PlacementError) as info:
        Placement.from_attribute(text)
    message = str(info.value)
    assert f"at offset {offset}" in message, message
    if found:
        assert message.endswith(f"found {found}"), message


def test_unknown_field_offset_is_the_key():
    text = VALID.replace('transport = "shm"', 'transport = "shm", colour = 1')
    with pytest.raises(PlacementError, match=f"at offset {text.index('colour')};"):
        Placement.from_attribute(text)


def test_placement_level_errors_surface_through_the_parser():
    with pytest.raises(UnknownPluginError, match="pip install"):
        Placement.from_attribute(VALID.replace('transport = "shm"', 'transport = "nope"'))
    with pytest.raises(PlacementError, match="used twice"):
        Placement.from_attribute(VALID.replace('name = "decoder"', 'name = "controller"'))
    with pytest.raises(PlacementError, match="needs a network endpoint"):
        Placement.from_attribute(VALID.replace('transport = "shm"', 'transport = "net"').replace(
            "init_args = {locality = \"thread\", slots = 64}, ", ""))


def test_attribute_input_must_be_text():
    with pytest.raises(PlacementError, match="str"):
        Placement.from_attribute(SIMPLE_TEXT.encode())


def test_unserializable_callable_says_why():
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=lambda d, b: b)], transport="shm")
    with pytest.raises(PlacementError, match="module-level"):
        p.to_attribute()
    with pytest.raises(PlacementError, match="module-level"):
        p.to_json()


# -- JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [simple, full])
def test_json_round_trip(make):
    p = make()
    text = p.to_json()
    back = Placement.from_json(text)
    assert back == p
    assert back.to_json() == text
    assert serialization.placement_from_json(serialization.placement_to_json(p)) == p
    assert Placement.from_dict(p.to_dict()) == p


def test_json_is_canonical_and_versioned():
    text = simple().to_json()
    data = json.loads(text)
    assert data["format"] == "backline.placement/1"
    assert text == json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert text == (
        '{"controller":{"hardware":"cpu","name":"controller"},"coprocessors":[{"coprocessor_fn":"lookup",'
        '"hardware":"cpu","init_args":{"locality":"thread","slots":64},"name":"decoder"}],'
        '"format":"backline.placement/1","qec_code":"steane","transport":"shm"}'
    )


def test_json_keeps_value_types_and_functions():
    back = Placement.from_json(full().to_json())
    args = back.controller.init_args
    assert type(args["slots"]) is int and type(args["timeout_ms"]) is float and type(args["cpu"]) is bool
    assert back.coprocessors[0].coprocessor_fn.python is echo
    assert back.coprocessors[1].coprocessor_fn.context == b"\x00\xff\x10"
    assert back.controller.executor_options["identity_file"] == AWKWARD


def test_to_dict_returns_a_fresh_dict():
    p = simple()
    data = p.to_dict()
    data["coprocessors"][0]["init_args"]["slots"] = 1
    assert p.coprocessors[0].init_args["slots"] == 64
    assert p.to_dict()["coprocessors"][0]["init_args"]["slots"] == 64


@pytest.mark.parametrize(
    "version, words",
    [
        ("backline.placement/2", "cannot read"),
        ("backline.placement/0", "cannot read"),
        ("something-else", "not a backline placement"),
        (1, "not a backline placement"),
        (None, "no \"format\" key"),
    ],
)
def test_json_rejects_other_format_versions(version, words):
    data = simple().to_dict()
    if version is None:
        del data["format"]
    else:
        data["format"] = version
    with pytest.raises(PlacementError) as info:
        Placement.from_json(json.dumps(data))
    message = str(info.value)
    assert words in message and "backline.placement/1" in message


def _edit(path, value):
    return (path, value)


def _apply(path, value):
    data = full().to_dict()
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    return data


@pytest.mark.parametrize(
    "data, words",
    [
        (_edit(("controller", "hardware"), 3), "controller.hardware must be a string, found integer 3"),
        (_edit(("coprocessors", 0, "hardware"), "tpu"), "coprocessors[0]"),
        (_edit(("controller", "colour"), "red"), "unknown field 'colour' in the controller at controller.colour"),
        (_edit(("colour",), 1), "unknown field 'colour'"),
        (_edit(("controller", "init_args", "slots"), [1]), "must be a string, number or boolean, found a list"),
        (_edit(("controller", "executor_options", "ssh_port"), 1.5), "must be a string or an integer"),
        (_edit(("controller", "remote"), "yes"), "must be true or false"),
        (_edit(("coprocessors",), {}), "must be a list"),
        (_edit(("controller",), "ctl"), "must be an object"),
        (_edit(("coprocessors", 1, "coprocessor_fn", "context"), "zz"), "hex string"),
        (_edit(("coprocessors", 0, "endpoint", "port"), "9000"), "must be an integer"),
        (_edit(("transport",), None), "must be a string, found null"),
    ],
)
def test_json_rejects_bad_fields_naming_the_path(data, words):
    with pytest.raises(PlacementError) as info:
        Placement.from_dict(_apply(*data))
    assert words in str(info.value)


def test_json_null_means_default_for_optional_fields():
    data = simple().to_dict()
    data["qec_code"] = None
    data["controller"]["endpoint"] = None
    assert Placement.from_dict(data) == Placement(
        controller=Controller(), coprocessors=simple().coprocessors, transport="shm"
    )


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "at offset 0"),
        ('{"format": "backline.placement/1",', "at offset"),
        ('{"format": "backline.placement/1", "format": "backline.placement/1"}', "appears twice"),
        ('{"format": "backline.placement/1", "transport": NaN}', "NaN is not a JSON number"),
        ("[]", "expected an object"),
    ],
)
def test_json_rejects_malformed_text(text, words):
    with pytest.raises(PlacementError) as info:
        Placement.from_json(text)
    assert words in str(info.value)


def test_from_dict_rejects_non_json_values():
    data = simple().to_dict()
    data["controller"]["init_args"] = {1: 2}
    with pytest.raises(PlacementError, match="not a string"):
        Placement.from_dict(data)
    data = simple().to_dict()
    data["qec_code"] = b"steane"
    with pytest.raises(PlacementError, match="only JSON types"):
        Placement.from_dict(data)


def test_both_forms_agree():
    p = full()
    assert Placement.from_json(p.to_json()).to_attribute() == p.to_attribute()
    assert Placement.from_attribute(p.to_attribute()).to_json() == p.to_json()


# -- reply_bits ---------------------------------------------------------------------------


def _with_reply_bits(bits: int | None) -> Placement:
    fn = CoprocessorFunction(name="native", library="/opt/qec/libdec.so", symbol="bl_decode", reply_bits=bits)
    return Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=fn)], transport="shm")


def test_reply_bits_round_trips_in_both_forms():
    p = _with_reply_bits(23)
    text = p.to_attribute()
    assert 'symbol = "bl_decode", reply_bits = 23>' in text
    assert Placement.from_attribute(text) == p and Placement.from_json(p.to_json()) == p
    assert Placement.from_attribute(text).coprocessors[0].coprocessor_fn.reply_bits == 23
    assert p.to_dict()["coprocessors"][0]["coprocessor_fn"]["reply_bits"] == 23


def test_reply_bits_is_left_out_when_unknown():
    p = _with_reply_bits(None)
    assert "reply_bits" not in p.to_attribute()
    assert "reply_bits" not in p.to_dict()["coprocessors"][0]["coprocessor_fn"]
    data = p.to_dict()
    data["coprocessors"][0]["coprocessor_fn"]["reply_bits"] = None  # JSON null: unknown
    assert Placement.from_dict(data) == p


@pytest.mark.parametrize(
    "value, words",
    [('"7"', "reply_bits at offset"), ("0", "reply_bits=0 must be a positive int"), ("true", "must be an integer")],
)
def test_reply_bits_must_be_a_positive_integer(value, words):
    text = _with_reply_bits(7).to_attribute().replace("reply_bits = 7", f"reply_bits = {value}")
    with pytest.raises(PlacementError) as info:
        Placement.from_attribute(text)
    assert words in str(info.value)
