"""The compiler as an xDSL universe: ``xdsl-opt`` (and ``backline-opt``) find Backline's
dialects and passes through the ``xdsl.universe`` entry point ``backline``.

It lists the compiler's own dialects and passes; importing it imports neither them nor
the core. Passes that other packages add through ``backline.passes`` are not in it:
``backline-opt`` adds those from the plugin registry.
"""

from __future__ import annotations

from xdsl.universe import Universe

from . import dialects, passes

BACKLINE_UNIVERSE = Universe(all_dialects=dialects.loaders(), all_passes=passes.loaders())
