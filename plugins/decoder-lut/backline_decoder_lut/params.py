"""The ``lut`` decoder's parameters as a JSON Schema; readable without loading the native library."""

from __future__ import annotations

import os
import re

from backline_core.sdk import object_schema

_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "lut.h")

#: the default refusal threshold of a table's estimated size (1 GiB)
DEFAULT_MAX_TABLE_BYTES = 1 << 30


def _max_depth() -> int:
    # from lut.h's text, so that listing plugins needs no native build
    with open(_HEADER) as fh:
        found = re.search(r"^#define LUT_MAX_DEPTH (\d+)u", fh.read(), re.M)
    if found is None:
        raise ImportError(f"{_HEADER} does not define LUT_MAX_DEPTH")
    return int(found.group(1))


SCHEMA = object_schema({
    "depth": {"type": "integer", "default": 1, "minimum": 1, "maximum": _max_depth(),
              "description": "largest error weight in the table (cudaqx's lut_error_depth)"},
    "max_table_bytes": {"type": "integer", "default": DEFAULT_MAX_TABLE_BYTES, "minimum": 1,
                        "description": "refuse a table whose estimated size in bytes is larger"},
})
