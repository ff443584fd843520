"""The Backline device and what is installed: quantum devices and QEC codes come from the
plugins, the placement is resolved when the device is built, and process coprocessors are
started through the core for each run."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

qml = pytest.importorskip("pennylane")

import backline_compiler as bl
from backline_compiler.frontend.device import qec_codes, quantum_devices
from xdsl.passes import ModulePass

from backline_core import Pass, hookimpl, plugins
from backline_core._errors import PlacementError, UnknownPluginError
from backline_core._session import Session


def controller(kind: str = "null.qubit", wires: int = 3) -> bl.Controller:
    return bl.Controller(device=qml.device(kind, wires=wires))


def test_quantum_devices_are_what_the_device_plugins_back():
    expected = {name: plugin for plugin in plugins.names("device")
                for name in plugins.get("device", plugin).pennylane_devices}
    assert quantum_devices() == expected
    assert quantum_devices()["null.qubit"] == "null"  # the core's own device


def test_an_unsupported_device_lists_the_supported_ones():
    with pytest.raises(PlacementError, match=r"device 'default.qubit' has no Backline runtime; supported: .*"
                                             r"null.qubit \(runs on the 'null' device plugin\)"):
        bl.Backline(controller=controller("default.qubit"))


@dataclass(frozen=True)
class _EncodeToy(ModulePass):
    name = "encode-toy"

    def apply(self, ctx, op):  # pragma: no cover - never scheduled here
        pass


class _ToyCode:
    @hookimpl
    def backline_passes(self):
        return [Pass(name="encode-toy", summary="a QEC code for this test", load=lambda: _EncodeToy)]


def test_a_qec_code_is_an_installed_encode_pass():
    assert "steane" in qec_codes()
    with pytest.raises(PlacementError, match=r"unknown qec_code 'toy'; choose one of .*steane.* \(a QEC code X is "
                                             r"a pass named encode-X\)"):
        bl.Backline(controller=controller(), qec_code="toy")
    toy = _ToyCode()
    plugins.register(toy, name="test-toy-code")
    try:
        assert "toy" in qec_codes()
        assert bl.Backline(controller=controller(), qec_code="toy").qec_code == "toy"
    finally:
        plugins.unregister(toy)
    assert "toy" not in qec_codes()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transport": "no-such-transport"}, r"unknown transport 'no-such-transport'"),
        ({"coprocessors": [bl.Coprocessor(coprocessor_fn="no-such-decoder")]}, r"no-such-decoder"),
        ({"coprocessors": [bl.Coprocessor(coprocessor_fn="steane", init_args={"colour": "blue"})]},
         r"unknown configuration key 'colour'"),
    ],
)
def test_a_placement_that_does_not_resolve_fails_when_the_device_is_built(kwargs, message):
    with pytest.raises((PlacementError, UnknownPluginError), match=message):
        bl.Backline(controller=controller(), **kwargs)


def test_deployment_starts_process_coprocessors_through_the_core():
    key = f"dev-{uuid.uuid4().hex[:8]}"
    dev = bl.Backline(controller=controller(),
                      coprocessors=[bl.Coprocessor(name=key, coprocessor_fn="echo", runs_in="process")])
    assert dev.resolution.coprocessor(key).runs_in == "process"
    with dev.deployment():
        session = Session.open("memcpy", "controller", key, runs_in="process", in_bytes=4, out_bytes=4)
        try:
            assert session.round(b"\x01\x02\x03") == b"\x01\x02\x03"
        finally:
            session.destroy()
