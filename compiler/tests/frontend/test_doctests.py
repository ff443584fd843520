"""The frontend's docstring examples run."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("pennylane")

MODULES = ["device", "qjit", "decode", "runtime_call"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"backline_compiler.frontend.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
