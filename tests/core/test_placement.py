"""The placement model: shape validation, defaults, immutability, equality and hashing.

A placement checks only its own shape and consults no plugin, so nothing here registers
one: ``shm``, ``net`` and ``lookup`` are plain names. Whether installed plugins can run a
placement is :func:`backline_core._resolution.resolve`'s business (test_resolution.py).
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from backline_core._coprocessor_function import CoprocessorFunction
import backline_core._plugins as plugins
from backline_core._native import ffi, lib
from backline_core._errors import PlacementError
from backline_core._placement import RUNS_IN, Controller, Coprocessor, Endpoint, Node, Placement

KEY_MAX = lib.BL_KEY_MAX_LEN


def echo(decoder_id: int, payload: bytes) -> bytes:
    return payload


def shm(*coprocessors: Coprocessor, **kwargs) -> Placement:
    return Placement(controller=kwargs.pop("controller", Controller()), coprocessors=coprocessors, transport="shm", **kwargs)


def ep(port: int = 9000) -> Endpoint:
    return Endpoint(host="10.0.0.5", port=port)


# -- Endpoint ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host, text",
    [
        ("localhost", "localhost:9000"),
        ("decoder-1.lab.example.org", "decoder-1.lab.example.org:9000"),
        ("10.0.0.1", "10.0.0.1:9000"),
        ("::1", "[::1]:9000"),
        ("fe80::1%eth0", "[fe80::1%eth0]:9000"),
        ("a" * 63 + ".example", "a" * 63 + ".example:9000"),
    ],
)
def test_endpoint_accepts_ip_literals_and_host_names(host, text):
    endpoint = Endpoint(host=host, port=9000)
    assert str(endpoint) == text
    assert Endpoint.parse(text) == endpoint


@pytest.mark.parametrize(
    "host, words",
    [
        ("", "non-empty"),
        (5, "not a host"),
        ("-bad.example", "start or end with '-'"),
        ("bad-.example", "start or end with '-'"),
        ("a..b", "1 to 63"),
        ("a" * 64 + ".example", "1 to 63"),
        (".".join(["a" * 60] * 5), "at most 253"),
        ("under_score.example", "letters, digits and '-'"),
        ("10.0.0.256", "looks like an IPv4"),
        ("[::1]", "without brackets"),
    ],
)
def test_endpoint_rejects_bad_hosts(host, words):
    with pytest.raises(PlacementError, match="host") as info:
        Endpoint(host=host, port=1)
    assert words in str(info.value)


@pytest.mark.parametrize("port", [0, 65536, -1, True, "80", 80.0, None])
def test_endpoint_rejects_bad_ports(port):
    with pytest.raises(PlacementError, match="1 to 65535"):
        Endpoint(host="h", port=port)


def test_endpoint_port_bounds_are_inclusive():
    assert Endpoint(host="h", port=1).port == 1
    assert Endpoint(host="h", port=65535).port == 65535


@pytest.mark.parametrize(
    "text, words",
    [
        ("hostonly", "no port"),
        ("::1:80", "brackets"),
        ("h:x", "not a number"),
        ("h:", "not a number"),
        ("[::1]80", "[v6addr]:port"),
        ("[::1:80", "[v6addr]:port"),
        ("[host]:80", "[v6addr]:port"),
        ("h:0", "1 to 65535"),
    ],
)
def test_endpoint_parse_rejects_malformed_addresses(text, words):
    with pytest.raises(PlacementError) as info:
        Endpoint.parse(text)
    assert words in str(info.value)


def test_endpoint_is_frozen_and_hashable():
    endpoint = ep()
    with pytest.raises(dataclasses.FrozenInstanceError):
        endpoint.port = 1
    assert {ep(), ep()} == {endpoint}
    assert ep(1) != ep(2)


def test_endpoint_fields_are_keyword_only():
    with pytest.raises(TypeError):
        Endpoint("h", 1)


# -- Node ----------------------------------------------------------------------------------


def test_node_defaults():
    node = Controller()
    assert (node.name, node.hardware, node.remote, node.endpoint) == ("", "cpu", False, None)
    assert node.executor_options == {} and node.init_args == {}
    assert node.role == "controller" and not node.dispatched
    assert node.config_string() == ""


def test_node_base_cannot_be_built():
    with pytest.raises(PlacementError, match="Controller"):
        Node()


BAD_NAMES = ["-x", ".x", "_x", "a b", "x" * (KEY_MAX + 1), "dé", "a/b", "a\n", "abc\n", "\u0663", "a\x00b", "a;b",
             "a=b", "a:b"]
GOOD_NAMES = ["a", "A9", "9a", "0", "dec_0.gpu-1", "a-", "a.", "a_", "x" * KEY_MAX, "9" * KEY_MAX]


@pytest.mark.parametrize("name", [*BAD_NAMES, 3, None, b"x"])
def test_node_rejects_bad_names(name):
    for make in (lambda: Controller(name=name), lambda: Coprocessor(name=name, coprocessor_fn="lookup")):
        with pytest.raises(PlacementError, match="name") as info:
            make()
        assert f"1-{KEY_MAX} characters" in str(info.value)
        assert "starting with a letter or digit" in str(info.value)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_node_accepts_good_names(name):
    assert Controller(name=name).name == name
    assert Coprocessor(name=name, coprocessor_fn="lookup").name == name


def test_node_name_length_is_the_abi_key_limit():
    """Node names are session keys: BL_KEY_MAX_LEN of backline.h, read through cffi, not restated."""
    assert Controller(name="k" * KEY_MAX).name == "k" * KEY_MAX
    with pytest.raises(PlacementError, match=f"1-{KEY_MAX}"):
        Controller(name="k" * (KEY_MAX + 1))
    with pytest.raises(PlacementError):
        Coprocessor(name="k" * (KEY_MAX + 1), coprocessor_fn="lookup")


@pytest.mark.parametrize("name", [*BAD_NAMES, *GOOD_NAMES])
def test_node_names_follow_the_runtime_key_rule(stub_backend, name):
    """Python accepts a name exactly when the C runtime accepts it as a session key."""
    try:
        Controller(name=name)
        python_ok = True
    except PlacementError:
        python_ok = False
    key = ffi.new("char[]", name.encode())  # a NUL inside cuts the C string: it is the C key rule's view
    if "\0" in name:
        assert not python_ok
        return
    rc = lib.bl_config_check(stub_backend.path.encode(), lib.BL_CONTROLLER, key, b"", lib.BL_RUNS_ANY)
    assert python_ok == (rc == 0), (name, python_ok, rc)


def test_default_names_are_valid_keys():
    p = shm(*[Coprocessor(coprocessor_fn="lookup") for _ in range(12)])
    for node in p.nodes:
        assert Controller(name=node.name).name == node.name


def test_node_rejects_unknown_hardware_listing_allowed():
    with pytest.raises(PlacementError) as info:
        Controller(hardware="tpu")
    assert "'tpu'" in str(info.value)
    for hardware in ("cpu", "gpu", "fpga"):
        assert hardware in str(info.value)


def test_node_remote_must_be_bool():
    with pytest.raises(PlacementError, match="True or False"):
        Controller(remote=1, executor_options={"host": "h"})


def test_remote_needs_a_way_to_reach_the_machine():
    with pytest.raises(PlacementError) as info:
        Controller(remote=True)
    message = str(info.value)
    assert "nothing says how to reach the machine" in message
    assert "address" in message and "host" in message
    with pytest.raises(PlacementError, match="how to reach"):
        Controller(remote=True, executor_options={"user": "qec"})
    assert Controller(remote=True, executor_options={"address": "h:22"}).dispatched
    assert Controller(remote=True, executor_options={"host": "h"}).dispatched


def test_executor_options_alone_make_a_node_dispatched():
    assert Controller(executor_options={"python": "/usr/bin/python3"}).dispatched


def test_executor_options_accept_every_allowed_key():
    options = {"host": "h", "port": 7000, "user": "u", "ssh_port": 22, "identity_file": "/k",
               "python": "py", "secret_file": "/t", "executor": "orc", "triple": "x86_64-unknown-linux-gnu"}
    assert dict(Controller(executor_options=options).executor_options) == options


def test_executor_options_reject_unknown_keys_listing_allowed():
    with pytest.raises(PlacementError) as info:
        Controller(executor_options={"adress": "h:1"})
    message = str(info.value)
    assert "adress" in message
    for key in ("address", "host", "port", "user", "ssh_port", "identity_file", "python", "secret_file", "executor", "triple"):
        assert key in message


@pytest.mark.parametrize(
    "options, words",
    [
        ({"address": "nohost"}, "no port"),
        ({"address": "h:0"}, "1 to 65535"),
        ({"address": "bad_host:22"}, "host"),
        ({"address": "::1:22"}, "brackets"),
        ({"address": 22}, "not a str"),
        ({"host": "-h"}, "host"),
        ({"port": "22"}, "1 to 65535"),
        ({"ssh_port": 70000}, "1 to 65535"),
        ({"user": ""}, "non-empty str"),
        ({"identity_file": 3}, "non-empty str"),
        ({"address": "h:1", "port": 1}, "not both"),
    ],
)
def test_executor_options_reject_bad_values(options, words):
    with pytest.raises(PlacementError, match="executor_options") as info:
        Controller(executor_options=options)
    assert words in str(info.value)


def test_executor_options_address_with_host_names_the_machine():
    # an ssh forward: the controller dials the local end, the executor runs on host
    options = Controller(executor_options={"address": "127.0.0.1:4000", "host": "10.0.0.2"}).executor_options
    assert dict(options) == {"address": "127.0.0.1:4000", "host": "10.0.0.2"}


def test_executor_options_accept_ipv6_address():
    assert Controller(executor_options={"address": "[::1]:22"}).executor_options["address"] == "[::1]:22"


@pytest.mark.parametrize(
    "init_args, words",
    [
        ({"mode": None}, "str, int, float or bool"),
        ({"mode": [1]}, "str, int, float or bool"),
        ({"slots": float("nan")}, "finite"),
        ({"slots": float("inf")}, "finite"),
        ({"": 1}, "non-empty str"),
        ({3: 1}, "non-empty str"),
        ({"mode": "a;b"}, "';'"),
        ({"mode": "a=b"}, "'='"),
        ({"mode": ""}, "non-empty"),
    ],
)
def test_init_args_reject_bad_values(init_args, words):
    with pytest.raises(PlacementError, match="init_args") as info:
        Controller(init_args=init_args)
    assert words in str(info.value)


def test_mappings_must_be_mappings():
    with pytest.raises(PlacementError, match="mapping"):
        Controller(init_args=[("slots", 1)])


def test_config_string_is_sorted_and_renders_bools():
    node = Controller(init_args={"slots": 64, "mode": "thread", "cpu": True, "timeout_ms": 2.5})
    assert node.config_string() == "cpu=1;mode=thread;slots=64;timeout_ms=2.5"


def test_node_mappings_are_read_only_copies():
    source = {"slots": 64}
    node = Controller(init_args=source, executor_options={"host": "h"})
    source["slots"] = 1
    assert node.init_args["slots"] == 64
    with pytest.raises(TypeError):
        node.init_args["slots"] = 2
    with pytest.raises(TypeError):
        node.executor_options["host"] = "x"


def test_node_is_frozen():
    node = Controller()
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.name = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.init_args = {}


def test_node_equality_compares_contents_and_hash_agrees():
    a = Controller(name="c", init_args={"slots": 64, "mode": "thread"})
    b = Controller(name="c", init_args={"mode": "thread", "slots": 64})
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != Controller(name="c", init_args={"slots": 32, "mode": "thread"})
    assert a != Controller(name="c")
    assert Controller() != Coprocessor(coprocessor_fn="lookup")


def test_node_fields_are_keyword_only():
    with pytest.raises(TypeError):
        Controller("name")


def test_node_survives_copy_and_pickle():
    node = Coprocessor(name="d", init_args={"slots": 8}, executor_options={"host": "h"}, endpoint=ep(),
                       coprocessor_fn=echo)
    assert copy.deepcopy(node) == node
    assert pickle.loads(pickle.dumps(node)) == node


# -- Coprocessor ---------------------------------------------------------------------------


def test_coprocessor_wraps_a_callable():
    node = Coprocessor(coprocessor_fn=echo)
    assert node.role == "coprocessor"
    assert node.coprocessor_fn == CoprocessorFunction(name="echo", python=echo)
    assert node.coprocessor_fn.python is echo


def test_coprocessor_keeps_names_and_functions():
    fn = CoprocessorFunction(name="native", library="/x.so", symbol="fn")
    assert Coprocessor(coprocessor_fn=fn).coprocessor_fn is fn
    assert Coprocessor(coprocessor_fn="lookup").coprocessor_fn == "lookup"


def test_coprocessor_needs_a_function():
    with pytest.raises(TypeError, match="coprocessor_fn"):
        Coprocessor()


@pytest.mark.parametrize("fn, words", [("", "empty str"), (3, "neither"), (None, "neither"), (b"x", "neither")])
def test_coprocessor_rejects_bad_functions(fn, words):
    with pytest.raises(PlacementError, match="coprocessor_fn") as info:
        Coprocessor(coprocessor_fn=fn)
    assert words in str(info.value)


def test_coprocessor_validates_common_fields_too():
    with pytest.raises(PlacementError, match="hardware"):
        Coprocessor(hardware="tpu", coprocessor_fn=echo)


@pytest.mark.parametrize("runs_in", ["controller-thread", "thread", "process", None])
def test_runs_in_accepts_the_three_local_places_and_none(runs_in):
    assert Coprocessor(coprocessor_fn="lookup", runs_in=runs_in).runs_in == runs_in


EXECUTOR = {"address": "127.0.0.1:4000", "secret_file": "/tmp/s"}


def test_runs_in_executor_needs_an_executor():
    with pytest.raises(PlacementError, match="needs an executor"):
        Coprocessor(coprocessor_fn="lookup", runs_in="executor")
    assert Coprocessor(coprocessor_fn="lookup", runs_in="executor", executor_options=EXECUTOR).dispatched


def test_an_executor_node_cannot_say_it_runs_elsewhere():
    with pytest.raises(PlacementError, match="executor_options put it in an executor"):
        Coprocessor(coprocessor_fn="lookup", runs_in="thread", executor_options=EXECUTOR)


class _Handle:
    def placement_options(self):
        return dict(EXECUTOR, executor="orc")


def test_executor_handle_becomes_options_and_is_not_kept():
    node = Coprocessor(coprocessor_fn="lookup", executor=_Handle())
    assert dict(node.executor_options) == dict(EXECUTOR, executor="orc") and node.executor is None
    assert node == Coprocessor(coprocessor_fn="lookup", executor_options=dict(EXECUTOR, executor="orc"))


def test_executor_must_be_a_handle_and_not_given_twice():
    with pytest.raises(PlacementError, match="not an executor handle"):
        Coprocessor(coprocessor_fn="lookup", executor="127.0.0.1:4000")
    with pytest.raises(PlacementError, match="not both"):
        Coprocessor(coprocessor_fn="lookup", executor=_Handle(), executor_options=EXECUTOR)


def test_runs_in_places_are_the_abi_values():
    assert set(RUNS_IN) == {"controller-thread", "thread", "process", "executor"}
    assert dict(RUNS_IN) == {"controller-thread": lib.BL_RUNS_CONTROLLER_THREAD, "thread": lib.BL_RUNS_THREAD,
                             "process": lib.BL_RUNS_PROCESS, "executor": lib.BL_RUNS_PROCESS}


def test_runs_in_defaults_to_none():
    assert Coprocessor(coprocessor_fn="lookup").runs_in is None


@pytest.mark.defect("runs_in=[...] / {...} raised TypeError (unhashable) instead of PlacementError")
@pytest.mark.parametrize("runs_in", ["inline", "", "Thread", "process ", "anywhere", 1, 0, True, b"thread",
                                     ["thread"], ("thread",), {"thread"}, {"thread": 1}])
def test_runs_in_refuses_other_values_clearly(runs_in):
    with pytest.raises(PlacementError) as info:
        Coprocessor(name="dec", coprocessor_fn="lookup", runs_in=runs_in)
    message = str(info.value)
    assert "coprocessor 'dec'" in message and "runs_in=" in message
    for place in ("'controller-thread'", "'thread'", "'process'", "None"):
        assert place in message, message


def test_runs_in_is_a_coprocessor_field_only():
    with pytest.raises(TypeError, match="runs_in"):
        Controller(runs_in="thread")


def test_runs_in_is_part_of_equality_and_hash():
    a = Coprocessor(coprocessor_fn="lookup", runs_in="thread")
    assert a == Coprocessor(coprocessor_fn="lookup", runs_in="thread")
    assert hash(a) == hash(Coprocessor(coprocessor_fn="lookup", runs_in="thread"))
    assert a != Coprocessor(coprocessor_fn="lookup", runs_in="process")
    assert a != Coprocessor(coprocessor_fn="lookup")
    assert len({Coprocessor(coprocessor_fn="lookup", runs_in=r) for r in ("controller-thread", "thread", "process", None)}) == 4


# -- shape only: no plugin is consulted ---------------------------------------------------


@pytest.fixture
def no_plugin_lookups(monkeypatch):
    """Every registry lookup fails the test: building a placement must not make one."""
    registry = plugins.registry()

    def forbidden(*args, **kwargs):
        raise AssertionError(f"a placement consulted the plugin registry ({args}, {kwargs})")

    for method in ("get", "transport_backend", "transport_parts", "records", "available", "_load"):
        monkeypatch.setattr(registry, method, forbidden)
    for function in ("get", "transport_backend", "names", "listing"):
        monkeypatch.setattr(plugins, function, forbidden)


def test_placement_builds_without_any_plugin(no_plugin_lookups):
    p = Placement(
        controller=Controller(hardware="fpga", init_args={"colour": "red", "slots": 3}),
        coprocessors=[
            Coprocessor(name="a", hardware="gpu", coprocessor_fn="no-such-decoder", runs_in="controller-thread",
                        init_args={"no_such_key": 1, "timeout_ms": -5}),
            Coprocessor(name="b", coprocessor_fn=echo, runs_in="process"),
            Coprocessor(name="c", coprocessor_fn=CoprocessorFunction(name="n", library="/nonexistent.so",
                                                                     symbol="no_such_symbol")),
        ],
        transport="carrier-pigeon",
        qec_code="steane",
    )
    assert p.transport == "carrier-pigeon"
    assert p.coprocessor("a").coprocessor_fn == "no-such-decoder"
    assert p.controller.init_args == {"colour": "red", "slots": 3}  # values are the backend's to judge
    assert Placement.from_json(p.to_json()) == p
    assert Placement.from_dict(p.to_dict()) == p
    assert dataclasses.replace(p, transport="net") != p


def test_network_transport_names_need_no_endpoint_at_build(no_plugin_lookups):
    """Whether a transport needs endpoints is its record's to say, checked by resolve()."""
    p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="lookup")], transport="net")
    assert p.coprocessors[0].endpoint is None


# -- Placement -----------------------------------------------------------------------------


def test_placement_defaults():
    fields = {f.name: f for f in dataclasses.fields(Placement)}
    assert fields["transport"].default == "memcpy"
    assert fields["coprocessors"].default == ()
    assert fields["qec_code"].default is None
    p = shm()
    assert p.coprocessors == () and p.qec_code is None


def test_default_names_are_assigned_to_the_stored_nodes():
    p = shm(Coprocessor(coprocessor_fn=echo), Coprocessor(name="named", coprocessor_fn=echo),
            Coprocessor(coprocessor_fn=echo))
    assert [n.name for n in p.nodes] == ["controller", "coprocessor0", "named", "coprocessor2"]
    assert p.coprocessor("coprocessor2").coprocessor_fn.python is echo


def test_explicit_names_are_kept():
    p = shm(Coprocessor(name="dec", coprocessor_fn=echo), controller=Controller(name="ctl"))
    assert (p.controller.name, p.coprocessors[0].name) == ("ctl", "dec")


def test_default_and_explicit_names_are_equal():
    assert shm(Coprocessor(coprocessor_fn=echo)) == shm(
        Coprocessor(name="coprocessor0", coprocessor_fn=echo), controller=Controller(name="controller")
    )


@pytest.mark.parametrize(
    "controller, coprocessors",
    [
        (Controller(name="x"), [Coprocessor(name="x", coprocessor_fn=echo)]),
        (Controller(), [Coprocessor(name="d", coprocessor_fn=echo), Coprocessor(name="d", coprocessor_fn=echo)]),
        # A chosen name may collide with a default one.
        (Controller(), [Coprocessor(name="coprocessor1", coprocessor_fn=echo), Coprocessor(coprocessor_fn=echo)]),
        (Controller(), [Coprocessor(name="controller", coprocessor_fn=echo)]),
    ],
)
def test_node_names_must_be_unique(controller, coprocessors):
    with pytest.raises(PlacementError, match="used twice") as info:
        Placement(controller=controller, coprocessors=coprocessors, transport="shm")
    assert "unique" in str(info.value)


def test_coprocessors_are_stored_as_a_tuple():
    p = shm(controller=Controller())
    q = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=echo)], transport="shm")
    assert p.coprocessors == () and isinstance(q.coprocessors, tuple)


def test_controller_must_be_a_controller():
    with pytest.raises(PlacementError, match="Controller") as info:
        Placement(controller=Coprocessor(coprocessor_fn=echo), transport="shm")
    assert "Coprocessor" in str(info.value)
    with pytest.raises(PlacementError, match="Controller"):
        Placement(controller="controller", transport="shm")


def test_coprocessors_must_be_coprocessors():
    with pytest.raises(PlacementError, match=r"coprocessors\[1\]") as info:
        Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn=echo), Controller()],
                  transport="shm")
    assert "Controller" in str(info.value)


@pytest.mark.parametrize("coprocessors", [Coprocessor(coprocessor_fn=echo), "abc", 3, {Coprocessor(coprocessor_fn=echo)}])
def test_coprocessors_must_be_a_sequence(coprocessors):
    with pytest.raises(PlacementError, match="list"):
        Placement(controller=Controller(), coprocessors=coprocessors, transport="shm")


def test_type_errors_are_reported_whatever_the_transport():
    with pytest.raises(PlacementError, match="Controller"):
        Placement(controller=None, transport="no-such-transport")


@pytest.mark.parametrize("transport", ["", None, 3])
def test_transport_must_be_a_name(transport):
    with pytest.raises(PlacementError, match="transport"):
        Placement(controller=Controller(), transport=transport)


def test_endpoint_is_optional():
    assert shm(Coprocessor(endpoint=ep(), coprocessor_fn=echo)).coprocessors[0].endpoint == ep()
    assert shm(Coprocessor(coprocessor_fn=echo)).coprocessors[0].endpoint is None


@pytest.mark.parametrize("qec_code", [None, "steane", "surface_17", "rotated-surface.d3", "_x"])
def test_qec_code_accepts_identifiers(qec_code):
    assert shm(qec_code=qec_code).qec_code == qec_code


@pytest.mark.parametrize("qec_code", ["", "3d", "a b", "-x", 5, b"steane"])
def test_qec_code_rejects_non_identifiers(qec_code):
    with pytest.raises(PlacementError, match="qec_code"):
        shm(qec_code=qec_code)


def test_coprocessor_lookup():
    p = shm(Coprocessor(name="a", coprocessor_fn=echo), Coprocessor(name="b", coprocessor_fn="lookup"))
    assert p.coprocessor("b").coprocessor_fn == "lookup"
    with pytest.raises(PlacementError) as info:
        p.coprocessor("c")
    assert "'c'" in str(info.value) and "'a', 'b'" in str(info.value)
    with pytest.raises(PlacementError, match="controller"):
        p.coprocessor("controller")


def test_placement_carries_no_plugin_record():
    """The transport's record is resolve()'s (ResolvedNode.transport), not the placement's."""
    p = shm()
    assert not hasattr(p, "transport_record")
    assert {f.name for f in dataclasses.fields(Placement)} == {"controller", "coprocessors", "transport", "qec_code"}
    assert "library" not in repr(p)


def test_placement_equality_and_hashing():
    make = lambda fn, slots: shm(Coprocessor(init_args={"slots": slots}, coprocessor_fn=fn), qec_code="steane")  # noqa: E731
    assert make(echo, 64) == make(echo, 64)
    assert hash(make(echo, 64)) == hash(make(echo, 64))
    assert len({make(echo, 64), make(echo, 64), make("lookup", 64)}) == 2
    assert make(echo, 64) != make(echo, 32)
    assert make(echo, 64) != make("lookup", 64)
    assert shm(qec_code="a") != shm(qec_code="b")


def test_placement_is_frozen():
    p = shm()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.transport = "net"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.coprocessors = ()


def test_replace_revalidates():
    p = shm(Coprocessor(coprocessor_fn=echo))
    assert dataclasses.replace(p, qec_code="steane").qec_code == "steane"
    assert dataclasses.replace(p, transport="net").transport == "net"  # no plugin is asked
    with pytest.raises(PlacementError, match="qec_code"):
        dataclasses.replace(p, qec_code="3d")
    with pytest.raises(PlacementError, match="runs_in"):
        dataclasses.replace(p.coprocessors[0], runs_in="inline")


def test_placement_survives_copy_and_pickle():
    p = shm(Coprocessor(init_args={"slots": 8}, coprocessor_fn=echo, runs_in="process"),
            Coprocessor(coprocessor_fn="lookup", runs_in="controller-thread", endpoint=ep()),
            Coprocessor(coprocessor_fn=CoprocessorFunction(name="n", library="/x.so", symbol="fn", context=b"\x01",
                                                           reply_bits=7)),
            controller=Controller(name="ctl", executor_options={"host": "h"}, init_args={"cpu": True}),
            qec_code="steane")
    for other in (copy.copy(p), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert other == p and hash(other) == hash(p)
        assert other.to_json() == p.to_json()
        assert [n.runs_in for n in other.coprocessors] == ["process", "controller-thread", None]
        assert other.coprocessors[0].coprocessor_fn.python is echo
        with pytest.raises(TypeError):
            other.controller.init_args["cpu"] = False  # still read-only after the trip


def test_placement_fields_are_keyword_only():
    with pytest.raises(TypeError):
        Placement(Controller())
