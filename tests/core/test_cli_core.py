"""`backline` CLI with only backline-core installed: the built-in decoders are listed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backline_core.hookspecs import ENTRY_POINT_GROUPS

KEYS = {"kind", "name", "distribution", "version", "serves", "error"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core.cli", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def listing_json() -> list[dict]:
    proc = cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plugins_lists_the_builtin_decoders():
    proc = cli("plugins")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "decoders:" in lines
    decoders = lines[lines.index("decoders:") + 1:]
    for name in ("echo", "steane"):
        row = [line for line in decoders if line.split()[:1] == [name]]
        assert len(row) == 1, proc.stdout
        assert "backline-core" in row[0]
        assert "runs on cpu" in row[0]
        assert "FAILED" not in row[0]


def test_plugins_json_rows(listing_json):
    assert isinstance(listing_json, list) and listing_json
    for row in listing_json:
        assert set(row) == KEYS
        assert row["kind"] in set(ENTRY_POINT_GROUPS.values())
    builtin = {row["name"]: row for row in listing_json if row["kind"] == "decoder" and row["distribution"] == "backline-core"}
    assert {"echo", "steane"} <= set(builtin)
    for name in ("echo", "steane"):
        row = builtin[name]
        assert row["error"] is None
        assert row["serves"] == "runs on cpu"
        assert row["version"]


def test_plugins_json_matches_the_python_listing(listing_json):
    from backline_core import plugins

    rows = {(r.kind, r.name): r for r in plugins.listing()}
    for row in listing_json:
        if row["distribution"] == "(registered in process)":
            continue
        r = rows[(row["kind"], row["name"])]
        assert (r.distribution, r.version, r.serves, r.error) == (row["distribution"], row["version"], row["serves"], row["error"])


def test_help():
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: backline")
    for command in ("plugins", "bench", "coprocessor"):
        assert command in proc.stdout


def test_plugins_help():
    proc = cli("plugins", "--help")
    assert proc.returncode == 0
    assert "--json" in proc.stdout and "--strict" in proc.stdout


def test_no_command_is_a_usage_error():
    proc = cli()
    assert proc.returncode == 2
    assert "usage: backline" in proc.stderr
