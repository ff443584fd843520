"""The rdma transport on a machine without a verbs device: ``backline rdma`` and resolution.

The command runs through the real ``backline`` command line (a subprocess), so its dispatch
to the plugin is what is tested. Tests that need "no device here" skip on a machine that has
one; the configuration checks hold everywhere (they fail before any device is looked at).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from backline_transport_rdma import get_library
from backline_transport_rdma.cli import NO_DEVICES
from backline_transport_rdma.devices import MISSING

from backline_core import Controller, Coprocessor, Endpoint, Placement, PlacementError, TransportError, resolve
from backline_core.sdk import c_string, check, lib, runs_in_code

BACKLINE = os.path.join(os.path.dirname(sys.executable), "backline")
ENDPOINT = Endpoint(host="127.0.0.1", port=18515)


def backline(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``backline ARGS`` (the console script next to this interpreter, else ``-m backline_core``)."""
    command = [BACKLINE] if os.access(BACKLINE, os.X_OK) else [sys.executable, "-m", "backline_core"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, env=env)


def verbs_device_count() -> int:
    """How many devices libibverbs lists (0 without the library)."""
    try:
        verbs = ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return 0
    verbs.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    verbs.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    count = ctypes.c_int(0)
    devices = verbs.ibv_get_device_list(ctypes.byref(count))
    if not devices:
        return 0
    verbs.ibv_free_device_list(devices)
    return count.value


@pytest.fixture(scope="module")
def no_device() -> None:
    if verbs_device_count():
        pytest.skip("this machine has an RDMA device; these tests check the machine without one")


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single ``backline: error: ...`` line a failed command printed (and nothing on stdout)."""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("backline: error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


def placement(runs_in: str = "process", endpoint: Endpoint | None = ENDPOINT, cop_args: dict[str, Any] | None = None,
              ctl_args: dict[str, Any] | None = None) -> Placement:
    return Placement(controller=Controller(init_args=ctl_args or {}), transport="rdma",
                     coprocessors=[Coprocessor(name="dec", coprocessor_fn="steane", runs_in=runs_in,
                                               endpoint=endpoint, init_args=cop_args or {})])


# -- backline rdma ----------------------------------------------------------------------------

def test_devices_says_there_is_none(no_device):
    proc = backline("rdma", "devices")
    assert proc.returncode == 1, proc
    assert proc.stderr.strip() == NO_DEVICES
    assert "rdma link add rxe0 type rxe netdev IFACE" in NO_DEVICES
    assert proc.stdout == ""


def test_devices_json_is_an_empty_list(no_device):
    proc = backline("rdma", "devices", "--json")
    assert proc.returncode == 1, proc
    assert json.loads(proc.stdout) == []
    assert proc.stderr.strip() == NO_DEVICES


@pytest.mark.parametrize("args, says", [
    (("rdma",), "required"),
    (("rdma", "frob"), "invalid choice: 'frob'"),
    (("rdma", "devices", "--bogus"), "unrecognized arguments: --bogus"),
    (("rdma", "devices", "extra"), "unrecognized arguments: extra"),
])
def test_usage_errors_are_one_line_and_status_2(args, says):
    proc = backline(*args)
    assert proc.returncode == 2, proc
    line = one_error_line(proc)
    assert says in line
    assert "backline rdma --help" in line


def test_help():
    proc = backline("rdma", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: backline rdma")
    assert "devices" in proc.stdout
    proc = backline("rdma", "devices", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--json" in proc.stdout


def test_missing_pyverbs_is_one_line_saying_what_to_install():
    """Without Debian's pyverbs (its directory made to point nowhere) the command says what to install."""
    if importlib.machinery.PathFinder.find_spec("pyverbs") is not None:  # on sys.path: that one is used first
        pytest.skip("this environment has a pyverbs of its own")
    code = ("import sys, backline_transport_rdma.devices as d; d.DEBIAN_DIST_PACKAGES = '/nonexistent'; "
            "from backline_transport_rdma.cli import main; sys.exit(main(['devices']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert one_error_line(proc) == f"backline: error: {MISSING}"


def test_plugins_lists_the_rdma_command():
    proc = backline("plugins")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    commands = lines[lines.index("commands:") + 1:]
    row = [line for line in commands if line.split()[:1] == ["rdma"]]
    assert len(row) == 1, proc.stdout
    assert "backline-transport-rdma" in row[0] and "backline rdma devices" in row[0]
    proc = backline("plugins", "--json")
    rows = [r for r in json.loads(proc.stdout) if (r["kind"], r["name"]) == ("command", "rdma")]
    assert len(rows) == 1 and rows[0]["distribution"] == "backline-transport-rdma" and not rows[0]["error"]


# -- resolution -------------------------------------------------------------------------------

def test_resolution_without_a_device_names_the_command(no_device):
    with pytest.raises(PlacementError) as info:
        resolve(placement())
    text = str(info.value)
    assert "no RDMA device" in text and "backline rdma devices" in text
    assert "controller" in text  # the controller's machine (this one) is the one without


@pytest.mark.parametrize("side", ["coprocessor", "controller"])
@pytest.mark.parametrize("args, says", [
    ({"gid_index": "x"}, "gid_index=x: must be an integer from -1 to 65535"),
    ({"rt_priority": 200}, "rt_priority=200: must be an integer from 0 to 99"),
    ({"ib_port": -1}, "ib_port=-1: must be an integer from 0 to 255"),
    ({"bogus": 1}, "unknown configuration key 'bogus' for transport 'rdma'"),
    ({"host": "1.2.3.4"}, "init_args set host, which transport 'rdma' takes from the coprocessor's endpoint"),
    ({"port": 5}, "init_args set port, which transport 'rdma' takes from the coprocessor's endpoint"),
])
def test_bad_configuration_is_refused_by_name(side, args, says):
    kw = {"cop_args": args} if side == "coprocessor" else {"ctl_args": args}
    with pytest.raises(PlacementError) as info:
        resolve(placement(**kw))
    text = str(info.value)
    assert says in text
    assert text.startswith(f"{side} ")
    if "bogus" in args:
        assert "gid_index" in text and "rt_priority" in text  # it lists the keys there are


def test_a_coprocessor_without_an_endpoint_needs_one():
    with pytest.raises(PlacementError, match=r"transport 'rdma' needs a network endpoint on each coprocessor: pass "
                                             r"endpoint=Endpoint\(host=\.\.\., port=\.\.\.\) \(coprocessor 'dec' has none\)"):
        resolve(placement(endpoint=None))


@pytest.mark.parametrize("runs_in", ["thread", "controller-thread"])
def test_a_coprocessor_in_the_controllers_process_is_refused(runs_in):
    with pytest.raises(PlacementError) as info:
        resolve(placement(runs_in=runs_in))
    assert f"runs coprocessors in process, executor, not {runs_in!r}" in str(info.value)


@pytest.mark.parametrize("runs_in", ["thread", "controller-thread"])
def test_the_backend_itself_refuses_a_coprocessor_in_the_controllers_process(runs_in):
    """A C caller skips the plugin's runs_in declaration; the backend's own check says why."""
    with pytest.raises(TransportError, match="rdma joins processes") as info:
        check(lib.bl_config_check(c_string(get_library(), "library"), lib.BL_COPROCESSOR, c_string("dec", "key"),
                                  c_string("host=127.0.0.1;port=18515", "config"), runs_in_code("coprocessor", runs_in)))
    assert info.value.status == "BL_EINVAL"
