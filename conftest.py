"""The suite's stages: each test folder's wall time, printed at the end of a run (CI reads them
as its stage timings), with the soaks (tests marked ``soak``, or in a ``test_soak*`` file)
moved to the end as a stage of their own. Imports only pytest: tests/core runs with the core alone."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent
_STAGE_SECONDS: dict[str, float] = defaultdict(float)
_STAGE_TESTS: dict[str, int] = defaultdict(int)


def _is_soak(item: pytest.Item) -> bool:
    return item.get_closest_marker("soak") is not None or Path(str(item.fspath)).name.startswith("test_soak")


def stage_of(item: pytest.Item) -> str:
    """``plugins/transport-ucx``, ``tests/core``, ``compiler/tests/frontend``, or ``soaks``."""
    if _is_soak(item):
        return "soaks"
    try:
        parts = Path(str(item.fspath)).resolve().relative_to(_ROOT).parts
    except ValueError:
        return "elsewhere"
    if parts[0] == "plugins":
        return "/".join(parts[:2]) + ("/guest" if "guest" in parts else "")
    if parts[0] == "compiler":
        return "/".join(parts[:3]) if len(parts) > 3 else "compiler/tests"
    return "/".join(parts[:2])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: a long run (a million rounds, ...): it runs last, as a stage of its own")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_is_soak)  # stable: the order of everything else is kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    start = time.monotonic()
    yield
    stage = stage_of(item)
    _STAGE_SECONDS[stage] += time.monotonic() - start
    _STAGE_TESTS[stage] += 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _STAGE_SECONDS:
        return
    terminalreporter.section("stage times (wall seconds per test folder)")
    for stage, seconds in sorted(_STAGE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {_STAGE_TESTS[stage]:5d} tests  {stage}")
    terminalreporter.write_line(f"{sum(_STAGE_SECONDS.values()):8.1f} s  {sum(_STAGE_TESTS.values()):5d} tests  in all")
