"""The serialized forms of a placement: a dict and its canonical JSON text.

A placement checks only its own shape, so nothing here needs a plugin: transport and
decoder names are plain strings (``shm``, ``lookup``, ...) that no plugin has to serve.
(The compiler's IR attribute form is the compiler's, and tested there.)
"""

from __future__ import annotations

import json

import pytest

import backline_core._serialization as serialization
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._errors import PlacementError
from backline_core._placement import RUNS_IN, Controller, Coprocessor, Endpoint, Placement

FORMAT = "backline.placement/1"
#: 5,000 decimal digits: past Python's int <-> str conversion limit (4,300 digits).
HUGE = 10**4999
HUGE_TEXT = "9" * 5000


def echo(decoder_id: int, payload: bytes) -> bytes:
    """Module level, so it serializes as ``<this module>:echo``."""
    return payload


NATIVE = CoprocessorFunction(
    name="native", library="/opt/qec/libdec.so", symbol="bl_decode", decoder_ids=(1, 7),
    context=b"\x00\xff\x10", init_symbol="bl_init", fini_symbol="bl_fini",
)

# Quotes, backslashes, control characters, DEL and non-ASCII text.
AWKWARD = 'C:\\keys\\"id"\n\tend\x01\x7f é ✓'


def simple() -> Placement:
    return Placement(
        controller=Controller(),
        coprocessors=[Coprocessor(name="decoder", init_args={"slots": 64, "cpu": 2}, runs_in="thread",
                                  coprocessor_fn="lookup")],
        transport="shm",
        qec_code="steane",
    )


SIMPLE_JSON = (
    '{"controller":{"hardware":"cpu","name":"controller"},"coprocessors":[{"coprocessor_fn":"lookup",'
    '"hardware":"cpu","init_args":{"cpu":2,"slots":64},"name":"decoder","runs_in":"thread"}],'
    '"format":"backline.placement/1","qec_code":"steane","transport":"shm"}'
)


def full() -> Placement:
    """Every field away from its default."""
    return Placement(
        controller=Controller(
            name="ctl",
            remote=True,
            executor_options={"address": "10.0.0.2:7000", "user": "qec", "ssh_port": 2222, "identity_file": AWKWARD},
            init_args={"slots": 128, "timeout_ms": 2.5, "cpu": True, "mode": "fast\t\x7f é ✓",
                       "connect_timeout_ms": -1, "slot_bytes": 1e3},
            endpoint=Endpoint(host="ctl.lab.example", port=1),
        ),
        coprocessors=[
            Coprocessor(name="gpu0", hardware="gpu", endpoint=Endpoint(host="::1", port=65535), coprocessor_fn=echo,
                        runs_in="process"),
            Coprocessor(endpoint=Endpoint(host="10.0.0.3", port=9000), coprocessor_fn=NATIVE, runs_in="executor",
                        executor_options={"host": "10.0.0.3", "port": 7000, "python": "/usr/bin/python3",
                                          "secret_file": "/run/secret"}, init_args={"cpu": False}),
            Coprocessor(name="lut", endpoint=Endpoint(host="lut", port=9001), coprocessor_fn="lookup",
                        runs_in="controller-thread"),
            Coprocessor(name="default-place", coprocessor_fn="lookup"),
        ],
        transport="shm",
        qec_code="rotated-surface.d3",
    )


def minimal(**top) -> dict:
    """The smallest valid placement dict, with top-level fields replaced."""
    return {"format": FORMAT, "transport": "shm", "controller": {"name": "controller", "hardware": "cpu"}, **top}


def with_coprocessor(**fields) -> dict:
    return minimal(coprocessors=[{"name": "d", "hardware": "cpu", "coprocessor_fn": "lookup", **fields}])


def with_fn(**fn) -> dict:
    return with_coprocessor(coprocessor_fn={"name": "f", **fn})


def raises_placement_error(call, *words: str) -> str:
    """Run ``call``; it must raise PlacementError (nothing else) whose text holds ``words``."""
    try:
        call()
    except PlacementError as exc:
        message = str(exc)
    except BaseException as exc:  # noqa: BLE001 - the point: nothing but a PlacementError
        pytest.fail(f"expected a PlacementError, got {type(exc).__name__}: {str(exc)[:300]}")
    else:
        pytest.fail("expected a PlacementError, nothing was raised")
    for word in words:
        assert word in message, message
    return message


# -- canonical text ------------------------------------------------------------------------


def test_canonical_json_is_stable():
    assert simple().to_json() == SIMPLE_JSON
    assert serialization.placement_to_json(simple()) == SIMPLE_JSON


def test_canonical_json_is_sorted_and_compact():
    text = full().to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_canonical_json_does_not_depend_on_mapping_order():
    a = Placement(controller=Controller(init_args={"slots": 8, "cpu": 1, "mode": "x"},
                                        executor_options={"user": "u", "python": "p"}), transport="shm")
    b = Placement(controller=Controller(init_args={"mode": "x", "cpu": 1, "slots": 8},
                                        executor_options={"python": "p", "user": "u"}), transport="shm")
    assert a.to_json() == b.to_json()
    assert '"init_args":{"cpu":1,"mode":"x","slots":8}' in a.to_json()


def test_dict_keeps_field_order_of_the_model():
    """to_dict's order is the model's (format first), the JSON text's is sorted."""
    data = simple().to_dict()
    assert list(data) == ["format", "transport", "qec_code", "controller", "coprocessors"]
    assert list(data["coprocessors"][0]) == ["name", "hardware", "init_args", "runs_in", "coprocessor_fn"]


def test_defaults_are_omitted_but_identity_fields_are_written():
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="lookup")], transport="shm")
    assert p.to_dict() == {
        "format": FORMAT,
        "transport": "shm",
        "controller": {"name": "controller", "hardware": "cpu"},
        "coprocessors": [{"name": "coprocessor0", "hardware": "cpu", "coprocessor_fn": "lookup"}],
    }
    assert Placement(controller=Controller(), transport="shm").to_dict() == minimal()


def test_default_transport_is_written_and_omitted_transport_reads_as_memcpy():
    p = Placement(controller=Controller())
    assert p.to_dict()["transport"] == "memcpy"
    data = minimal()
    del data["transport"]
    assert Placement.from_dict(data) == p  # no plugin is consulted either way


def test_function_defaults_are_omitted():
    fn = CoprocessorFunction(name="f", library="/l.so", symbol="s")
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=fn)], transport="shm")
    assert p.to_dict()["coprocessors"][0]["coprocessor_fn"] == {"name": "f", "library": "/l.so", "symbol": "s"}


def test_function_records_are_written_as_objects():
    coprocessors = full().to_dict()["coprocessors"]
    assert coprocessors[0]["coprocessor_fn"] == {"name": "echo", "python": f"{__name__}:echo"}
    assert coprocessors[1]["coprocessor_fn"] == {
        "name": "native", "library": "/opt/qec/libdec.so", "symbol": "bl_decode", "decoder_ids": [1, 7],
        "context": "00ff10", "init_symbol": "bl_init", "fini_symbol": "bl_fini",
    }
    assert coprocessors[0]["endpoint"] == {"host": "::1", "port": 65535}
    controller = full().to_dict()["controller"]
    assert controller["remote"] is True
    assert controller["init_args"]["slot_bytes"] == 1000.0 and controller["init_args"]["connect_timeout_ms"] == -1


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [simple, full])
def test_json_round_trip(make):
    p = make()
    text = p.to_json()
    back = Placement.from_json(text)
    assert back == p
    assert back.to_json() == text
    assert serialization.placement_from_json(serialization.placement_to_json(p)) == p
    assert Placement.from_json(text.encode()) == p


@pytest.mark.parametrize("make", [simple, full])
def test_dict_round_trip(make):
    p = make()
    assert Placement.from_dict(p.to_dict()) == p
    assert serialization.placement_from_dict(serialization.placement_to_dict(p)) == p
    # The dict is JSON-ready: it survives a trip through the json module unchanged.
    assert json.loads(json.dumps(p.to_dict())) == p.to_dict()


def test_round_trip_keeps_every_node_field():
    back = Placement.from_json(full().to_json())
    ctl = back.controller
    assert (ctl.name, ctl.hardware, ctl.remote) == ("ctl", "cpu", True)
    assert ctl.endpoint == Endpoint(host="ctl.lab.example", port=1)
    assert dict(ctl.executor_options) == dict(full().controller.executor_options)
    assert back.qec_code == "rotated-surface.d3" and back.transport == "shm"
    assert [n.name for n in back.coprocessors] == ["gpu0", "coprocessor1", "lut", "default-place"]
    assert [n.hardware for n in back.coprocessors] == ["gpu", "cpu", "cpu", "cpu"]


@pytest.mark.parametrize("runs_in", [*RUNS_IN, None])
def test_runs_in_round_trips(runs_in):
    executor = {"address": "127.0.0.1:4000", "secret_file": "/s"} if runs_in == "executor" else {}
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="lookup", runs_in=runs_in,
                                                                     executor_options=executor)],
                  transport="shm")
    node = p.to_dict()["coprocessors"][0]
    if runs_in is None:
        assert "runs_in" not in node  # the default (the transport's) is omitted
    else:
        assert node["runs_in"] == runs_in
    for back in (Placement.from_json(p.to_json()), Placement.from_dict(p.to_dict())):
        assert back == p and back.coprocessors[0].runs_in == runs_in


def test_runs_in_is_part_of_the_text():
    texts = {Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="x", runs_in=r)],
                       transport="shm").to_json() for r in ("controller-thread", "thread", "process", None)}
    assert len(texts) == 4


def test_round_trip_keeps_value_types():
    back = Placement.from_json(full().to_json())
    args = back.controller.init_args
    assert type(args["slots"]) is int and type(args["timeout_ms"]) is float and type(args["cpu"]) is bool
    assert args["connect_timeout_ms"] == -1 and type(args["connect_timeout_ms"]) is int
    assert args["slot_bytes"] == 1000.0 and type(args["slot_bytes"]) is float
    assert type(back.controller.executor_options["ssh_port"]) is int
    assert back.controller.executor_options["identity_file"] == AWKWARD
    assert back.coprocessors[1].init_args["cpu"] is False


def test_round_trip_keeps_functions():
    back = Placement.from_json(full().to_json())
    gpu0, native, lut, _ = back.coprocessors
    assert gpu0.coprocessor_fn.python is echo and gpu0.coprocessor_fn.name == "echo"
    assert native.name == "coprocessor1"
    assert native.coprocessor_fn == NATIVE and native.coprocessor_fn.context == b"\x00\xff\x10"
    assert native.coprocessor_fn.decoder_ids == (1, 7)
    assert lut.coprocessor_fn == "lookup"
    assert gpu0.endpoint == Endpoint(host="::1", port=65535)


def test_round_trip_keeps_endpoints():
    back = Placement.from_dict(full().to_dict())
    assert [n.endpoint for n in back.coprocessors] == [
        Endpoint(host="::1", port=65535), Endpoint(host="10.0.0.3", port=9000), Endpoint(host="lut", port=9001), None,
    ]


@pytest.mark.parametrize("value", [1e16, 1e-05, -2.5, 0.1, 123456789.125, 0.0, -0.0, 1e308, 5e-324])
def test_floats_round_trip_exactly(value):
    p = Placement(controller=Controller(init_args={"timeout_ms": value}), transport="shm")
    for back in (Placement.from_json(p.to_json()), Placement.from_dict(p.to_dict())):
        assert repr(back.controller.init_args["timeout_ms"]) == repr(value)


@pytest.mark.parametrize("literal, value", [("1E3", 1000.0), ("2e+2", 200.0), ("-7", -7), ("0", 0), ("-0", 0),
                                            ("0.5", 0.5)])
def test_json_number_forms(literal, value):
    text = json.dumps(minimal()).replace('"hardware": "cpu"', f'"hardware": "cpu", "init_args": {{"t": {literal}}}')
    parsed = Placement.from_json(text).controller.init_args["t"]
    assert parsed == value and type(parsed) is type(value)


def test_strings_round_trip_through_json_escapes():
    text = full().to_json()
    assert "\n" not in text and "\t" not in text and "\x01" not in text  # escaped, not raw
    assert Placement.from_json(text).controller.executor_options["identity_file"] == AWKWARD


def test_to_dict_returns_a_fresh_dict():
    p = simple()
    data = p.to_dict()
    data["coprocessors"][0]["init_args"]["slots"] = 1
    data["controller"]["name"] = "x"
    assert p.coprocessors[0].init_args["slots"] == 64
    assert p.to_dict()["coprocessors"][0]["init_args"]["slots"] == 64
    assert p.to_dict()["controller"]["name"] == "controller"


def test_from_dict_does_not_change_its_input():
    data = full().to_dict()
    before = json.dumps(data, sort_keys=True)
    Placement.from_dict(data)
    assert json.dumps(data, sort_keys=True) == before


@pytest.mark.defect("init_args differing only in type (1/1.0/True, 0.0/-0.0) compared equal but gave other JSON")
def test_equal_placements_give_the_same_text():
    """The module promises "equal placements always give the same text" (and so one resolution).

    Python's ``1 == 1.0 == True`` and ``0.0 == -0.0`` must not make two placements whose
    JSON (and configuration strings: ``t=1`` / ``t=1.0``) differ compare equal.
    """
    for a, b in [(1, 1.0), (1, True), (0, False), (0.0, -0.0), (2, 2.0)]:
        pa = Placement(controller=Controller(init_args={"t": a}), transport="shm")
        pb = Placement(controller=Controller(init_args={"t": b}), transport="shm")
        if pa == pb:
            assert pa.to_json() == pb.to_json(), (a, b, pa.to_json(), pb.to_json())
            assert pa.controller.config_string() == pb.controller.config_string(), (a, b)


def test_unserializable_callable_says_why():
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=lambda d, b: b)], transport="shm")
    raises_placement_error(p.to_json, "module-level")
    raises_placement_error(p.to_dict, "module-level")

    def local(d, b):
        return b

    q = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=local)], transport="shm")
    raises_placement_error(q.to_json, "module-level", "module:qualname")


# -- format / version key -------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, words",
    [
        ("backline.placement/2", "cannot read"),
        ("backline.placement/0", "cannot read"),
        ("something-else", "not a backline placement"),
        (1, "not a backline placement"),
        (None, 'no "format" key'),
        (["backline.placement/1"], "not a backline placement"),
        ({"v": 1}, "not a backline placement"),
        pytest.param(HUGE, "not a backline placement", id="5000-digit-int",
                     marks=pytest.mark.defect("a 5,000-digit integer as the format key raised ValueError")),
    ],
)
def test_format_key_must_be_this_version(version, words):
    data = simple().to_dict()
    if version is None:
        del data["format"]
    else:
        data["format"] = version
    raises_placement_error(lambda: Placement.from_dict(data), words, FORMAT)
    if version is not HUGE:
        raises_placement_error(lambda: Placement.from_json(json.dumps(data)), words, FORMAT)


def test_format_key_is_written_first_and_always():
    for p in (simple(), full(), Placement(controller=Controller())):
        assert next(iter(p.to_dict())) == "format" and p.to_dict()["format"] == FORMAT
        assert json.loads(p.to_json())["format"] == FORMAT


# -- errors name where ------------------------------------------------------------------------


def _apply(path, value):
    data = full().to_dict()
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, words",
    [
        (("controller", "hardware"), 3, "controller.hardware must be a string, found integer 3"),
        (("coprocessors", 0, "hardware"), "tpu", "coprocessors[0]"),
        (("coprocessors", 0, "hardware"), "tpu", "'tpu' is unknown"),
        (("controller", "colour"), "red", "unknown field 'colour' in the controller at controller.colour"),
        (("controller", "colour"), "red", "known fields: name, hardware"),
        (("colour",), 1, "unknown field 'colour' in the placement at colour"),
        (("coprocessors", 2, "colour"), 1, "unknown field 'colour' in coprocessors[2] at coprocessors[2].colour"),
        (("controller", "runs_in"), "thread", "unknown field 'runs_in' in the controller at controller.runs_in"),
        (("controller", "coprocessor_fn"), "lookup", "unknown field 'coprocessor_fn'"),
        (("controller", "init_args", "slots"), [1], "controller.init_args.slots must be a string, number or boolean"),
        (("controller", "init_args", "slots"), {"a": 1}, "must be a string, number or boolean, found a dict"),
        (("controller", "init_args", "slots"), None, "must be a string, number or boolean, found null"),
        (("controller", "executor_options", "ssh_port"), 1.5, "controller.executor_options.ssh_port must be a string "
                                                               "or an integer, found float 1.5"),
        (("controller", "executor_options", "ssh_port"), True, "found boolean true"),
        (("controller", "remote"), "yes", "controller.remote must be true or false, found string 'yes'"),
        (("controller", "remote"), 1, "must be true or false, found integer 1"),
        (("controller", "name"), None, "controller.name must be a string, found null"),
        (("coprocessors",), {}, "coprocessors at coprocessors must be a list [...], found a dict"),
        (("coprocessors",), None, "must be a list [...], found null"),
        (("coprocessors", 0), "gpu0", "coprocessors[0] at coprocessors[0] must be an object, found string 'gpu0'"),
        (("controller",), "ctl", "the controller at controller must be an object"),
        (("controller",), None, "must be an object, found null"),
        (("controller",), _DELETE, "missing the field 'controller'"),
        (("coprocessors", 2, "coprocessor_fn"), _DELETE, "coprocessors[2] at coprocessors[2] is missing the field "
                                                          "'coprocessor_fn'"),
        (("coprocessors", 2, "coprocessor_fn"), 5, "coprocessors[2]: coprocessor_fn at "
                                                   "coprocessors[2].coprocessor_fn must be an object, found integer 5"),
        (("coprocessors", 2, "runs_in"), "inline", "coprocessors[2]"),
        (("coprocessors", 2, "runs_in"), "inline", "runs_in='inline' is not a place"),
        (("coprocessors", 2, "runs_in"), 3, "coprocessors[2].runs_in must be a string, found integer 3"),
        (("coprocessors", 2, "runs_in"), ["thread"], "coprocessors[2].runs_in must be a string, found a list"),
        (("coprocessors", 1, "coprocessor_fn", "context"), "zz", "coprocessors[1].coprocessor_fn.context must be a "
                                                                 "hex string"),
        (("coprocessors", 1, "coprocessor_fn", "decoder_ids"), [1, "2"],
         "decoder_ids item at coprocessors[1].coprocessor_fn.decoder_ids[1]"),
        (("coprocessors", 1, "coprocessor_fn", "decoder_ids"), 1, "decoder_ids at "
                                                                  "coprocessors[1].coprocessor_fn.decoder_ids must be"),
        (("coprocessors", 1, "coprocessor_fn", "decoder_ids"), [], "decoder_ids is empty"),
        (("coprocessors", 1, "coprocessor_fn", "decoder_ids"), [256], "must be an int in [0, 256)"),
        (("coprocessors", 1, "coprocessor_fn", "decoder_ids"), [1, 1], "repeat an id"),
        (("coprocessors", 1, "coprocessor_fn", "colour"), 1, "unknown field 'colour'"),
        (("coprocessors", 1, "coprocessor_fn", "library"), 3, "coprocessors[1].coprocessor_fn.library must be a "
                                                              "string, found integer 3"),
        (("coprocessors", 1, "coprocessor_fn", "name"), _DELETE, "missing the field 'name'"),
        (("coprocessors", 0, "coprocessor_fn", "python"), "nomodule_x:f", "cannot import"),
        (("coprocessors", 0, "coprocessor_fn", "python"), "nocolon", "module:qualname"),
        (("coprocessors", 0, "coprocessor_fn", "python"), "os:sep", "not callable"),
        (("coprocessors", 0, "endpoint", "port"), "9000", "coprocessors[0].endpoint.port must be an integer, found "
                                                          "string '9000'"),
        (("coprocessors", 0, "endpoint", "port"), 0, "1 to 65535"),
        (("coprocessors", 0, "endpoint", "port"), True, "must be an integer, found boolean true"),
        (("coprocessors", 0, "endpoint", "host"), _DELETE, "missing the field 'host'"),
        (("coprocessors", 0, "endpoint", "x"), 1, "unknown field 'x'"),
        (("coprocessors", 0, "endpoint"), "::1:9", "coprocessors[0]: endpoint at coprocessors[0].endpoint must be an "
                                                   "object"),
        (("transport",), None, "transport at transport must be a string, found null"),
        (("qec_code",), 3, "qec_code at qec_code must be a string, found integer 3"),
    ],
)
def test_bad_fields_are_refused_naming_the_path(path, value, words):
    data = _apply(path, value)
    raises_placement_error(lambda: Placement.from_dict(data), "invalid placement JSON", words)
    raises_placement_error(lambda: Placement.from_json(json.dumps(data)), words)


def test_placement_level_errors_surface_through_the_reader():
    data = simple().to_dict()
    data["coprocessors"][0]["name"] = "controller"
    raises_placement_error(lambda: Placement.from_dict(data), "used twice")
    data = minimal()
    data["controller"]["name"] = "-bad"
    raises_placement_error(lambda: Placement.from_dict(data), "controller at controller", "'-bad' is invalid")
    # Placement-level checks concern the whole input, so they carry no location.
    raises_placement_error(lambda: Placement.from_dict(minimal(transport="")), "transport must be the name")
    raises_placement_error(lambda: Placement.from_dict(minimal(qec_code="3d")), "qec_code '3d'")


def test_shape_is_all_that_reading_checks():
    """Unknown transport, decoder and init_args key read fine: plugins are resolve()'s business."""
    data = with_coprocessor(coprocessor_fn="no-such-decoder", init_args={"colour": "red"})
    data["transport"] = "carrier-pigeon"
    p = Placement.from_json(json.dumps(data))
    assert p.transport == "carrier-pigeon" and p.coprocessors[0].coprocessor_fn == "no-such-decoder"
    assert p.coprocessors[0].init_args == {"colour": "red"}


def test_json_null_means_default_for_optional_fields():
    data = simple().to_dict()
    data["qec_code"] = None
    data["controller"]["endpoint"] = None
    data["coprocessors"][0]["runs_in"] = None
    expected = Placement(controller=Controller(), transport="shm",
                         coprocessors=[Coprocessor(name="decoder", init_args={"slots": 64, "cpu": 2},
                                                   coprocessor_fn="lookup")])
    assert Placement.from_dict(data) == expected
    assert Placement.from_json(json.dumps(data)) == expected


@pytest.mark.defect("errors raised inside the JSON parser repeated 'invalid placement JSON:'")
@pytest.mark.parametrize(
    "text, words",
    [
        ("", "at offset 0"),
        ("   ", "at offset 3"),
        ('{"format": "backline.placement/1",', "at offset"),
        ('{"format": "backline.placement/1"} x', "at offset 35"),
        ("{'format': 1}", "at offset 1"),
        ('{"format": "backline.placement/1", "format": "backline.placement/1"}', "appears twice"),
        ('{"format": "backline.placement/1", "controller": {"name": "a", "name": "b"}}', "'name' appears twice"),
        ('{"format": "backline.placement/1", "transport": NaN}', "NaN is not a JSON number"),
        ('{"format": "backline.placement/1", "transport": Infinity}', "Infinity is not a JSON number"),
        ('{"format": "backline.placement/1", "transport": -Infinity}', "-Infinity is not a JSON number"),
        ("[]", "expected an object, found list"),
        ('"x"', "expected an object, found str"),
        ("null", "expected an object"),
        ("3", "expected an object, found int"),
    ],
)
def test_malformed_json_text(text, words):
    message = raises_placement_error(lambda: Placement.from_json(text), "invalid placement JSON", words)
    assert message.count("invalid placement JSON") == 1, f"the prefix is repeated: {message}"


def test_json_input_must_be_text_or_bytes():
    raises_placement_error(lambda: Placement.from_json(None), "str or bytes", "NoneType")
    raises_placement_error(lambda: Placement.from_json(5), "str or bytes", "int")
    raises_placement_error(lambda: Placement.from_json(simple().to_dict()), "str or bytes", "dict")
    assert Placement.from_json(bytearray(SIMPLE_JSON.encode())) == simple()


def test_json_bytes_must_be_unicode():
    raises_placement_error(lambda: Placement.from_json(b'{"format": "\xff"}'), "invalid placement JSON", "utf-8")


def test_from_dict_input_must_be_a_mapping():
    for value in (None, [], "{}", 3):
        raises_placement_error(lambda: Placement.from_dict(value), "expected an object")


def test_from_dict_rejects_non_json_values():
    data = simple().to_dict()
    data["qec_code"] = b"steane"
    raises_placement_error(lambda: Placement.from_dict(data), "only JSON types", "qec_code")
    data = simple().to_dict()
    data["controller"]["init_args"] = {"slots": object()}
    raises_placement_error(lambda: Placement.from_dict(data), "only JSON types", "controller.init_args.slots")
    data = simple().to_dict()
    data["coprocessors"][0]["init_args"]["slots"] = float("nan")
    raises_placement_error(lambda: Placement.from_dict(data), "finite")


def test_tuples_read_as_lists():
    data = simple().to_dict()
    data["coprocessors"] = tuple(data["coprocessors"])
    assert Placement.from_dict(data) == simple()


# -- reply_bits ---------------------------------------------------------------------------


def _with_reply_bits(bits: int | None) -> Placement:
    fn = CoprocessorFunction(name="native", library="/opt/qec/libdec.so", symbol="bl_decode", reply_bits=bits)
    return Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=fn)], transport="shm")


def test_reply_bits_round_trips():
    p = _with_reply_bits(23)
    assert p.to_dict()["coprocessors"][0]["coprocessor_fn"] == {
        "name": "native", "library": "/opt/qec/libdec.so", "symbol": "bl_decode", "reply_bits": 23,
    }
    for back in (Placement.from_json(p.to_json()), Placement.from_dict(p.to_dict())):
        assert back == p and back.coprocessors[0].coprocessor_fn.reply_bits == 23
    assert _with_reply_bits(23) != _with_reply_bits(24)


def test_reply_bits_is_left_out_when_unknown():
    p = _with_reply_bits(None)
    assert "reply_bits" not in p.to_dict()["coprocessors"][0]["coprocessor_fn"]
    assert "reply_bits" not in p.to_json()
    data = p.to_dict()
    data["coprocessors"][0]["coprocessor_fn"]["reply_bits"] = None  # JSON null: unknown
    assert Placement.from_dict(data) == p


@pytest.mark.parametrize(
    "value, words",
    [
        ("7", "coprocessors[0].coprocessor_fn.reply_bits must be an integer, found string '7'"),
        (0, "reply_bits=0 must be a positive int"),
        (-3, "reply_bits=-3 must be a positive int"),
        (True, "must be an integer, found boolean true"),
        (7.0, "must be an integer, found float 7.0"),
    ],
)
def test_reply_bits_must_be_a_positive_integer(value, words):
    data = _with_reply_bits(7).to_dict()
    data["coprocessors"][0]["coprocessor_fn"]["reply_bits"] = value
    raises_placement_error(lambda: Placement.from_dict(data), words)
    raises_placement_error(lambda: Placement.from_json(json.dumps(data)), words)


@pytest.mark.defect("a 5,000-digit reply_bits was accepted; repr() and to_json() then raised ValueError")
def test_huge_reply_bits_is_refused_not_left_to_break_printing_and_json():
    """No reply is 10**4999 bits wide; accepted, such a placement cannot be repr()'d or written."""
    raises_placement_error(
        lambda: CoprocessorFunction(name="native", library="/l.so", symbol="s", reply_bits=HUGE), "reply_bits")
    data = _with_reply_bits(7).to_dict()
    data["coprocessors"][0]["coprocessor_fn"]["reply_bits"] = HUGE
    raises_placement_error(lambda: Placement.from_dict(data), "reply_bits")


# -- pathological input: always a PlacementError --------------------------------------------


def test_from_json_none():
    raises_placement_error(lambda: Placement.from_json(None), "str or bytes")


@pytest.mark.parametrize("depth", [500, 100_000])
def test_deeply_nested_json_arrays(depth):
    raises_placement_error(lambda: Placement.from_json("[" * depth + "]" * depth), "invalid placement JSON")


@pytest.mark.parametrize("depth", [500, 100_000])
@pytest.mark.parametrize("field", ["qec_code", "transport", "coprocessors", "colour"])
def test_deeply_nested_json_objects_in_a_field(field, depth):
    deep = '{"a":' * depth + "1" + "}" * depth
    data = minimal()
    data.pop(field, None)
    text = json.dumps(data)[:-1] + f', "{field}": {deep}}}'
    message = raises_placement_error(lambda: Placement.from_json(text), "invalid placement JSON")
    if depth == 500 and field != "colour":
        assert "nested more than" in message and field in message


@pytest.mark.parametrize("depth", [500, 100_000])
def test_deeply_nested_json_in_init_args_and_functions(depth):
    deep = '{"a":' * depth + "1" + "}" * depth
    for fields in (f'"init_args": {deep}', f'"init_args": {{"slots": {deep}}}', f'"executor_options": {deep}',
                   f'"endpoint": {deep}'):
        text = json.dumps(minimal()).replace('"hardware": "cpu"', f'"hardware": "cpu", {fields}')
        raises_placement_error(lambda: Placement.from_json(text), "invalid placement JSON")
    text = json.dumps(with_coprocessor(coprocessor_fn="X")).replace('"X"', deep)
    raises_placement_error(lambda: Placement.from_json(text), "invalid placement JSON")


def test_nesting_limit_is_far_above_any_real_placement():
    """A placement is a few levels deep; the limit refuses abuse, not data."""
    assert serialization.MAX_DEPTH >= 8
    assert Placement.from_json(full().to_json()) == full()


def _nested_dict(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _nested_list(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [500, 100_000])
def test_from_dict_of_deeply_nested_python_values(depth):
    for make in (_nested_dict, _nested_list):
        deep = make(depth)
        for data in (minimal(qec_code=deep), minimal(coprocessors=deep), minimal(colour=deep),
                     minimal(controller={"init_args": deep}), minimal(controller={"init_args": {"slots": deep}}),
                     with_coprocessor(coprocessor_fn=deep)):
            raises_placement_error(lambda: Placement.from_dict(data), "invalid placement JSON")


def test_from_dict_of_a_self_referencing_dict():
    data = minimal()
    data["controller"]["init_args"] = data
    raises_placement_error(lambda: Placement.from_dict(data), "nested more than")
    loop: list = []
    loop.append(loop)
    raises_placement_error(lambda: Placement.from_dict(minimal(coprocessors=loop)), "nested more than")


@pytest.mark.defect("Endpoint.parse of a 5,000-digit port raised ValueError")
def test_huge_integer_as_a_port():
    raises_placement_error(lambda: Endpoint(host="h", port=HUGE), "Endpoint port", "1 to 65535")
    raises_placement_error(lambda: Endpoint.parse(f"h:{HUGE_TEXT}"), "1 to 65535")
    raises_placement_error(lambda: Controller(executor_options={"port": HUGE}), "executor_options['port']",
                           "1 to 65535")
    raises_placement_error(lambda: Controller(executor_options={"address": f"h:{HUGE_TEXT}"}),
                           "executor_options['address']")
    data = minimal()
    data["controller"]["endpoint"] = {"host": "h", "port": HUGE}
    raises_placement_error(lambda: Placement.from_dict(data), "controller", "1 to 65535")
    data = minimal()
    data["controller"]["executor_options"] = {"ssh_port": HUGE}
    raises_placement_error(lambda: Placement.from_dict(data), "ssh_port", "1 to 65535")


@pytest.mark.defect("a 5,000-digit init_args value gave a message naming no key, advising set_int_max_str_digits")
def test_huge_integer_as_an_init_args_value():
    message = raises_placement_error(lambda: Controller(init_args={"slots": HUGE}), "the controller", "'slots'")
    assert "set_int_max_str_digits" not in message, message  # advice about the interpreter helps no one here
    data = minimal()
    data["controller"]["init_args"] = {"slots": HUGE}
    raises_placement_error(lambda: Placement.from_dict(data), "controller", "'slots'")


@pytest.mark.defect("a 5,000-digit decoder_id raised ValueError while formatting its error")
def test_huge_integer_as_a_decoder_id():
    raises_placement_error(lambda: CoprocessorFunction(name="f", library="/l", symbol="s", decoder_ids=[HUGE]),
                           "decoder_id", "[0, 256)")


@pytest.mark.parametrize("where", ["port", "init_args", "decoder_ids", "format", "reply_bits", "ssh_port"])
def test_huge_integer_in_json_text(where):
    texts = {
        "port": with_coprocessor(endpoint={"host": "h", "port": "X"}),
        "init_args": minimal(controller={"init_args": {"slots": "X"}}),
        "decoder_ids": with_fn(library="/l", symbol="s", decoder_ids=["X"]),
        "format": {"format": "X"},
        "reply_bits": with_fn(library="/l", symbol="s", reply_bits="X"),
        "ssh_port": minimal(controller={"executor_options": {"ssh_port": "X"}}),
    }
    text = json.dumps(texts[where]).replace('"X"', HUGE_TEXT)
    raises_placement_error(lambda: Placement.from_json(text), "invalid placement JSON", "digits")
    raises_placement_error(lambda: Placement.from_json(text.replace(HUGE_TEXT, HUGE_TEXT + ".5")),
                           "invalid placement JSON")


@pytest.mark.parametrize("key", [1, 2.5, None, True, ("a",), b"name", pytest.param(
    HUGE, id="5000-digit-int", marks=pytest.mark.defect("a 5,000-digit non-str key raised ValueError"))])
def test_non_str_keys(key):
    raises_placement_error(lambda: Placement.from_dict({**minimal(), key: 1}), "not a string", "the top level")
    raises_placement_error(lambda: Placement.from_dict(minimal(controller={key: 1})), "not a string", "controller")
    raises_placement_error(lambda: Placement.from_dict(minimal(controller={"init_args": {key: 1}})), "not a string",
                           "controller.init_args")
    fn = {"name": "f", "library": "/l", "symbol": "s", key: 1}
    raises_placement_error(lambda: Placement.from_dict(with_coprocessor(coprocessor_fn=fn)), "not a string",
                           "coprocessors[0].coprocessor_fn")


def test_non_str_keys_of_node_mappings():
    raises_placement_error(lambda: Controller(init_args={3: 1}), "init_args key 3")
    raises_placement_error(lambda: Controller(executor_options={3: "x"}), "unknown executor_options")


@pytest.mark.defect("python='.x:f' raised TypeError from importlib")
def test_relative_import_path_is_a_placement_error():
    """A python= path such as '.x:f' (relative) cannot be imported: say so, do not raise TypeError."""
    data = with_fn(python=".relative:f")
    raises_placement_error(lambda: Placement.from_dict(data), "'.relative:f'")
    raises_placement_error(lambda: Placement.from_json(json.dumps(data)), "'.relative:f'")

