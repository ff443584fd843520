"""A plugin imports from the core only ``backline_core``'s public names and ``backline_core.sdk``
(its tests and its benchmark scripts may add ``backline_core.testing``, the test kit: network namespaces,
test secrets): everything else in the core is private and may
change, so a plugin that reached into it would break without warning."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import backline_core
import backline_core.sdk as sdk

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
ALLOWED = {"backline_core", "backline_core.sdk", "backline_core.sdk.build"}
ALLOWED_IN_TESTS = ALLOWED | {"backline_core.testing", "backline_core.testing.conformance", "backline_core.sinter"}


def _plugin_files() -> list[Path]:
    return sorted(p for p in PLUGINS.rglob("*.py") if ".egg-info" not in str(p) and "/build/" not in str(p))


def _core_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of a backline_core module in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "backline_core":
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "backline_core"]
    return found


def _strings_naming_private_modules(path: Path) -> list[tuple[int, str]]:
    """``python -m backline_core._x`` and the like: a private module named in a string."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.startswith("backline_core._")]


def test_the_plugins_folder_is_there() -> None:
    assert len(_plugin_files()) > 50, f"{PLUGINS} should hold the plugins' sources"


def test_plugins_import_only_the_public_names_and_the_sdk() -> None:
    bad = []
    for path in _plugin_files():
        # a benchmark script sets up what a test does (two namespaces, a secret): the test kit is its too
        is_test = bool({"tests", "scripts"} & set(path.relative_to(PLUGINS).parts))
        allowed = ALLOWED_IN_TESTS if is_test else ALLOWED
        for line, module, names in _core_imports(path):
            where = f"{path.relative_to(REPO)}:{line}"
            if module not in allowed:
                bad.append(f"{where}: imports {module}")
            elif module == "backline_core":
                bad += [f"{where}: backline_core.{n} is not public" for n in names if n not in backline_core.__all__]
            elif module == "backline_core.sdk":
                bad += [f"{where}: backline_core.sdk has no {n}" for n in names if n not in sdk.__all__]
        bad += [f"{path.relative_to(REPO)}:{line}: names the private module in {text!r}"
                for line, text in _strings_naming_private_modules(path)]
    assert not bad, "plugins must use backline_core's public names and backline_core.sdk only:\n" + "\n".join(bad)


def test_core_modules_other_than_the_public_ones_are_underscore_named() -> None:
    public = {"sdk", "sinter", "testing"}  # sinter: the decoders as sinter.Decoder (an optional extra)
    names = {p.stem for p in (REPO / "backline_core").glob("*.py")} | \
        {p.name for p in (REPO / "backline_core").iterdir() if (p / "__init__.py").exists()}
    exposed = sorted(n for n in names if not n.startswith("_") and n not in public)
    assert not exposed, f"core modules {exposed} are neither underscore-named (private) nor the SDK"


@pytest.mark.parametrize("name", sdk.__all__)
def test_every_sdk_name_resolves(name: str) -> None:
    assert getattr(sdk, name) is not None


def test_an_unknown_sdk_name_says_where_the_names_are() -> None:
    with pytest.raises(AttributeError, match=r"backline_core\.sdk has no 'nosuch'.*__all__"):
        sdk.nosuch  # noqa: B018


def test_every_public_name_is_there() -> None:
    for name in backline_core.__all__:
        assert hasattr(backline_core, name), name
    importlib.import_module("backline_core.sdk.build")
