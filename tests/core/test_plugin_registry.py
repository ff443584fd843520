"""The plugin registry: one pluggy hook call per kind, records with their distribution,
transports served in parts by several distributions, lookups that load one kind only.

Runs with only the core installed: the plugins here are registered in process. Each test
unregisters what it registered, also when it fails.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap

import pytest

import backline_core._plugins as plugins
from backline_core._builtins import echo as builtin_echo
from backline_core._errors import PlacementError, PluginError, UnknownPluginError
from backline_core._hookspecs import RECORD_TYPES, Decoder, Transport, hookimpl
from backline_core._placement import Controller, Coprocessor, Placement
from backline_core._resolution import resolve

IN_PROCESS = plugins.IN_PROCESS


@contextlib.contextmanager
def registered(*objects, names=None):
    done = []
    try:
        for i, obj in enumerate(objects):
            plugins.register(obj, name=names[i] if names else None)
            done.append(obj)
        yield objects
    finally:
        for obj in done:
            plugins.unregister(obj)


def transport(name: str, *serves: tuple[str, str], distribution: str = "", library: str = "",
              runs_in=("thread",)) -> Transport:
    path = library or f"/opt/{distribution or 'inproc'}/lib{name}.so"
    return Transport(name=name, summary=f"{name} from {distribution}", serves=serves, runs_in=runs_in,
                     library=lambda hardware, role: path, distribution=distribution)


class Transports:
    def __init__(self, *records: Transport) -> None:
        self.records = list(records)

    @hookimpl
    def backline_transports(self):
        return self.records


class Decoders:
    def __init__(self, *records: Decoder) -> None:
        self.records = list(records)

    @hookimpl
    def backline_decoders(self):
        return self.records


def build_echo():
    """A build function of this module (so nothing ties the record to another package)."""
    return builtin_echo()


def decoder(name: str, distribution: str = "", build=build_echo) -> Decoder:
    return Decoder(name=name, summary=f"{name} from {distribution}", build=build, distribution=distribution)


# -- one transport name, several distributions ----------------------------------------------


def split_parts():
    return (
        Transports(transport("fabric", ("cpu", "controller"), ("cpu", "coprocessor"), distribution="dist-a")),
        Transports(transport("fabric", ("gpu", "coprocessor"), distribution="dist-b", runs_in=("process",))),
        Transports(transport("fabric", ("fpga", "controller"), distribution="dist-c")),
    )


def test_parts_of_one_transport_resolve_to_the_right_distribution():
    with registered(*split_parts()):
        for hardware, role, dist in [("cpu", "controller", "dist-a"), ("cpu", "coprocessor", "dist-a"),
                                     ("gpu", "coprocessor", "dist-b"), ("fpga", "controller", "dist-c")]:
            part = plugins.transport_backend("fabric", hardware, role)
            assert part.name == "fabric" and part.distribution == dist
            assert (hardware, role) in part.serves
            assert part.library(hardware, role) == f"/opt/{dist}/libfabric.so"
        parts = plugins.registry().transport_parts("fabric")
        assert sorted(p.distribution for p in parts) == ["dist-a", "dist-b", "dist-c"]
        assert list(plugins.names("transport")).count("fabric") == 1


def test_a_pair_no_part_serves_lists_every_part():
    with registered(*split_parts()):
        with pytest.raises(PlacementError) as info:
            plugins.transport_backend("fabric", "gpu", "controller")
    message = str(info.value)
    assert "'fabric'" in message and "gpu/controller" in message
    assert "dist-a: serves cpu/controller, cpu/coprocessor" in message
    assert "dist-b: serves gpu/coprocessor" in message and "dist-c: serves fpga/controller" in message
    assert "install the package that adds that part" in message


def test_an_unknown_transport_name_lists_the_installed_ones():
    with registered(*split_parts()):
        with pytest.raises(UnknownPluginError) as info:
            plugins.transport_backend("fabrica", "cpu", "controller")
    message = str(info.value)
    assert "unknown transport 'fabrica'" in message
    for dist in ("dist-a", "dist-b", "dist-c"):
        assert f"fabric ({dist})" in message


def test_each_part_keeps_its_own_record():
    with registered(*split_parts()):
        parts = {p.distribution: p for p in plugins.registry().transport_parts("fabric")}
        assert parts["dist-b"].runs_in == ("process",) and parts["dist-a"].runs_in == ("thread",)
        assert parts["dist-c"].summary == "fabric from dist-c"


def test_two_parts_claiming_one_pair_name_both_distributions():
    with registered(
        Transports(transport("dup", ("cpu", "controller"), ("cpu", "coprocessor"), distribution="dist-a")),
        Transports(transport("dup", ("cpu", "coprocessor"), distribution="dist-b")),
    ):
        with pytest.raises(PluginError) as info:
            plugins.transport_backend("dup", "cpu", "coprocessor")
        message = str(info.value)
        assert "'dup'" in message and "cpu/coprocessor" in message
        assert "dist-a" in message and "dist-b" in message and "uninstall one" in message
        # The pair only one part claims is still that part's.
        assert plugins.transport_backend("dup", "cpu", "controller").distribution == "dist-a"
        # resolve() reports the clash instead of picking one.
        p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="echo")], transport="dup")
        with pytest.raises(PluginError, match="dist-a and dist-b"):
            resolve(p)


def test_an_in_process_claim_is_named_as_such():
    with registered(
        Transports(transport("dup2", ("cpu", "coprocessor"), distribution="dist-a")),
        Transports(transport("dup2", ("cpu", "coprocessor"))),  # no distribution: registered in process
    ):
        with pytest.raises(PluginError) as info:
            plugins.transport_backend("dup2", "cpu", "coprocessor")
    assert "dist-a" in str(info.value) and IN_PROCESS in str(info.value)


def test_get_of_a_transport_with_several_parts_points_to_transport_backend():
    with registered(*split_parts()):
        with pytest.raises(PluginError) as info:
            plugins.get("transport", "fabric")
        message = str(info.value)
        assert "several distributions" in message and "transport_backend(name, hardware, role)" in message
        for dist in ("dist-a", "dist-b", "dist-c"):
            assert dist in message
    with registered(Transports(transport("single", ("cpu", "controller"), distribution="dist-a"))):
        assert plugins.get("transport", "single").distribution == "dist-a"


# -- names are unique per kind (transports aside) ------------------------------------------------


def test_two_decoders_with_one_name_name_both_distributions():
    with registered(Decoders(decoder("twin", "dist-a")), Decoders(decoder("twin", "dist-b"))):
        with pytest.raises(PluginError) as info:
            plugins.get("decoder", "twin")
        message = str(info.value)
        assert "decoder 'twin'" in message and "dist-a and dist-b" in message and "uninstall one" in message
        p = Placement(controller=Controller(), coprocessors=[Coprocessor(coprocessor_fn="twin")], transport="x")
        assert p.coprocessors[0].coprocessor_fn == "twin"  # building is not looking up


def test_an_in_process_decoder_clashing_with_an_installed_one():
    with registered(Decoders(decoder("echo"))):
        with pytest.raises(PluginError) as info:
            plugins.get("decoder", "echo")
    assert "backline-core" in str(info.value) and IN_PROCESS in str(info.value)


# -- records carry their distribution ------------------------------------------------------------


def test_records_carry_their_distribution():
    assert plugins.get("decoder", "steane").distribution == "backline-core"
    assert plugins.get("decoder", "echo").distribution == "backline-core"
    with registered(Decoders(decoder("named-dist", "dist-a"), decoder("no-dist"))):
        assert plugins.get("decoder", "named-dist").distribution == "dist-a"
        assert plugins.get("decoder", "no-dist").distribution == IN_PROCESS
        rows = {row.name: row for row in plugins.registry().available("decoder")}
        assert rows["named-dist"].distribution == "dist-a" and rows["no-dist"].distribution == IN_PROCESS
        assert rows["steane"].distribution == "backline-core" and rows["steane"].error is None


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def backline_decoders(self):
        self.calls += 1
        return [decoder("counted-a"), decoder("counted-b")]


def test_records_are_collected_once_per_kind_until_the_plugins_change():
    registry = plugins.PluginRegistry()  # a fresh one: nothing loaded yet, whatever ran before
    counting = Counting()
    registry.register(counting)
    names = ("counted-a", "counted-b", "steane", "echo")
    for name in names:  # the first lookup of each name may load its entry points
        registry.get("decoder", name)
    registry.available("decoder")
    calls = counting.calls
    for _ in range(3):
        for name in names:
            registry.get("decoder", name)
        registry.available("decoder")
    assert counting.calls == calls
    record = registry.get("decoder", "counted-a")
    assert registry.get("decoder", "counted-a") is record
    registry.register(Decoders(decoder("later")))  # a new plugin: the kind is collected again
    assert registry.get("decoder", "later").name == "later"
    assert counting.calls == calls + 1


@pytest.mark.defect("each first lookup of a name re-ran every plugin's hook even when it loaded nothing")
def test_one_hook_call_per_kind_collects_every_record():
    """A lookup whose entry-point scan loads nothing new does not collect the records again."""
    registry = plugins.PluginRegistry()  # fresh: the kind's entry points are not all loaded yet
    counting = Counting()
    registry.register(counting)
    first = registry.get("decoder", "counted-a")
    calls = counting.calls  # 1 (or 2 where register() checks a plugin's hooks once)
    registry.get("decoder", "counted-b")  # no entry point is called counted-b: nothing new
    registry.get("decoder", "counted-a")
    assert counting.calls == calls
    assert registry.get("decoder", "counted-a") is first
    # Loading entry points that register plugins does collect again, and finds them all.
    assert registry.get("decoder", "steane").distribution == "backline-core"
    assert {"counted-a", "counted-b", "echo", "steane"} <= {row.name for row in registry.available("decoder")}


@pytest.mark.defect("a record was attributed to the package of its build function, not to the plugin that returned it")
def test_a_record_is_attributed_to_the_plugin_that_returned_it():
    """An in-process plugin reusing another package's factory is still "registered in process"."""
    with registered(Decoders(decoder("borrowed-build", build=builtin_echo))):
        assert plugins.get("decoder", "borrowed-build").distribution == IN_PROCESS


def test_records_are_of_the_kind_asked_for():
    with registered(Transports(transport("kind-t", ("cpu", "controller"))), Decoders(decoder("kind-d"))):
        assert isinstance(plugins.get("decoder", "kind-d"), Decoder)
        with pytest.raises(UnknownPluginError):
            plugins.get("decoder", "kind-t")
        with pytest.raises(UnknownPluginError):
            plugins.get("transport", "kind-d")


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown plugin kind 'decoders'"):
        plugins.get("decoders", "echo")


# -- bad plugins ----------------------------------------------------------------------------------


class ReturnsOne:
    """Returns a record instead of a list of records."""

    @hookimpl
    def backline_decoders(self):
        return decoder("lonely")


class ReturnsWrongType:
    @hookimpl
    def backline_decoders(self):
        return [transport("not-a-decoder", ("cpu", "controller"))]


class ReturnsDict:
    @hookimpl
    def backline_decoders(self):
        return {"name": "dict-decoder"}


@pytest.mark.parametrize(
    "plugin, words",
    [
        (ReturnsOne(), ["backline_decoders()", "Decoder(name='lonely'", "return a list of Decoder"]),
        (ReturnsDict(), ["backline_decoders()", "return a list of Decoder"]),
        (ReturnsWrongType(), ["backline_decoders()", "Transport(name='not-a-decoder'", "Decoder records"]),
    ],
)
def test_a_hook_returning_garbage_is_a_clear_plugin_error(plugin, words):
    # Refused at register or at the first lookup of its kind: either way a PluginError.
    with pytest.raises(PluginError) as info:
        with registered(plugin):
            plugins.get("decoder", "steane")
    for word in words:
        assert word in str(info.value), str(info.value)
    assert plugins.get("decoder", "steane").name == "steane"  # gone with it


@pytest.mark.defect("a hook returning garbage gave an error naming no plugin")
def test_a_hook_returning_garbage_names_the_plugin():
    """With many plugins installed, the message must say which one is broken."""
    with pytest.raises(PluginError, match="broken-decoders"):
        with registered(ReturnsWrongType(), names=["broken-decoders"]):
            plugins.get("decoder", "steane")


def test_a_hook_returning_garbage_spoils_only_its_kind():
    bad = ReturnsOne()
    with registered(Transports(transport("unspoilt", ("cpu", "controller")))):
        try:
            plugins.register(bad)
        except PluginError:
            pass  # refused at register: nothing left to spoil
        try:
            assert plugins.get("transport", "unspoilt").name == "unspoilt"
        finally:
            plugins.unregister(bad)


@pytest.mark.defect("one plugin returning garbage hid every other plugin of its kind from listings")
def test_a_hook_returning_garbage_does_not_hide_the_other_plugins_in_listings():
    """plugins.available() promises: "a plugin returning garbage must not hide the others"."""
    bad = ReturnsWrongType()
    try:
        plugins.register(bad)
    except PluginError:
        return  # refused at register: it cannot hide anything
    try:
        rows = plugins.registry().available("decoder")
        assert any(row.error for row in rows), rows
        assert {"echo", "steane"} <= {row.name for row in rows if row.error is None}
        assert {"echo", "steane"} <= set(plugins.names("decoder"))
    finally:
        plugins.unregister(bad)


@pytest.mark.defect("a hook raising an exception escaped lookups and listings raw")
def test_a_hook_that_raises_is_a_plugin_error():
    class Raises:
        @hookimpl
        def backline_decoders(self):
            raise RuntimeError("no CUDA driver")

    bad = Raises()
    try:
        with pytest.raises(PluginError) as info:
            plugins.register(bad, name="raising-decoders")
            plugins.get("decoder", "steane")
        assert "no CUDA driver" in str(info.value) and "raising-decoders" in str(info.value)
        plugins.registry().available("decoder")  # listing (``backline plugins``) must not crash
    finally:
        plugins.unregister(bad)


def test_a_misspelt_hook_is_refused_at_register_and_leaves_others_working():
    class Misspelt:
        @hookimpl
        def backline_transport(self):  # no "s"
            return [transport("misspelt-t", ("cpu", "controller"))]

        @hookimpl
        def backline_decoders(self):
            return [decoder("misspelt-d")]

    bad = Misspelt()
    for _ in range(2):  # refused every time, not "already registered" the second time
        with pytest.raises(PluginError) as info:
            plugins.register(bad, name="misspelt")
        message = str(info.value)
        assert "'misspelt'" in message and "backline_transport'" in message
        for hook in ("backline_transports", "backline_decoders", "backline_passes", "backline_devices"):
            assert hook in message
    assert not plugins.registry().pm.is_registered(bad)
    # Nothing of it is left, and the manager still takes good plugins.
    with pytest.raises(UnknownPluginError):
        plugins.get("decoder", "misspelt-d")
    assert plugins.get("decoder", "steane").name == "steane"
    with registered(Decoders(decoder("after-misspelt"))):
        assert plugins.get("decoder", "after-misspelt").name == "after-misspelt"


@pytest.mark.defect("a hookimpl with unknown arguments raised pluggy.PluginValidationError, not PluginError")
def test_a_hook_with_arguments_backline_does_not_pass_is_a_plugin_error():
    class ExtraArgument:
        @hookimpl
        def backline_decoders(self, config):
            return []

    bad = ExtraArgument()
    with pytest.raises(PluginError, match="config"):
        plugins.register(bad, name="extra-argument")
    assert not plugins.registry().pm.is_registered(bad)
    assert plugins.get("decoder", "steane").name == "steane"


def test_every_kind_has_a_hook():
    assert set(RECORD_TYPES) == {"transport", "decoder", "executor", "pass", "device", "driver", "command", "builder"}
    for kind, (_, hook) in RECORD_TYPES.items():
        assert hasattr(plugins.registry().pm.hook, hook), kind


# -- unregister ------------------------------------------------------------------------------------


def test_unregister_forgets_records():
    plugin = Decoders(decoder("ephemeral", "dist-a"))
    parts = Transports(transport("ephemeral-t", ("cpu", "controller"), distribution="dist-a"))
    with registered(plugin, parts):
        assert plugins.get("decoder", "ephemeral").distribution == "dist-a"
        assert plugins.transport_backend("ephemeral-t", "cpu", "controller").distribution == "dist-a"
        assert "ephemeral" in plugins.names("decoder")
    with pytest.raises(UnknownPluginError):
        plugins.get("decoder", "ephemeral")
    with pytest.raises(UnknownPluginError):
        plugins.transport_backend("ephemeral-t", "cpu", "controller")
    assert "ephemeral" not in plugins.names("decoder")
    assert "ephemeral-t" not in plugins.names("transport")


def test_unregister_of_one_part_keeps_the_others():
    a, b, c = split_parts()
    with registered(a, b, c):
        plugins.unregister(b)
        with pytest.raises(PlacementError, match="gpu/coprocessor"):
            plugins.transport_backend("fabric", "gpu", "coprocessor")
        assert plugins.transport_backend("fabric", "fpga", "controller").distribution == "dist-c"


def test_unregister_of_an_unknown_plugin_is_a_no_op():
    generation = plugins.registry().generation
    plugins.unregister(Decoders())
    assert plugins.get("decoder", "steane").name == "steane"
    assert plugins.registry().generation >= generation


def test_register_twice_is_a_no_op():
    plugin = Decoders(decoder("once"))
    with registered(plugin):
        plugins.register(plugin)
        assert plugins.get("decoder", "once").name == "once"  # not a clash with itself


def test_registering_changes_the_generation():
    registry = plugins.registry()
    before = registry.generation
    with registered(Decoders(decoder("gen"))):
        during = registry.generation
        assert during > before
    assert registry.generation > during


# -- loading one kind only -------------------------------------------------------------------------

# Real packages of other kinds, watched where installed; the sentinels (conftest.py) are
# always there, so each check has something it could catch importing.
PASS_AND_DEVICE_PACKAGES = ("backline_compiler", "backline_device_stim", "xdsl", "llvmlite")
OTHER_PACKAGES = (*PASS_AND_DEVICE_PACKAGES, "backline_decoder_bpod")

IN_A_FRESH_INTERPRETER = textwrap.dedent(
    """
    import sys
    from backline_core import plugins
    exec(sys.argv[1])
    print("imported:" + ",".join(m for m in sys.argv[2].split(",") if m in sys.modules))
    """
)


def imported_by(statement: str, watched, sentinels, tmp_path) -> list[str]:
    proc = subprocess.run([sys.executable, "-P", "-c", IN_A_FRESH_INTERPRETER, statement, ",".join(watched)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=sentinels.env())
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("imported:"), proc.stdout
    return [m for m in line[len("imported:"):].split(",") if m]


def test_sentinels_are_found_when_their_kind_is_listed(sentinels, tmp_path):
    """The check below can fail: listing a kind does import that kind's sentinel."""
    for kind in ("transport", "decoder", "pass", "device"):
        assert imported_by(f"names = list(plugins.names({kind!r}))", [sentinels.module(kind)], sentinels,
                           tmp_path) == [sentinels.module(kind)]


def test_listing_transports_imports_no_other_kind(sentinels, tmp_path):
    watched = [*OTHER_PACKAGES, *(sentinels.module(k) for k in ("decoder", "pass", "device"))]
    assert imported_by("names = list(plugins.names('transport'))", watched, sentinels, tmp_path) == []


def test_looking_up_a_decoder_loads_only_that_one(sentinels, tmp_path):
    watched = [*OTHER_PACKAGES, *(sentinels.module(k) for k in ("transport", "decoder", "pass", "device"))]
    statement = "assert plugins.get('decoder', 'steane').distribution == 'backline-core'"
    assert imported_by(statement, watched, sentinels, tmp_path) == []


def test_listing_decoders_imports_no_pass_or_device_plugin(sentinels, tmp_path):
    watched = [*PASS_AND_DEVICE_PACKAGES, *(sentinels.module(k) for k in ("transport", "pass", "device"))]
    assert imported_by("names = list(plugins.names('decoder'))", watched, sentinels, tmp_path) == []
