"""The examples in the core's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import backline_core

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(backline_core.__path__, "backline_core.")
    if m.name not in ("backline_core._cffi_build", "backline_core._native", "backline_core.__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
