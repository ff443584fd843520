"""resolve(): the one place a placement is checked against the installed plugins.

Runs with only the core installed. Transports are registered in process: the
``placement_plugins`` fixture's ``shm``/``net`` (fake library paths: resolution stops
before it loads them), and this module's ``loop``, ``inline``, ``loopnet`` and ``split``,
whose library is the real compiled test backend of conftest.py (``stub_backend``), so
configuration keys and values are judged by ``bl_config_check`` itself.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest

import backline_core
import backline_core._plugins as plugins
from backline_core._builtins import echo as builtin_echo
from backline_core._builtins import steane as builtin_steane
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._errors import PlacementError, PluginError, UnknownPluginError
from backline_core._hookspecs import Decoder, Executor, Transport, hookimpl
from backline_core._abi import get_library
from backline_core._placement import Controller, Coprocessor, Endpoint, Placement
from backline_core._resolution import Resolution, ResolvedNode, resolve


def echo(decoder_id: int, payload: bytes) -> bytes:
    """Module level: another process can import it as ``<this module>:echo``."""
    return payload


def needs_matrices(hx, hz, *, weight=1):
    raise AssertionError("never built: resolve() only sees that it needs hx and hz")


class ResolutionPlugins:
    """Transports on the real test backend, and decoders with awkward builds."""

    def __init__(self, library: str) -> None:
        self.library = library

    @hookimpl
    def backline_transports(self):
        lib = self.library
        return [
            Transport(name="loop", summary="test backend", library=lambda h, r: lib, distribution="dist-a",
                      serves=(("cpu", "controller"), ("cpu", "coprocessor"), ("gpu", "coprocessor")),
                      runs_in=("thread", "controller-thread", "process")),
            Transport(name="loopx", summary="test backend with executors", library=lambda h, r: lib,
                      serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("thread", "executor"),
                      distribution="dist-a"),
            Transport(name="inline", summary="test backend, one place", library=lambda h, r: lib,
                      serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("controller-thread",),
                      distribution="dist-a"),
            Transport(name="loopnet", summary="test backend, network", library=lambda h, r: lib,
                      serves=(("cpu", "controller"), ("cpu", "coprocessor")), needs_endpoint=True,
                      distribution="dist-a"),
            # One transport name served by two distributions' parts.
            Transport(name="split", summary="cpu part", library=lambda h, r: lib, distribution="dist-a",
                      serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("thread",)),
            Transport(name="split", summary="fpga part", library=lambda h, r: lib, distribution="dist-b",
                      serves=(("fpga", "controller"),), runs_in=("process",)),
            Transport(name="gone", summary="library missing", library=lambda h, r: "/nonexistent/libgone.so",
                      serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("thread",)),
        ]

    @hookimpl
    def backline_decoders(self):
        return [
            Decoder(name="needs-matrices", summary="needs hx, hz", build=needs_matrices),
            Decoder(name="gpu-only", summary="gpu", build=builtin_echo, hardware=("gpu",)),
            Decoder(name="gpu-or-fpga", summary="gpu", build=builtin_echo, hardware=("gpu", "fpga")),
            Decoder(name="with-defaults", summary="defaults", build=lambda distance=3: builtin_steane()),
            Decoder(name="fails-to-build", summary="raises", build=self._raise),
            Decoder(name="builds-garbage", summary="not a function", build=lambda: "garbage",
                    distribution="dist-g"),
            Decoder(name="missing-library", summary="no .so", build=lambda: CoprocessorFunction(
                name="missing-library", library="/nonexistent/libdec.so", symbol="decode")),
        ]

    @staticmethod
    def _raise():
        raise RuntimeError("no GPU found")


@pytest.fixture
def backend_plugins(stub_backend):
    plugin = ResolutionPlugins(stub_backend.path)
    plugins.register(plugin)
    try:
        yield plugin
    finally:
        plugins.unregister(plugin)


def place(*coprocessors: Coprocessor, transport: str = "loop", controller: Controller | None = None,
          **kwargs) -> Placement:
    return Placement(controller=controller or Controller(), coprocessors=coprocessors, transport=transport, **kwargs)


def dec(**kwargs) -> Coprocessor:
    kwargs.setdefault("coprocessor_fn", "echo")
    return Coprocessor(name="dec", **kwargs)


def refused(placement: Placement, *words: str, error: type[Exception] = PlacementError) -> str:
    with pytest.raises(error) as info:
        resolve(placement)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return message


# -- transports -----------------------------------------------------------------------------


@pytest.mark.usefixtures("placement_plugins", "backend_plugins")
def test_unknown_transport_lists_installed_ones():
    with pytest.raises(UnknownPluginError) as info:
        resolve(place(dec(), transport="carrier-pigeon"))
    message = str(info.value)
    assert "carrier-pigeon" in message
    for name in ("shm", "net", "loop", "split"):
        assert f"  {name} (" in message, message
    assert "dist-a" in message and "(registered in process)" in message
    assert "pip install backline-transport-carrier-pigeon" in message
    assert isinstance(info.value, LookupError)


@pytest.mark.usefixtures("placement_plugins")
def test_transport_must_serve_the_controller():
    message = refused(place(controller=Controller(hardware="gpu"), transport="shm"),
                      "controller 'controller'", "'shm'", "gpu/controller")
    assert "cpu/controller, cpu/coprocessor, gpu/coprocessor" in message
    assert "(registered in process)" in message


@pytest.mark.usefixtures("placement_plugins")
def test_transport_must_serve_each_coprocessor():
    refused(place(Coprocessor(hardware="fpga", coprocessor_fn="lookup"), transport="shm"),
            "coprocessor 'coprocessor0'", "'shm'", "fpga/coprocessor",
            "cpu/controller, cpu/coprocessor, gpu/coprocessor")


@pytest.mark.usefixtures("backend_plugins")
def test_not_served_names_the_node_that_is_not():
    message = refused(place(Coprocessor(coprocessor_fn="echo"), Coprocessor(hardware="fpga", coprocessor_fn="echo"),
                            transport="loop"), "coprocessor 'coprocessor1'", "fpga/coprocessor")
    assert "'coprocessor0'" not in message


@pytest.mark.usefixtures("backend_plugins")
def test_not_served_lists_what_each_distributions_part_serves():
    message = refused(place(dec(hardware="gpu"), transport="split"), "coprocessor 'dec'", "'split'",
                      "gpu/coprocessor")
    assert "dist-a: serves cpu/controller, cpu/coprocessor" in message
    assert "dist-b: serves fpga/controller" in message
    refused(place(controller=Controller(hardware="gpu"), transport="split"), "controller 'controller'",
            "gpu/controller", "dist-a", "dist-b")


@pytest.mark.usefixtures("backend_plugins")
def test_each_node_resolves_to_the_part_that_serves_it():
    r = resolve(place(dec(), controller=Controller(hardware="fpga"), transport="split"))
    assert r.controller.transport.distribution == "dist-b" and r.controller.transport.summary == "fpga part"
    assert r.coprocessor("dec").transport.distribution == "dist-a"
    # runs_in defaults to the coprocessor's own part's first place.
    assert r.coprocessor("dec").runs_in == "thread"


@pytest.mark.usefixtures("backend_plugins")
def test_runs_in_must_be_supported_by_the_transport():
    message = refused(place(dec(runs_in="thread"), transport="inline"), "coprocessor 'dec'", "'inline'",
                      "dist-a", "controller-thread", "not 'thread'")
    assert "another transport" in message
    refused(place(dec(runs_in="process"), transport="inline"), "not 'process'")


@pytest.mark.usefixtures("placement_plugins")
def test_runs_in_is_checked_against_a_fake_library_transport_too():
    refused(place(Coprocessor(name="d", coprocessor_fn="lookup", runs_in="thread"), transport="shm"),
            "coprocessor 'd'", "runs coprocessors in process, not 'thread'")


@pytest.mark.usefixtures("placement_plugins")
def test_network_transport_needs_coprocessor_endpoints():
    refused(place(Coprocessor(coprocessor_fn="lookup"), transport="net"),
            "transport 'net' needs a network endpoint on each coprocessor", "endpoint=Endpoint(host=..., port=...)",
            "'coprocessor0'")


@pytest.mark.usefixtures("backend_plugins")
def test_missing_endpoint_names_the_node_that_lacks_one():
    p = place(Coprocessor(endpoint=Endpoint(host="10.0.0.5", port=9000), coprocessor_fn="echo"),
              Coprocessor(coprocessor_fn="echo"), transport="loopnet")
    message = refused(p, "transport 'loopnet' needs a network endpoint", "(coprocessor 'coprocessor1' has none)")
    assert "'coprocessor0'" not in message


@pytest.mark.usefixtures("backend_plugins")
def test_endpoints_satisfy_a_network_transport():
    p = place(dec(endpoint=Endpoint(host="::1", port=9000)), transport="loopnet")
    assert resolve(p).coprocessor("dec").node.endpoint == Endpoint(host="::1", port=9000)


@pytest.mark.usefixtures("backend_plugins")
def test_endpoint_is_optional_when_not_needed():
    assert resolve(place(dec(endpoint=Endpoint(host="h", port=1)))).coprocessor("dec").runs_in == "thread"


class ExecutorPlugin:
    """An executor record, as an executor plugin registers one (resolution only looks it up)."""

    @hookimpl
    def backline_executors(self):
        return [Executor(name="test-exec", summary="test executor", load=lambda: None)]


@pytest.fixture
def executor_plugin(backend_plugins):
    plugin = ExecutorPlugin()
    plugins.register(plugin)
    try:
        yield plugin
    finally:
        plugins.unregister(plugin)


EXEC = {"executor": "test-exec", "address": "127.0.0.1:4000", "secret_file": "/tmp/secret"}


def in_executor(transport: str = "loop", fn="steane", **options) -> Placement:
    node = Coprocessor(name="dec", coprocessor_fn=fn, executor_options={**EXEC, **options})
    return place(node, transport=transport)


@pytest.mark.usefixtures("executor_plugin")
def test_an_executor_coprocessor_resolves_to_runs_in_executor():
    placement = place(Coprocessor(name="dec", coprocessor_fn="steane", executor_options=EXEC),
                      transport="loopx")
    r = resolve(placement)
    node = r.coprocessor("dec")
    assert node.runs_in == "executor" and not node.in_controller_process
    assert node.executor_options == EXEC and "runs in executor" in str(node)


@pytest.mark.usefixtures("executor_plugin")
def test_executor_coprocessors_are_checked():
    refused(in_executor(transport="loop"), "'dec'", "not 'executor'")  # 'loop' lists no executor place
    refused(in_executor(transport="loopx", executor="nope"), "runs in an executor", "nope", "test-exec")
    refused(in_executor(transport="loopx", fn=echo), "Python callable", "native function")
    no_secret = {k: v for k, v in EXEC.items() if k != "secret_file"}
    refused(place(Coprocessor(name="dec", coprocessor_fn="steane", executor_options=no_secret), transport="loopx"),
            "secret_file")
    refused(place(Coprocessor(name="dec", coprocessor_fn="steane",
                              executor_options={k: v for k, v in EXEC.items() if k != "address"}),
                  transport="loopx"), "where to reach the executor")
    # a same-machine transport cannot reach an executor on another machine, even through a forward
    refused(in_executor(transport="loopx", host="10.1.2.3"), "joins nodes on one machine", "10.1.2.3")
    refused(in_executor(transport="loopx", address="192.0.2.7:4000"), "joins nodes on one machine")
    assert resolve(in_executor(transport="loopx", host="localhost")).coprocessor("dec").runs_in == "executor"


@pytest.mark.usefixtures("backend_plugins")
def test_a_dispatched_controller_is_refused():
    refused(place(dec(), controller=Controller(remote=True, executor_options={"host": "h"})),
            "controller 'controller'", "only coprocessors run in executors")


@pytest.mark.usefixtures("backend_plugins")
def test_a_backend_library_that_does_not_load():
    refused(place(dec(), transport="gone"), "'dec'", "/nonexistent/libgone.so")
    refused(place(transport="gone"), "controller 'controller'", "/nonexistent/libgone.so")


def test_a_backend_built_for_another_abi(stub_backend):
    class Old:
        @hookimpl
        def backline_transports(self):
            return [Transport(name="old-abi", summary="t", library=lambda h, r: stub_backend.abi999_path,
                              serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("thread",))]

    plugin = Old()
    plugins.register(plugin)
    try:
        refused(place(dec(), transport="old-abi"), "'dec'", "ABI 999", "rebuild")
    finally:
        plugins.unregister(plugin)


# -- configuration: judged by the backend ------------------------------------------------------


@pytest.mark.usefixtures("backend_plugins")
@pytest.mark.parametrize(
    "init_args, words",
    [
        ({"colour": "red"}, ["unknown configuration key 'colour'", "known keys: slots, slot_bytes, timeout_ms, "
                                                                    "connect_timeout_ms, idle_spin_us"]),
        ({"place": "thread"}, ["unknown configuration key 'place'"]),  # where a node runs is runs_in=, not a key
        ({"slots": 3}, ["slots=3", "power of two"]),
        ({"slots": 0}, ["slots=0", "power of two"]),
        ({"timeout_ms": -5}, ["timeout_ms=-5", "integer from 1"]),
        ({"timeout_ms": 2.5}, ["timeout_ms=2.5"]),
        ({"slot_bytes": 100}, ["slot_bytes=100", "multiple of 64"]),
        ({"idle_spin_us": "x"}, ["idle_spin_us=x", "-1"]),
        ({"connect_timeout_ms": True, "slots": 64, "cpu": 1}, ["unknown configuration key 'cpu'"]),
    ],
)
def test_init_args_are_checked_by_the_backend(init_args, words):
    message = refused(place(dec(init_args=init_args)), "coprocessor 'dec'", *words)
    assert "[BL_EINVAL]" in message
    message = refused(place(dec(), controller=Controller(init_args=init_args)), "controller 'controller'", *words)
    # A controller without coprocessors is checked too.
    refused(place(controller=Controller(init_args=init_args)), "controller 'controller'", *words)


@pytest.mark.usefixtures("backend_plugins")
def test_valid_init_args_are_accepted_and_passed_on():
    args = {"slots": 8, "slot_bytes": 128, "timeout_ms": 50, "connect_timeout_ms": 100, "idle_spin_us": -1}
    r = resolve(place(dec(init_args=args), controller=Controller(init_args={"slots": 16, "timeout_ms": 5})))
    assert r.coprocessor("dec").config == "connect_timeout_ms=100;idle_spin_us=-1;slot_bytes=128;slots=8;timeout_ms=50"
    assert r.controller.config == "slots=16;timeout_ms=5"


@pytest.mark.defect("an init_args value with a lone surrogate raised UnicodeEncodeError from resolve()")
@pytest.mark.usefixtures("backend_plugins")
def test_config_of_a_string_c_cannot_take_is_a_placement_error():
    """A lone surrogate survives Python and JSON but not UTF-8: say so, do not raise UnicodeEncodeError."""
    p = place(dec(init_args={"mode": "\ud800"}))
    try:
        resolve(p)
    except PlacementError as exc:
        assert "'dec'" in str(exc)
    except BaseException as exc:  # noqa: BLE001
        pytest.fail(f"expected a PlacementError, got {type(exc).__name__}: {exc}")
    else:
        pytest.fail("a configuration C cannot be given was accepted")


# -- coprocessor functions ----------------------------------------------------------------------


@pytest.mark.usefixtures("backend_plugins")
def test_decoder_whose_build_needs_parameters():
    message = refused(place(dec(coprocessor_fn="needs-matrices")), "coprocessor 'dec'", "'needs-matrices'",
                      "hx, hz", "build the function and pass it",
                      "coprocessor_fn=plugins.get('decoder', 'needs-matrices').build(hx=..., hz=...)")
    assert "weight" not in message  # a keyword with a default is not needed


@pytest.mark.usefixtures("backend_plugins")
def test_decoder_with_default_parameters_builds():
    assert resolve(place(dec(coprocessor_fn="with-defaults"))).coprocessor("dec").function == builtin_steane()


@pytest.mark.usefixtures("backend_plugins")
def test_unknown_decoder_lists_installed_ones():
    with pytest.raises(UnknownPluginError) as info:
        resolve(place(dec(coprocessor_fn="mwpm")))
    message = str(info.value)
    assert "decoder 'mwpm'" in message and "pip install backline-decoder-mwpm" in message
    for name in ("echo (backline-core)", "steane (backline-core)", "needs-matrices ((registered in process))"):
        assert name in message, message


@pytest.mark.usefixtures("backend_plugins")
def test_decoder_must_run_on_the_nodes_hardware():
    refused(place(dec(coprocessor_fn="gpu-only")), "coprocessor 'dec'", "decoder 'gpu-only' runs on gpu, not cpu")
    refused(place(dec(coprocessor_fn="steane", hardware="gpu")), "coprocessor 'dec'",
            "decoder 'steane' runs on cpu, not gpu")
    refused(place(dec(coprocessor_fn="gpu-or-fpga")), "runs on gpu, fpga, not cpu")
    assert resolve(place(dec(coprocessor_fn="gpu-only", hardware="gpu"))).coprocessor("dec").function.name == "echo"


@pytest.mark.usefixtures("backend_plugins")
def test_decoder_that_fails_to_build():
    with pytest.raises(PlacementError, match="decoder 'fails-to-build' failed to build: no GPU found") as info:
        resolve(place(dec(coprocessor_fn="fails-to-build")))
    assert "'dec'" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.usefixtures("backend_plugins")
def test_decoder_that_builds_something_else():
    refused(place(dec(coprocessor_fn="builds-garbage")), "'builds-garbage'", "dist-g", "'garbage'",
            "not a CoprocessorFunction", error=PluginError)


@pytest.mark.usefixtures("backend_plugins")
@pytest.mark.parametrize(
    "fn, words",
    [
        (CoprocessorFunction(name="gone", library="/nonexistent/libdec.so", symbol="decode"),
         ["function 'gone'", "cannot load /nonexistent/libdec.so"]),
        (CoprocessorFunction(name="nosym", library=get_library(), symbol="no_such_symbol"),
         ["function 'nosym'", "has no symbol 'no_such_symbol'"]),
        (CoprocessorFunction(name="noinit", library=get_library(), symbol="bl_fn_echo", init_symbol="no_init",
                             fini_symbol="bl_fn_echo"), ["function 'noinit'", "'no_init'"]),
        (CoprocessorFunction(name="nofini", library=get_library(), symbol="bl_fn_echo", init_symbol="bl_fn_echo",
                             fini_symbol="no_fini"), ["function 'nofini'", "'no_fini'"]),
        ("missing-library", ["function 'missing-library'", "cannot load /nonexistent/libdec.so"]),
    ],
)
def test_native_function_must_load(fn, words):
    for runs_in in ("thread", "process"):
        refused(place(dec(coprocessor_fn=fn, runs_in=runs_in)), "coprocessor 'dec'", *words)


@pytest.mark.usefixtures("backend_plugins")
def test_python_callable_in_another_process_must_be_importable():
    def local(decoder_id, payload):
        return payload

    for fn in (lambda d, p: p, local):
        refused(place(dec(coprocessor_fn=fn, runs_in="process")), "coprocessor 'dec' runs in another process",
                "module-level", "module:qualname")
        # In the controller's process it needs no name.
        for runs_in in ("thread", "controller-thread"):
            assert resolve(place(dec(coprocessor_fn=fn, runs_in=runs_in))).coprocessor("dec").function.python is fn
    r = resolve(place(dec(coprocessor_fn=echo, runs_in="process")))
    assert r.coprocessor("dec").function.python is echo
    assert r.coprocessor("dec").function.to_dict()["python"] == f"{__name__}:echo"


# -- success ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("backend_plugins")
def test_resolved_nodes(stub_backend):
    native = CoprocessorFunction(name="native", library=get_library(), symbol="bl_fn_echo", decoder_ids=(3,))
    p = place(
        Coprocessor(name="dec", coprocessor_fn="steane", init_args={"slots": 8, "timeout_ms": 50}),
        Coprocessor(name="py", coprocessor_fn=echo, runs_in="process"),
        Coprocessor(name="inl", coprocessor_fn=native, runs_in="controller-thread", hardware="gpu"),
        controller=Controller(name="ctl", init_args={"slots": 8}),
        qec_code="steane",
    )
    r = resolve(p)
    assert isinstance(r, Resolution) and r.placement == p
    assert backline_core.resolve is resolve and backline_core.ResolvedNode is ResolvedNode

    ctl = r.controller
    assert isinstance(ctl, ResolvedNode) and ctl.node == p.controller
    assert (ctl.name, ctl.role, ctl.hardware) == ("ctl", "controller", "cpu")
    assert ctl.transport.name == "loop" and ctl.transport.distribution == "dist-a"
    assert ctl.library == stub_backend.path
    assert ctl.config == "slots=8"
    assert ctl.runs_in is None and ctl.function is None

    assert [n.name for n in r.coprocessors] == ["dec", "py", "inl"]
    d, py, inl = r.coprocessors
    assert r.coprocessor("dec") is d and d.node == p.coprocessor("dec")
    assert (d.role, d.hardware, d.library) == ("coprocessor", "cpu", stub_backend.path)
    assert d.config == "slots=8;timeout_ms=50"
    assert d.runs_in == "thread"  # the transport's first place
    assert d.function == builtin_steane() and d.function.reply_bits == 7
    assert d.in_controller_process

    assert py.runs_in == "process" and py.function.python is echo and not py.in_controller_process
    assert py.config == ""
    assert inl.runs_in == "controller-thread" and inl.function is native and inl.in_controller_process
    assert inl.hardware == "gpu" and inl.transport.name == "loop"

    with pytest.raises(PlacementError) as info:
        r.coprocessor("ctl")
    assert "'ctl'" in str(info.value) and "'dec', 'py', 'inl'" in str(info.value)


@pytest.mark.usefixtures("backend_plugins")
def test_runs_in_defaults_to_the_transports_first_place():
    assert resolve(place(dec(), transport="loop")).coprocessor("dec").runs_in == "thread"
    assert resolve(place(dec(), transport="inline")).coprocessor("dec").runs_in == "controller-thread"
    # A Transport record that does not say supports "process" only.
    networked = place(dec(endpoint=Endpoint(host="h", port=1)), transport="loopnet")
    assert resolve(networked).coprocessor("dec").runs_in == "process"


@pytest.mark.usefixtures("backend_plugins")
def test_controller_only_placement_resolves():
    r = resolve(place())
    assert r.coprocessors == () and r.controller.name == "controller" and r.controller.config == ""


def test_resolve_takes_a_placement():
    for value in (None, "placement", {"format": "backline.placement/1"}):
        with pytest.raises(PlacementError, match="takes a Placement"):
            resolve(value)


# -- caching ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("backend_plugins")
def test_resolution_is_cached_per_placement_value():
    p = place(dec(init_args={"slots": 8}), qec_code="steane")
    first = resolve(p)
    assert resolve(p) is first
    assert resolve(place(dec(init_args={"slots": 8}), qec_code="steane")) is first  # an equal value
    assert resolve(copy.deepcopy(p)) is first
    assert resolve(Placement.from_json(p.to_json())) is first
    assert resolve(place(dec(init_args={"slots": 16}))) is not first


@pytest.mark.usefixtures("backend_plugins")
def test_registering_or_unregistering_a_plugin_invalidates_the_cache():
    p = place(dec())
    first = resolve(p)

    class Other:
        @hookimpl
        def backline_decoders(self):
            return [Decoder(name="other-decoder", summary="t", build=builtin_echo)]

    other = Other()
    plugins.register(other)
    try:
        second = resolve(p)
        assert second is not first and second.coprocessor("dec").runs_in == "thread"
        assert resolve(p) is second
    finally:
        plugins.unregister(other)
    assert resolve(p) is not second


@pytest.mark.usefixtures("backend_plugins")
def test_a_failed_resolution_is_not_cached():
    p = place(dec(), transport="late-transport")
    with pytest.raises(UnknownPluginError):
        resolve(p)
    loop = plugins.transport_backend("loop", "cpu", "controller")

    class Late:
        @hookimpl
        def backline_transports(self):
            return [Transport(name="late-transport", summary="t", serves=loop.serves, library=loop.library,
                              runs_in=("process",))]

    late = Late()
    plugins.register(late)
    try:
        assert resolve(p).coprocessor("dec").runs_in == "process"
    finally:
        plugins.unregister(late)
    with pytest.raises(UnknownPluginError):
        resolve(p)


@pytest.mark.defect("resolve() gave an equal-comparing placement the cached configuration (timeout_ms=5 for 5.0)")
@pytest.mark.usefixtures("backend_plugins")
def test_cache_never_hands_one_placement_anothers_configuration():
    """Placements that compare equal in Python (5 == 5.0) but differ in configuration text
    must each be judged on their own configuration."""
    for a, b in [({"timeout_ms": 5}, {"timeout_ms": 5.0}), ({"slots": 1}, {"slots": True}),
                 ({"slots": 8}, {"slots": 8.0})]:
        for first, second in ((a, b), (b, a)):
            for args in (first, second):
                p = place(dec(init_args=args))
                try:
                    r = resolve(p)
                except PlacementError:
                    continue
                assert r.coprocessor("dec").config == p.coprocessor("dec").config_string(), (first, second, args)
                assert type(r.coprocessor("dec").node.init_args[next(iter(args))]) is type(next(iter(args.values())))


# -- loading only what is needed ---------------------------------------------------------------------

OTHER_KINDS = ("xdsl", "llvmlite", "backline_compiler", "backline_decoder_bpod", "backline_device_stim",
               "backline_transport_memcpy")

RESOLVE_IN_A_FRESH_INTERPRETER = textwrap.dedent(
    """
    import sys
    from backline_core import Controller, Coprocessor, Placement, Transport, hookimpl, plugins, resolve

    class Loop:
        @hookimpl
        def backline_transports(self):
            return [Transport(name="fresh-loop", summary="t", library=lambda h, r: sys.argv[1],
                              serves=(("cpu", "controller"), ("cpu", "coprocessor")), runs_in=("thread",))]

    plugins.register(Loop())
    p = Placement(controller=Controller(), transport="fresh-loop",
                  coprocessors=[Coprocessor(name="a", coprocessor_fn="steane"),
                                Coprocessor(name="b", coprocessor_fn="echo", init_args={"slots": 8})])
    p = Placement.from_json(p.to_json())
    r = resolve(p)
    assert r.coprocessor("a").function.name == "steane" and r.coprocessor("b").config == "slots=8"
    print("imported:" + ",".join(m for m in sys.argv[2].split(",") if m in sys.modules))
    """
)


def test_building_and_resolving_import_no_other_plugin_kind(stub_backend, sentinels, tmp_path):
    watched = [*OTHER_KINDS, *(sentinels.module(k) for k in ("transport", "decoder", "pass", "device"))]
    proc = subprocess.run(
        [sys.executable, "-P", "-c", RESOLVE_IN_A_FRESH_INTERPRETER, stub_backend.path, ",".join(watched)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=sentinels.env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported:", f"resolving imported {proc.stdout.strip()}"

@pytest.mark.usefixtures("executor_plugin")
def test_library_paths_are_re_rooted_in_the_executors_site_packages():
    # the test backend is a loose file, not inside a package: the executor's machine cannot have it
    refused(in_executor(transport="loopx", site_packages="/remote/venv/site"), "'dec'",
            "libtestbackend.so is not inside an installed Python package", "/remote/venv/site")
    # without site_packages the executor is on this machine and sees the same paths
    assert resolve(in_executor(transport="loopx")).coprocessor("dec").function.library == get_library()


def test_executor_path_needs_a_package():
    from backline_core._resolution import executor_path

    assert executor_path(get_library(), "/r") == "/r/backline_core/lib/libbackline.so"
    with pytest.raises(PlacementError, match="not inside an installed Python package"):
        executor_path("/usr/lib/x86_64-linux-gnu/libc.so.6", "/r", "dec")
