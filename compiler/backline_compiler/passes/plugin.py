"""Entry point of the compiler's own passes in ``backline.passes``: the records of :data:`PASSES`."""

from __future__ import annotations

from backline_core import Pass, hookimpl

from . import PASSES, loader


@hookimpl
def backline_passes() -> list[Pass]:
    return [Pass(name=name, summary=summary, load=loader(name)) for name, (_, _, summary) in PASSES.items()]
