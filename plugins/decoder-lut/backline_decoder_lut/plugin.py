"""Entry point: the decoder ``lut``, a lookup table of error patterns of weight 1..depth.

It builds from a detector error model or matrices (``build_from_dem``, ``build_from_matrices``:
the reply is the observables, optionally followed by the detectors) or from an explicit ``H``
(``build(h=H, depth=...)``: the reply is the per-column error estimate).
"""

from __future__ import annotations

from typing import Any

from backline_core import Decoder, hookimpl
from backline_core.sdk import REPLIES, check_params

from .params import SCHEMA


def build_lut(h: Any, **params: Any) -> Any:
    """From an explicit H: the reply is the per-column error estimate."""
    from .decoder import build

    return build(h, **check_params("lut", SCHEMA, params))


def from_dem(dem: Any, **kwargs: Any) -> Any:
    from .decoder import from_dem

    return from_dem(dem, **kwargs)


def from_matrices(m: Any, **kwargs: Any) -> Any:
    from .decoder import from_matrices

    return from_matrices(m, **kwargs)


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [Decoder(name="lut", summary="lookup table of error patterns up to a weight (CUDA-Q QEC's LUT rules)",
                    build=build_lut, schema=SCHEMA, from_dem=from_dem, from_matrices=from_matrices, replies=REPLIES)]
