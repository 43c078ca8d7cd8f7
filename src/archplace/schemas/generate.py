"""The parts of the JSON Schemas generated from declared fields, and the command that writes them.

The plan object (``common.schema.json``, ``$defs/plan``: the ``plan`` of ``plan --json`` and
``evaluate --json``) is generated from :class:`archplace.placement.plan.Plan`: one property per
field, its description the field's help (:func:`archplace.options.option`), its JSON type from
the field's type (an enum's values, a whole number's declared range, a list's items, null for an
optional field), and ``required`` every field :meth:`Plan.to_dict` always writes. The derived
``stage_device`` is the one hand-written property. ``make schemas``
(``tools/generate_schemas.py``) rewrites the file; ``tests/test_grid_derived.py`` fails while the
file differs from what this module generates.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

from archplace.options import METADATA_KEY, Option

WIDTH = 110
"""Longest line the writer puts a JSON value on before it spreads it over several lines."""

_HAND_WRITTEN = ("stage_device",)
"""Properties of the plan object that are not fields (derived when written, ignored when read)."""


def _type_schema(kind: Any, info: Option) -> dict[str, Any]:
    """The JSON Schema of a value of ``kind`` (numbers bounded by ``info.low`` / ``info.high``)."""
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        (only,) = inner
        return {"anyOf": [_type_schema(only, info), {"type": "null"}]}
    if typing.get_origin(kind) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], info)}
        return {"type": "array", "prefixItems": [_type_schema(arg, info) for arg in args],
                "minItems": len(args), "maxItems": len(args)}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"enum": [member.value for member in kind]}
    if kind is bool:
        return {"type": "boolean"}
    if kind in (int, float):
        out: dict[str, Any] = {"type": "integer" if kind is int else "number"}
        if info.low is not None:
            out["minimum"] = info.low
        if info.high is not None:
            out["maximum"] = info.high
        return out
    if kind is str:
        return {"type": "string"}
    raise TypeError(f"no JSON Schema rule for {kind!r}")


def _description(field: dataclasses.Field[Any], info: Option, sparse: tuple[str, ...]) -> str:
    if info.help is None:
        raise TypeError(f"{field.name}: a generated property needs the field's help")
    text = f"{info.help}."
    if field.name in sparse:
        default = field.default.value if isinstance(field.default, enum.Enum) else field.default
        text += f" Written only when not {default} (absent: {default})."
    return text


def plan_properties() -> tuple[dict[str, Any], list[str]]:
    """The generated ``properties`` of the plan object (field order) and its ``required`` keys
    (the fields :meth:`Plan.to_dict` always writes, then ``stage_device``).

    Raises:
        TypeError: a field without help, or of a type with no JSON rule.
    """
    from archplace.placement.plan import Plan

    hints = typing.get_type_hints(Plan)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(Plan):
        info = field.metadata[METADATA_KEY]
        properties[field.name] = {"description": _description(field, info, Plan.SPARSE),
                                  **_type_schema(hints[field.name], info)}
        if field.name not in Plan.SPARSE and not info.engine:
            required.append(field.name)
    return properties, [*required, *_HAND_WRITTEN]


def common_schema(current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (the parsed ``common.schema.json``) with the plan object's generated parts
    in place (its hand-written properties kept after the fields')."""
    plan = current["$defs"]["plan"]
    properties, required = plan_properties()
    kept = {name: plan["properties"][name] for name in _HAND_WRITTEN}
    new_plan = {**plan, "properties": {**properties, **kept}, "required": required}
    return {**current, "$defs": {**current["$defs"], "plan": new_plan}}


def dumps(value: Any, indent: int = 0) -> str:
    """``value`` as JSON text: on one line when it fits in :data:`WIDTH` characters at
    ``indent``, else an object or array spread one member per line, two spaces deeper."""
    flat = json.dumps(value, ensure_ascii=False)
    if indent + len(flat) <= WIDTH or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: {dumps(item, indent + 2)}"
                 for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(f"{pad}{dumps(item, indent + 2)}" for item in value) + "\n" + " " * indent + "]"


def common_path() -> Path:
    """The path of ``common.schema.json`` in this source tree."""
    return Path(__file__).with_name("common.schema.json")


def common_text() -> str:
    """The text ``common.schema.json`` must have: its current content with the generated parts."""
    current = json.loads(common_path().read_text(encoding="utf-8"))
    return dumps(common_schema(current)) + "\n"
