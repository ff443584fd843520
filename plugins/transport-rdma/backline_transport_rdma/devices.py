"""The verbs devices of this machine, their ports and GIDs (``backline rdma devices``), through pyverbs.

pyverbs is Debian's ``python3-pyverbs``, built for the system CPython 3.11. Another 3.11
interpreter (a pyenv build, a venv) can import it, but only the ``pyverbs`` package is taken
from Debian's ``dist-packages``: putting that directory on ``sys.path`` would shadow this
environment's own packages with every Debian one (:func:`load_pyverbs`).
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import socket
import struct
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from backline_core import BacklineError

#: Where Debian installs python3-pyverbs.
DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
#: The interpreter Debian's pyverbs is built for.
PYVERBS_PYTHON = (3, 11)
MISSING = "pyverbs is not installed: apt-get install python3-pyverbs (Debian's, for CPython 3.11)"

_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}
_GID_TYPES = {0: "IB", 1: "RoCE v1", 2: "RoCE v2"}  # enum ibv_gid_type (IBV_GID_TYPE_*)


class PyverbsUnavailable(BacklineError):
    """pyverbs cannot be imported here (not installed, or another interpreter than it is built for)."""


@dataclass(frozen=True)
class Gid:
    """One entry of a port's GID table."""

    index: int
    address: str  #: IPv6 text, e.g. ``::ffff:127.0.0.1``
    type: str  #: ``RoCE v2``, ``RoCE v1`` or ``IB``


@dataclass(frozen=True)
class Port:
    """One port of a device."""

    number: int
    state: str  #: ``ACTIVE``, ``DOWN``, ...
    mtu: int  #: active MTU in bytes (0 if the device reports none)
    link_layer: str  #: ``Ethernet`` (RoCE) or ``InfiniBand``
    gids: tuple[Gid, ...]


@dataclass(frozen=True)
class Device:
    """One verbs device (``ibv_get_device_list``)."""

    name: str
    node_guid: str  #: ``xxxx:xxxx:xxxx:xxxx``
    ports: tuple[Port, ...]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_pyverbs() -> ModuleType:
    """Import pyverbs: from this environment if it has it, else only that package from Debian's dist-packages.

    Raises PyverbsUnavailable (one line saying what to do) if it is missing or this interpreter
    cannot load it."""
    if "pyverbs" in sys.modules:
        return sys.modules["pyverbs"]
    version = sys.version_info[:2]
    if sys.implementation.name != "cpython" or version != PYVERBS_PYTHON:
        raise PyverbsUnavailable(
            f"pyverbs (Debian's python3-pyverbs) is built for CPython {PYVERBS_PYTHON[0]}.{PYVERBS_PYTHON[1]}, and this "
            f"is {sys.implementation.name} {version[0]}.{version[1]} ({sys.executable}); run it with a CPython "
            f"{PYVERBS_PYTHON[0]}.{PYVERBS_PYTHON[1]} interpreter, or list the devices with ibv_devinfo -v")
    try:
        spec = importlib.util.find_spec("pyverbs")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        spec = importlib.machinery.PathFinder.find_spec("pyverbs", [DEBIAN_DIST_PACKAGES])
    if spec is None or spec.loader is None:
        raise PyverbsUnavailable(MISSING)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyverbs"] = module  # before exec: its submodules import through the package
    try:
        spec.loader.exec_module(module)
        importlib.import_module("pyverbs.device")
    except ImportError as exc:
        for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
            del sys.modules[name]
        raise PyverbsUnavailable(f"pyverbs at {spec.origin} does not import here ({exc}); {MISSING}") from None
    return module


def list_devices() -> list[Device]:
    """Every verbs device with its ports and their non-zero GIDs; empty when libibverbs finds none."""
    load_pyverbs()
    import pyverbs.device as pd
    from pyverbs.pyverbs_error import PyverbsError

    try:
        found = pd.get_device_list()
    except PyverbsError:  # libibverbs returns no list at all where the kernel has no verbs (ENOSYS)
        return []
    devices = []
    for dev in found:
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        try:
            ctx = pd.Context(name=name)
        except PyverbsError as exc:
            raise BacklineError(f"RDMA device {name!r} is listed but does not open: {exc}") from None
        try:
            attr = ctx.query_device()
            ports = tuple(_port(ctx, number) for number in range(1, attr.phys_port_cnt + 1))
        except PyverbsError as exc:
            raise BacklineError(f"RDMA device {name!r} does not answer a query: {exc}") from None
        finally:
            ctx.close()
        devices.append(Device(name=name, node_guid=_guid_text(attr.node_guid), ports=ports))
    return devices


def _port(ctx: Any, number: int) -> Port:
    from pyverbs.pyverbs_error import PyverbsError

    attr = ctx.query_port(number)
    gids = []
    for index in range(attr.gid_tbl_len):
        try:
            entry = ctx.query_gid_ex(number, index)
        except PyverbsError:  # an empty slot of the table
            continue
        raw = struct.pack("=QQ", entry.gid_subnet_prefix, entry.gid_interface_id)  # ibv_gid's bytes, as stored
        if not any(raw):
            continue
        gids.append(Gid(index=index, address=socket.inet_ntop(socket.AF_INET6, raw),  # inet_ntop: ::ffff:127.0.0.1
                        type=_GID_TYPES.get(entry.gid_type, f"type {entry.gid_type}")))
    return Port(number=number, state=_PORT_STATES.get(attr.state, f"state {attr.state}"),
                mtu=_MTUS.get(attr.active_mtu, 0), link_layer=_LINK_LAYERS.get(attr.link_layer, str(attr.link_layer)),
                gids=tuple(gids))


def _guid_text(node_guid: int) -> str:
    """ibv_device_attr.node_guid (network order in a host integer) as ``xxxx:xxxx:xxxx:xxxx``."""
    text = struct.pack("=Q", node_guid).hex()
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def format_devices(devices: list[Device]) -> str:
    """The devices as a table: per device a heading, then a row per GID of each port."""
    blocks = []
    for dev in devices:
        rows = [("port", "state", "MTU", "link layer", "GID", "address", "type")]
        for port in dev.ports:
            head = (str(port.number), port.state, str(port.mtu or "?"), port.link_layer)
            if not port.gids:
                rows.append((*head, "-", "(no GIDs)", ""))
            for i, gid in enumerate(port.gids):
                rows.append((*(head if i == 0 else ("",) * 4), str(gid.index), gid.address, gid.type))
        if not dev.ports:
            rows.append(("-", "(no ports)", "", "", "", "", ""))
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        lines = [f"{dev.name}  node GUID {dev.node_guid}"]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
