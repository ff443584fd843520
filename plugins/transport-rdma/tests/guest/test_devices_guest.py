"""``backline rdma devices`` over a real verbs device: the Soft-RoCE guest's rxe0 on lo.

Elsewhere the ``rdma_device`` fixture skips (or fails under BACKLINE_REQUIRE_RDMA=1). The guest's
rxe0 has port 1, ACTIVE, with GIDs 0 fe80::200:ff:fe00:0, 1 ::ffff:127.0.0.1, 2 ::1, all RoCE v2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from backline_transport_rdma.cli import main
from backline_transport_rdma.devices import format_devices, list_devices

pytestmark = pytest.mark.usefixtures("rdma_device")

BACKLINE = os.path.join(os.path.dirname(sys.executable), "backline")
IN_GUEST = os.environ.get("BACKLINE_IN_GUEST") == "1"  # run-in-guest sets it: rxe0 is known to be there


def test_devices_lists_the_device_its_port_and_gids(rdma_device):
    command = [BACKLINE] if os.access(BACKLINE, os.X_OK) else [sys.executable, "-m", "backline_core"]
    proc = subprocess.run([*command, "rdma", "devices"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert any(line.startswith(f"{rdma_device}  node GUID ") for line in lines), proc.stdout
    if not IN_GUEST:
        return
    port1 = [line.split() for line in lines if line.split()[:2] == ["1", "ACTIVE"]]
    assert port1, proc.stdout  # port 1, ACTIVE (then MTU, link layer, the first GID)
    assert port1[0][3] == "Ethernet"
    gid1 = [line for line in lines if "::ffff:127.0.0.1" in line]
    assert len(gid1) == 1 and gid1[0].split()[-3:] == ["::ffff:127.0.0.1", "RoCE", "v2"], proc.stdout
    assert gid1[0].split()[-4] == "1"  # its index


def test_devices_json_parses_and_matches_the_table(rdma_device, capsys):
    assert main(["devices", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    devices = json.loads(out)
    device = next(d for d in devices if d["name"] == rdma_device)
    assert len(device["node_guid"].split(":")) == 4
    assert set(device["ports"][0]) == {"number", "state", "mtu", "link_layer", "gids"}
    every_gid = [g for d in devices for p in d["ports"] for g in p["gids"]]
    assert all(g["address"] != "::" for g in every_gid)  # all-zero GIDs are left out
    assert {g["type"] for g in every_gid} <= {"RoCE v2", "RoCE v1", "IB"}
    assert format_devices(list_devices()).startswith(f"{devices[0]['name']}  node GUID {devices[0]['node_guid']}")
    if not IN_GUEST:
        return
    port = device["ports"][0]
    assert (port["number"], port["state"], port["link_layer"]) == (1, "ACTIVE", "Ethernet")
    assert port["mtu"] in (1024, 2048, 4096)
    gids = {g["index"]: (g["address"], g["type"]) for g in port["gids"]}
    assert gids[1] == ("::ffff:127.0.0.1", "RoCE v2")
    assert gids[2] == ("::1", "RoCE v2")
    assert gids[0][0].startswith("fe80::")
