"""A decoder's parameters, declared as a JSON Schema and checked against it.

A decoder record's ``schema`` is an object schema: each property has a ``type``, a
``default``, a ``description`` and, where it has one, a range (``minimum``/``maximum``) or a
choice (``enum``); unknown keys are refused (``additionalProperties: false``). Values from a
command line (``--decoder-param K=V``) arrive as text and are read by the property's type
first. :func:`check_params` returns the parameters with the defaults filled in, or raises
:class:`~backline_core.InvalidArgumentError` in one line saying what was wrong.

>>> schema = object_schema({"depth": {"type": "integer", "default": 1, "minimum": 1, "maximum": 4,
...                                   "description": "largest error weight in the table"}})
>>> check_params("lut", schema, {"depth": "2"})
{'depth': 2}
>>> check_params("lut", schema, {"depht": 2})
Traceback (most recent call last):
...
backline_core._errors.InvalidArgumentError: decoder 'lut': unknown parameter 'depht'; its parameters: depth
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._errors import InvalidArgumentError

def object_schema(properties: Mapping[str, Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """The object schema of a decoder with these ``properties`` (unknown keys refused)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {k: dict(v) for k, v in properties.items()}, "additionalProperties": False, **extra}


def check_schema(owner: str, schema: Mapping[str, Any]) -> None:
    """Refuse a schema that is not a valid JSON Schema (Draft 2020-12)."""
    import jsonschema

    from ._hookspecs import _thawed

    try:
        jsonschema.Draft202012Validator.check_schema(_thawed(schema))
    except jsonschema.SchemaError as exc:
        raise ValueError(f"{owner}: its parameter schema is not a JSON Schema: {exc.message}") from None


def _from_text(value: str, prop: Mapping[str, Any]) -> Any:
    kinds = prop.get("type", "string")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    for kind in kinds:
        try:
            if kind == "integer":
                return int(value) if value.strip().lstrip("+-").isdigit() else int(value, 0)
            if kind == "number":
                return float(value)
            if kind == "boolean" and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            if kind in ("array", "object", "null"):
                return json.loads(value)
            if kind == "string":
                return value
        except (ValueError, json.JSONDecodeError):
            continue
    return value  # the schema says why it is wrong


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_params(owner: str, schema: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` checked against ``schema``, text read by type, defaults filled in (see the module)."""
    import jsonschema

    props: Mapping[str, Any] = schema.get("properties", {})
    unknown = sorted(k for k in params if k not in props)
    if unknown and schema.get("additionalProperties", True) is False:
        known = ", ".join(sorted(props)) or "none"
        raise InvalidArgumentError(f"decoder {owner!r}: unknown parameter{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(map(repr, unknown))}; its parameters: {known}")
    values = {k: _from_text(v, props[k]) if isinstance(v, str) and k in props else v for k, v in params.items()}
    from ._hookspecs import _thawed

    validator = jsonschema.Draft202012Validator(_thawed(schema))
    error = jsonschema.exceptions.best_match(validator.iter_errors(values))
    if error is not None:
        where = error.path[0] if error.path else None
        if where is not None:
            meaning = props.get(where, {}).get("description")
            hint = f" ({meaning})" if meaning else ""
            raise InvalidArgumentError(f"decoder {owner!r}: parameter {where}={_shown(values[where])}: "
                                       f"{error.message}{hint}")
        raise InvalidArgumentError(f"decoder {owner!r}: parameters {_shown(values)}: {error.message}")
    return {**{k: v["default"] for k, v in props.items() if "default" in v}, **values}
