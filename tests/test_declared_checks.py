"""Range and type checks derived from the field declarations (archplace.base.fields.checked): every
number field of a run spec states its range once, on its declaration or on the field it tries or
is like, and the specs check each field from it at construction."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import NOT_DERIVED, check_as, checked
from archplace.base.options import declared, span
from archplace.cost.precision import Precision
from archplace.front.specs import ClusterSpec, HardwareSpec, ModelSpec, PlanSpace
from archplace.front.specs.search import _CHECKS as search_checks
from archplace.front.specs.search import SearchSpec
from archplace.placement.plan import PipelineSchedule, Plan, Recompute

SPECS = (Plan, PlanSpace, ModelSpec, HardwareSpec, ClusterSpec, SearchSpec)
SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "archplace"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.__name__)
def test_every_number_field_has_a_range(spec: type) -> None:
    own = search_checks if spec is SearchSpec else {}  # checked by the spec itself (jobs: per CPU)
    for name, field in declared(spec).items():
        if (field.type in (int, float) or field.element is int) and name not in own:
            low, high = span(spec, name)
            assert low is not None and high is not None and low <= high, f"{spec.__name__}.{name}"


def test_a_tried_or_like_field_takes_the_range_of_its_source() -> None:
    assert span(PlanSpace, "micro_batch_sizes") == span(Plan, "micro_batch") == (1, limits.MAX_MICRO_BATCH)
    assert span(SearchSpec, "micro_batch_sizes") == span(Plan, "micro_batch")
    assert span(SearchSpec, "tps") == span(Plan, "tp")
    assert span(SearchSpec, "seq_len") == span(ModelSpec, "seq_len")
    assert span(SearchSpec, "devices") == span(ClusterSpec, "devices")
    # its own bound wins: interleaving tries at least 2 chunks, a plan may have 1
    assert span(PlanSpace, "chunks") == (2, span(Plan, "chunks")[1])
    # the help of a like field is its source's
    assert declared(SearchSpec)["fuse"].text == declared(ModelSpec)["fuse"].text


def _number_fields() -> list[tuple[type, str]]:
    return [(spec, name) for spec in SPECS for name, field in declared(spec).items()
            if (field.type is int or field.element is int)
            and not (spec is SearchSpec and name in search_checks)]


@pytest.mark.parametrize(("spec", "name"), _number_fields(), ids=lambda x: getattr(x, "__name__", x))
def test_the_bounds_are_accepted_and_one_past_them_refused(spec: type, name: str) -> None:
    field = declared(spec)[name]
    low, high = (int(x) for x in span(spec, name))  # type: ignore[arg-type]
    listed = field.element is not None
    for good in (low, high):
        assert checked(field, (good,) if listed else good, name) == ((good,) if listed else good)
    for bad in (low - 1, high + 1, True, 2.0, "3"):
        with pytest.raises(ConfigError, match=re.escape(name)):
            checked(field, (bad,) if listed else bad, name)


@given(st.lists(st.integers(1, 64), min_size=1, max_size=6))
def test_a_list_field_keeps_each_value_once_in_order(values: list[int]) -> None:
    out = checked(declared(PlanSpace)["micro_batch_sizes"], values, "micro_batch_sizes")
    assert out == tuple(dict.fromkeys(values))


def test_enum_bool_and_other_fields() -> None:
    fields = declared(Plan)
    assert checked(fields["recompute"], "FULL", "plan.recompute").value == "full"
    with pytest.raises(ConfigError, match="plan.sp must be true or false, got 1"):
        checked(fields["sp"], 1, "plan.sp")
    assert checked(fields["stages"], ((0, 1),), "plan.stages") is NOT_DERIVED  # the plan's own check
    assert checked(declared(SearchSpec)["tps"], None, "tps") is None  # optional


def test_a_front_door_keyword_is_checked_as_the_field_it_means() -> None:
    assert check_as(Plan, "micro_batch", 4) == 4
    with pytest.raises(ConfigError, match=r"^micro_batch must be a whole number from 1 to 1,048,576, got 0$"):
        check_as(Plan, "micro_batch", 0)


def test_the_errors_name_the_field_as_the_spec_spells_it() -> None:
    with pytest.raises(ConfigError, match=r"^plan\.zero_stage must be 0, 1, 2 or 3, got 4$"):
        Plan(tp=1, pp=1, dp=1, micro_batch=1, zero_stage=4)
    with pytest.raises(ConfigError, match=r"^micro_batch_sizes must be a whole number") as info:
        PlanSpace(micro_batch_sizes=(2, 0))
    assert info.value.fields == ("micro_batch_sizes",)
    with pytest.raises(ConfigError, match=r"^tps must be a whole number"):
        SearchSpec(models=("gpt2",), devices=8, global_batch=8, tps=(0,))
    spec = SearchSpec(models=("gpt2",), devices=8, global_batch=8, micro_batch_sizes=4)
    assert spec.micro_batch_sizes == (4,)


def test_the_micro_batch_range_is_stated_once_in_the_source() -> None:
    """The measure of "range-checked once": the micro-batch's bounds are written in one
    declaration (Plan.micro_batch); the plan spaces, the search spec and the front-door keywords
    derive them, and no layer below re-checks a value the front door checked."""
    stated = sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                    if re.search(r"MAX_MICRO_BATCH\b", path.read_text()))
    assert stated == ["base/limits.py", "placement/plan.py"]
    hand_check = re.compile(r"micro_batch\b *(<= *0|< *1)\b|(whole|positive_int)\(\"micro_batch\"")
    hand_checks = [str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                   if hand_check.search(path.read_text())]
    assert hand_checks == []


MICRO_BATCH_FIELDS = {
    ("placement/grid.py", "PlanChoices", "micro_batch_sizes"):
        "the sizes a plan search tries (PlanSpace, PlanGrid and SearchSpec: this one declaration)",
    ("workload/key.py", "CostKey", "micro_batch"):
        "one set of layer costs: held whole by the tracing options, the chain and the DP's families",
    ("placement/plan.py", "Plan", "micro_batch"): "the plan's answer",
    ("placement/downset_dp.py", "_Figures", "micro_batch"):
        "plan --layer-graph: the one micro-batch a layer-graph file's costs are for",
    ("placement/pipeline_timeline.py", "PipelineBlock", "micro_batch"):
        "another meaning: which micro-batch a timeline block runs (an index)",
    ("placement/pipeline_timeline.py", "PipelineTimeline", "micro_batches"):
        "another meaning: the count of micro-batches per iteration",
    ("placement/solver.py", "Closest", "micro_batch_count"):
        "another meaning: the micro-batches per iteration of the closest infeasible candidate",
    ("cost/estimate.py", "ModelEstimate", "micro_batch"): "estimate's output echoes its input",
    ("validation/runs.py", "PublishedPlan", "micro_batch"): "a published run's plan, read from data",
}
"""Every class field named for the micro-batch, with what it holds. From ``--micro-batch`` to the
DP a value takes three shapes: the sizes to try (``PlanChoices.micro_batch_sizes``), one cost
key (``CostKey``, which the tracing options, the layer chain and the DP's cost families hold
whole, not copied), and the plan's ``Plan.micro_batch``."""


def test_the_micro_batch_takes_three_shapes_from_the_option_to_the_plan() -> None:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found |= {(str(path.relative_to(SRC)), node.name, item.target.id) for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                          and "micro_batch" in item.target.id}
    assert found == set(MICRO_BATCH_FIELDS)


def test_every_field_of_the_specs_round_trips_through_its_check() -> None:
    for spec in (Plan, PlanSpace, ModelSpec, ClusterSpec):
        for name, field in declared(spec).items():
            if field.default is dataclasses.MISSING or field.default is None:
                continue
            value = checked(field, field.default, name)
            assert value is NOT_DERIVED or value == field.default, f"{spec.__name__}.{name}"


def _properties(node: object, pointer: str = "") -> list[tuple[str, str, dict]]:
    """Every (pointer, name, schema) of a property in a JSON Schema document."""
    out: list[tuple[str, str, dict]] = []
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict):
                out.append((f"{pointer}/properties/{name}", name, sub))
        for key, sub in node.items():
            out.extend(_properties(sub, f"{pointer}/{key}"))
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            out.extend(_properties(sub, f"{pointer}/{i}"))
    return out


def test_every_schema_property_named_as_an_option_is_derived_from_it() -> None:
    """A property of an output schema that echoes an option takes its type from the option's
    field (archplace.schemas.generate.DERIVED, or the generated plan object, or a $ref to one);
    one named like an option that means something else is listed with its reason (UNRELATED)."""
    import json

    from archplace.schemas import generate

    options = {name for spec in SPECS for name in declared(spec)}
    loose = []
    for path in sorted((SRC / "schemas").glob("*.schema.json")):
        derived = generate.DERIVED.get(path.name, {})
        for pointer, name, schema in _properties(json.loads(path.read_text())):
            if (name in options and "$ref" not in schema and pointer not in derived
                    and not pointer.startswith("/$defs/plan/") and name not in generate.UNRELATED):
                loose.append(f"{path.name}{pointer}")
    assert loose == []
    for file, pointers in generate.DERIVED.items():  # and each derived property has its field's type
        schema = json.loads(generate.schema_path(file).read_text())
        for pointer, (spec, name) in pointers.items():
            node = schema
            for part in pointer.strip("/").split("/"):
                node = node[part]
            assert {k: v for k, v in node.items() if k != "description"} == generate.field_schema(
                getattr(__import__("archplace.front.specs", fromlist=[spec]), spec), name), f"{file}{pointer}"


def test_a_renamed_field_is_still_read_under_its_earlier_name() -> None:
    """``micro_batch_sizes`` was ``micro_batches`` (Option.formerly): a plan space, a plan run
    and a search spec read either name, and refuse a mapping that gives both."""
    from archplace.front.specs import PlanRun

    assert PlanSpace.from_dict({"micro_batches": [2, 4]}).micro_batch_sizes == (2, 4)
    run = {"model": "gpt2", "hardware": "tpuv4", "devices": 8, "global_batch": 8}
    assert PlanRun.from_dict({**run, "micro_batches": [2]}).space.micro_batch_sizes == (2,)
    assert PlanRun.from_dict({**run, "micro_batch_sizes": [2]}).space.micro_batch_sizes == (2,)
    search = {"models": "gpt2", "devices": 8, "global_batch": 8}
    assert SearchSpec.from_dict({**search, "micro_batches": 2}).micro_batch_sizes == (2,)
    both = {"micro_batches": [2], "micro_batch_sizes": [2]}
    for read in (PlanSpace.from_dict, lambda data: PlanRun.from_dict({**run, **data}),
                 lambda data: SearchSpec.from_dict({**search, **data})):
        with pytest.raises(ConfigError, match="'micro_batches' is the earlier name of 'micro_batch_sizes': "
                                              "give one of them"):
            read(both)
    assert "micro_batches" not in PlanSpace().to_dict()  # written under its name only
    # a search file spells the TP widths and recompute choices as a plan file does
    older = SearchSpec.from_dict({**search, "tp": [1, 2], "recompute": "full"})
    assert (older.tps, older.recomputes) == ((1, 2), ("full",))
    assert older == SearchSpec.from_dict({**search, "tps": [1, 2], "recomputes": ["full"]})


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**21), st.floats(allow_nan=True),
                   st.sampled_from(["none", "full", "1f1b", "bf16", "fp8", "x"]),
                   st.lists(st.integers(-1, 9), max_size=4).map(tuple),
                   st.lists(st.booleans(), max_size=3).map(tuple),
                   st.sampled_from([*Recompute, *PipelineSchedule, *Precision]),
                   st.lists(st.sampled_from([*Recompute, *PipelineSchedule]), max_size=3).map(tuple))


@given(st.sampled_from([(spec, name) for spec in (Plan, PlanSpace, ModelSpec, ClusterSpec, HardwareSpec)
                        for name in declared(spec)]), VALUES)
def test_the_quick_test_of_a_normal_value_agrees_with_the_check(field: tuple[type, str],
                                                                value: object) -> None:
    """check_declared skips the check of a value its quick test calls normal (the engine builds
    many plans): such a value passes the check unchanged."""
    from archplace.base.fields import _normal_tests

    spec, name = field
    normal = dict((n, test) for n, _, test in _normal_tests(spec))[name]
    if normal(value):
        out = checked(declared(spec)[name], value, name)
        assert out is NOT_DERIVED or (out == value and type(out) is type(value))
