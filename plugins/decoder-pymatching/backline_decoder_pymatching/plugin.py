"""Entry point: the decoder ``pymatching`` (minimum-weight perfect matching, PyMatching 2)."""

from __future__ import annotations

from typing import Any

from backline_core import Decoder, InvalidArgumentError, hookimpl
from backline_core.sdk import REPLIES, object_schema

SCHEMA = object_schema({
    "enable_correlations": {"type": "boolean", "default": False,
                            "description": "PyMatching's correlated matching (uses the DEM's decomposed hyperedges)"},
})


def build(**params: Any) -> Any:
    raise InvalidArgumentError("the pymatching decoder builds from a detector error model or matrices: "
                               "plugins.get('decoder', 'pymatching').build_from_dem(dem)")


def from_dem(dem: Any, **kwargs: Any) -> Any:
    from .decoder import from_dem

    return from_dem(dem, **kwargs)


def from_matrices(m: Any, **kwargs: Any) -> Any:
    from .decoder import from_matrices

    return from_matrices(m, **kwargs)


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [Decoder(name="pymatching", summary="minimum-weight perfect matching (PyMatching 2) from a decomposed DEM",
                    build=build, schema=SCHEMA, from_dem=from_dem, from_matrices=from_matrices, replies=REPLIES,
                    decomposed_dem=True)]
