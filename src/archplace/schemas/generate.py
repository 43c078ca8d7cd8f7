"""The parts of the JSON Schemas generated from declared fields, and the command that writes them.

* The plan object (``common.schema.json``, ``$defs/plan``: the ``plan`` of ``plan --json`` and
  ``evaluate --json``) is generated from :class:`archplace.placement.plan.Plan`: one property per
  field, its description the field's help (:func:`archplace.base.options.option`), its JSON type from
  the field's type (an enum's values, a whole number's declared range, a list's items, null for
  an optional field), and ``required`` every field :meth:`Plan.to_dict` always writes. The
  derived ``stage_device`` is the one hand-written property.
* Every other property of an output that echoes an option (the micro-batch and TP width of
  ``graph --json``, the attention and capacity factor of a search, ...) is listed in
  :data:`DERIVED`: its JSON type and range come from the field it echoes; its description, which
  says what the value means in that output, stays hand-written.

``make schemas`` (``tools/generate_schemas.py``) rewrites the files; ``tests/test_grid_derived.py``
fails while a file differs from what this module generates, and ``tests/test_declared_checks.py``
while a schema property named as an option is neither derived nor listed in :data:`UNRELATED`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

from archplace.base.options import METADATA_KEY, Option, span

WIDTH = 110
"""Longest line the writer puts a JSON value on before it spreads it over several lines."""

_HAND_WRITTEN = ("stage_device",)
"""Properties of the plan object that are not fields (derived when written, ignored when read)."""


DERIVED: dict[str, dict[str, tuple[str, str]]] = {
    "common.schema.json": {
        "/$defs/attention": ("ModelSpec", "attention"),
        "/$defs/kernels": ("ModelSpec", "kernels"),
        "/$defs/capacity_factor": ("ModelSpec", "capacity_factor"),
        "/$defs/expert_load_imbalance": ("ModelSpec", "expert_load_imbalance"),
        "/$defs/recompute_modules": ("ModelSpec", "recompute_modules"),
        "/$defs/expert_weighting": ("ModelSpec", "expert_weighting"),
        "/$defs/loss": ("ModelSpec", "loss"),
        "/$defs/swiglu_fp8_input": ("ModelSpec", "swiglu_fp8_input"),
        "/$defs/kernel_efficiency/properties/tp_comm_overlap": ("HardwareSpec", "tp_comm_overlap"),
        "/$defs/kernel_efficiency/properties/pp_comm_overlap": ("HardwareSpec", "pp_comm_overlap"),
        "/$defs/kernel_efficiency/properties/ep_comm_overlap": ("HardwareSpec", "ep_comm_overlap"),
    },
    "estimate.schema.json": {
        "/properties/tp": ("Plan", "tp"),
        "/properties/micro_batch": ("Plan", "micro_batch"),
        "/properties/seq_len": ("ModelSpec", "seq_len"),
    },
    "graph.schema.json": {
        "/properties/micro_batch": ("Plan", "micro_batch"),
        "/properties/seq_len": ("ModelSpec", "seq_len"),
        "/properties/tp": ("Plan", "tp"),
        "/properties/sp": ("Plan", "sp"),
        "/properties/ep": ("Plan", "ep"),
        "/properties/etp": ("Plan", "etp"),
    },
    "search.schema.json": {
        "/$defs/search/properties/devices": ("ClusterSpec", "devices"),
        "/$defs/search/properties/global_batch": ("ClusterSpec", "global_batch"),
        "/$defs/search/properties/fuse": ("ModelSpec", "fuse"),
    },
}
"""Per schema file, the JSON pointer of each property that echoes an option, and the spec field
(class name in :mod:`archplace.front.specs`, field name) whose type and range it takes."""

UNRELATED: dict[str, str] = {
    "model": "a model's name as the output reports it (a preset or the config's name), not the input path",
    "models": "a several-model search's per-model results, not the model inputs",
    "hardware": "the chip's name as the output reports it, not the preset or file given",
    "per_model": "the per-model searches' results, not the flag that asked for them",
    "objective": "the objective that was maximised, an enum of the names the search spec accepts",
    "strategy": "the strategy that ran, a name the search spec accepts",
    "attention_kernel": "the FAMILY/PRESET of the table used, not the family asked for",
}
"""Schema properties named like an option that are not that option's value, with the reason."""


def field_schema(spec: type, name: str) -> dict[str, Any]:
    """The JSON Schema of the resolved value of field ``name`` of ``spec`` as an output echoes
    it: its type without None (an output reports the value used: a model's own sequence length
    for a None ``seq_len``), numbers bounded by the declared range
    (:func:`archplace.base.options.span`)."""
    kind = typing.get_type_hints(spec)[name]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    return _type_schema(kind, *span(spec, name))


def _type_schema(kind: Any, low: float | None, high: float | None) -> dict[str, Any]:
    """The JSON Schema of a value of ``kind`` (numbers bounded by ``low`` / ``high``)."""
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        (only,) = inner
        return {"anyOf": [_type_schema(only, low, high), {"type": "null"}]}
    if typing.get_origin(kind) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], low, high)}
        return {"type": "array", "prefixItems": [_type_schema(arg, low, high) for arg in args],
                "minItems": len(args), "maxItems": len(args)}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"enum": [member.value for member in kind]}
    if kind is bool:
        return {"type": "boolean"}
    if kind in (int, float):
        out: dict[str, Any] = {"type": "integer" if kind is int else "number"}
        if low is not None:
            out["minimum"] = low
        if high is not None:
            out["maximum"] = high
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
                                  **_type_schema(hints[field.name], info.low, info.high)}
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


def _spec(name: str) -> type:
    from archplace.front import specs

    return getattr(specs, name)


def derived_schema(file: str, current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (the parsed schema ``file``) with each :data:`DERIVED` property's JSON type
    taken from its field (its description and position kept); the plan object too for
    ``common.schema.json``.

    Raises:
        KeyError: a pointer of :data:`DERIVED` that is not in the file.
    """
    out = json.loads(json.dumps(current))  # a deep copy
    for pointer, (spec, name) in DERIVED.get(file, {}).items():
        *parents, last = pointer.strip("/").split("/")
        node = out
        for part in parents:
            node = node[part]
        description = node[last].get("description")
        node[last] = {**({"description": description} if description else {}),
                      **field_schema(_spec(spec), name)}
    return common_schema(out) if file == "common.schema.json" else out


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


def generated_files() -> tuple[str, ...]:
    """The schema files that have generated parts."""
    return tuple(DERIVED)


def schema_path(file: str) -> Path:
    """The path of the schema ``file`` in this source tree."""
    return Path(__file__).with_name(file)


def schema_text(file: str) -> str:
    """The text the schema ``file`` must have: its current content with the generated parts."""
    current = json.loads(schema_path(file).read_text(encoding="utf-8"))
    return dumps(derived_schema(file, current)) + "\n"


def common_path() -> Path:
    """The path of ``common.schema.json`` in this source tree."""
    return schema_path("common.schema.json")


def common_text() -> str:
    """The text ``common.schema.json`` must have: its current content with the generated parts."""
    return schema_text("common.schema.json")
