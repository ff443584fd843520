"""The module's placement, and its resolution against the installed plugins, as passes read them.

A module carries its placement as the module attribute ``backline.placement`` (a
``#transport.backline<...>``). A pass that needs plugin facts -- backend libraries, where
a coprocessor runs, its built function -- calls :func:`module_resolution`, which is
:func:`backline_core._resolution.resolve`: the core caches it per placement value, so the
passes of one compile share a single resolution.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException

from backline_core._errors import BacklineError
from backline_core._placement import Placement
from backline_core._resolution import Resolution, resolve

from ..dialects import transport as t

#: Module attribute holding the placement (a #transport.backline<...>).
PLACEMENT_ATTR = "backline.placement"


def module_placement(module: ModuleOp, pass_name: str) -> Placement | None:
    """The placement on ``module`` (None without the attribute); its shape is checked, no plugin is."""
    attr = module.attributes.get(PLACEMENT_ATTR)
    if attr is None:
        return None
    if not isinstance(attr, t.BacklineAttr):
        raise PassFailedException(
            f"{pass_name}: module attribute {PLACEMENT_ATTR} must be a #transport.backline<...> placement, got {attr}"
        )
    return attr.placement()


def module_resolution(module: ModuleOp, pass_name: str) -> Resolution | None:
    """The resolved placement of ``module`` (None without one); the core's message if it cannot run."""
    placement = module_placement(module, pass_name)
    if placement is None:
        return None
    try:
        return resolve(placement)
    except BacklineError as exc:
        raise PassFailedException(f"{pass_name}: {exc}") from exc
