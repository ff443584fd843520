"""Entry point: the decoders ``ldpc-bposd`` and ``ldpc-bplsd`` (ldpc's own, by their parameter names)."""

from __future__ import annotations

from functools import partial
from typing import Any

from backline_core import Decoder, InvalidArgumentError, hookimpl
from backline_core.sdk import REPLIES, object_schema

_BP = {
    "bp_method": {"type": "string", "default": "product_sum", "enum": ["product_sum", "minimum_sum"],
                  "description": "belief propagation's check-node rule (ldpc 2.4.1 defaults to product_sum)"},
    "max_iter": {"type": "integer", "default": 0, "minimum": 0, "maximum": 1 << 20,
                 "description": "BP iterations (0: as many as columns, ldpc's rule)"},
    "ms_scaling_factor": {"type": "number", "default": 1.0, "minimum": 0, "maximum": 1,
                          "description": "min-sum scaling factor (0: adaptive)"},
    "schedule": {"type": "string", "default": "parallel", "enum": ["parallel", "serial"],
                 "description": "BP's message schedule"},
}
SCHEMAS = {
    "ldpc-bposd": object_schema({**_BP,
        "osd_method": {"type": "string", "default": "osd0", "enum": ["osd0", "osd_cs", "osd_e"],
                       "description": "ordered-statistics post-processing when BP does not converge"},
        "osd_order": {"type": "integer", "default": 0, "minimum": 0, "maximum": 60,
                      "description": "OSD search depth (at most columns - rank(H))"}}),
    "ldpc-bplsd": object_schema({**_BP,
        "lsd_method": {"type": "string", "default": "lsd0", "enum": ["lsd0", "lsd_cs", "lsd_e"],
                       "description": "localised-statistics post-processing of each cluster"},
        # ldpc's combination sweep sets candidate bits i < j < lsd_order in a vector of a cluster's free
        # columns, which can be one: past 24 that write leaves glibc's smallest chunk (24 bytes) and ldpc
        # aborts (free(): invalid pointer); up to 24 it stays inside the chunk and decodes as ldpc does
        "lsd_order": {"type": "integer", "default": 0, "minimum": 0, "maximum": 24,
                      "description": "LSD search depth in each cluster (at most 24: ldpc corrupts its heap above)"},
        "bits_per_step": {"type": "integer", "default": 1, "minimum": 1, "maximum": 1 << 20,
                          "description": "bits a cluster grows by in each step"}}),
}


def build(name: str, **params: Any) -> Any:
    raise InvalidArgumentError(f"the {name} decoder builds from a detector error model or matrices: "
                               f"plugins.get('decoder', {name!r}).build_from_dem(dem)")


def from_dem(name: str, dem: Any, **kwargs: Any) -> Any:
    from .decoder import from_dem

    return from_dem(name, dem, **kwargs)


def from_matrices(name: str, m: Any, **kwargs: Any) -> Any:
    from .decoder import from_matrices

    return from_matrices(name, m, **kwargs)


@hookimpl
def backline_decoders() -> list[Decoder]:
    summaries = {"ldpc-bposd": "ldpc's BpOsdDecoder (the reference BP+OSD)",
                 "ldpc-bplsd": "ldpc's BpLsdDecoder (BP + localised statistics)"}
    return [Decoder(name=name, summary=summaries[name], build=partial(build, name), schema=SCHEMAS[name],
                    from_dem=partial(from_dem, name), from_matrices=partial(from_matrices, name), replies=REPLIES)
            for name in SCHEMAS]
