"""Facts the docs state about the code, checked against the code so they cannot go stale:
the status -> exception table, the ABI version, the bl_runs_in codes, public names only."""

from __future__ import annotations

import re
from pathlib import Path

import backline_core
from backline_core import get_include
from backline_core._errors import STATUS, BacklineError, TransportError
from backline_core._native import lib

ROOT = Path(__file__).resolve().parents[2]
PLUGINS_MD = (ROOT / "docs" / "plugins.md").read_text()
HEADER = (Path(get_include()) / "backline" / "backline.h").read_text()


def _header_define(name: str) -> int:
    found = re.search(rf"^#define {name} (\d+)", HEADER, flags=re.M)
    assert found, f"backline.h defines no {name}"
    return int(found.group(1))


def _error_table() -> list[list[str]]:
    start = PLUGINS_MD.index("<!-- error-table:")
    rows = []
    for line in PLUGINS_MD[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def test_error_table_is_the_status_table() -> None:
    rows = _error_table()
    documented = {name: (int(value), cls, also) for name, value, cls, also, _ in rows}
    actual = {}
    for code, (name, cls) in STATUS.items():
        builtins = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"]
        actual[name] = (code, cls.__name__, ", ".join(builtins))
    assert documented == actual, "docs/plugins.md's status table differs from backline_core's"
    assert [r[0] for r in rows] == [name for _, (name, _) in sorted(STATUS.items(), reverse=True)], \
        "the table lists the statuses in the header's order"


def test_error_table_meanings_are_the_header_comments() -> None:
    for name, _, _, _, meaning in _error_table():
        comment = re.search(rf"\b{name} = -\d+,?\s*/\* (.*?) \*/", HEADER)
        assert comment and comment.group(1) == meaning, f"{name}: the header says {comment and comment.group(1)!r}"


def test_every_exported_error_class_is_documented() -> None:
    classes = [name for name in backline_core.__all__
               if isinstance(getattr(backline_core, name), type) and issubclass(getattr(backline_core, name),
                                                                                BacklineError)]
    status_classes = {cls.__name__ for _, cls in STATUS.values()}
    section = PLUGINS_MD[PLUGINS_MD.index("### Errors"):PLUGINS_MD.index("### Configuration keys")]
    for name in classes:
        assert f"`{name}`" in section, f"docs/plugins.md's Errors section does not mention {name}"
    # and every status class is exported: a caller can catch what the table names
    for name in status_classes:
        assert name in backline_core.__all__, f"{name} is in the status table but not exported by backline_core"
    assert issubclass(getattr(backline_core, "DeadlineError"), TransportError)


def test_abi_number_is_the_headers() -> None:
    version, minor = _header_define("BACKLINE_ABI_VERSION"), _header_define("BACKLINE_ABI_MINOR")
    assert lib.bl_abi_version() == version
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    stated = re.search(r"ABI (\d+)\.(\d+): `BACKLINE_ABI_VERSION` (\d+), `BACKLINE_ABI_MINOR` (\d+)", architecture)
    assert stated, "docs/architecture.md no longer states the ABI as 'ABI V.M: `BACKLINE_ABI_VERSION` V, ...'"
    assert tuple(map(int, stated.groups())) == (version, minor, version, minor), \
        f"docs/architecture.md states ABI {stated.group(0)!r}; backline.h has {version}.{minor}"
    current = re.search(r"`BACKLINE_ABI_VERSION` \(currently (\d+)\)", PLUGINS_MD)
    assert current and int(current.group(1)) == version, \
        f"docs/plugins.md says the ABI is currently {current and current.group(1)}; backline.h has {version}"


def test_runs_in_codes_are_the_headers() -> None:
    for name in ("BL_RUNS_ANY", "BL_RUNS_CONTROLLER_THREAD", "BL_RUNS_THREAD", "BL_RUNS_PROCESS"):
        stated = re.search(rf"`{name}` \((-?\d+)\)", PLUGINS_MD)
        assert stated, f"docs/plugins.md does not give {name}'s value"
        assert int(stated.group(1)) == getattr(lib, name), f"docs/plugins.md: {name} is {getattr(lib, name)}"


def test_docs_name_only_public_modules() -> None:
    """README.md and docs/*.md show plugin authors and users only backline_core, .sdk and .testing
    in their code (architecture.md, which records the internals, may name private modules in prose)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        code = "\n".join(re.findall(r"^```(?:python|bash|console)\n(.*?)^```", text, flags=re.S | re.M))
        private = re.findall(r"backline_core\._\w+", code)
        assert not private, f"{page.relative_to(ROOT)}: an example uses the private {private[0]}"
        if page.name not in ("architecture.md",):
            prose = re.findall(r"backline_core\._\w+(?:\.\w+)*", text)
            assert not prose, (f"{page.relative_to(ROOT)} names the private {prose[0]}; name what "
                               "backline_core, backline_core.sdk or backline_core.testing exports")
