"""The engine's plan grid is derived from the specs' fields, and its stored form from its own
fields (issue #25): a new grid field reaches the engine, the store and the store's reader
without being written anywhere else."""

from __future__ import annotations

import dataclasses
import json

import pytest

from archplace.cost.precision import Precision
from archplace.front.app import plan_grid
from archplace.front.specs import ModelSpec, PlanSpace
from archplace.placement.costs import CostKey
from archplace.placement.grid import (
    ALWAYS_STORED,
    KEYED,
    PlanChoices,
    PlanGrid,
    grid_from_identity,
    grid_identity,
)
from archplace.placement.plan import GradReduceDtype, GradSync, PipelineSchedule, Recompute
from archplace.workload.options import Attention, ExpertWeighting, Kernels, Loss, RecomputeModule

GRID_FIELDS = {f.name for f in dataclasses.fields(PlanGrid)}
SPACE_FIELDS = {f.name for f in dataclasses.fields(PlanSpace)}
MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)}

NOT_IN_GRID = {"sp", "top_k", "optimizer", "rank_order"}
"""Plan-space fields the grid does not hold: ``sp`` becomes ``sps``; ``top_k`` goes to the
engine's call, ``optimizer`` and ``rank_order`` to the training setup (``app.problem``)."""

ODD = PlanGrid(tps=(2, 4), micro_batch_sizes=(3,), sps=(False,), recomputes=(Recompute.FULL,),
               schedules=(PipelineSchedule.INTERLEAVED,), chunks=(3,), zero_stages=(1, 3), dp_overlap=(True,),
               fuse=True, attention=Attention.EAGER, kernels=Kernels.UNFUSED,
               grad_reduce_dtype=GradReduceDtype.BF16, precisions=(Precision.FP8,), cps=(2,), eps=(4,),
               capacity_factor=1.25, expert_load_imbalance=1.5, etps=(2,), dp_replicates=(1, 2),
               recompute_modules=(RecomputeModule.LAYERNORM, RecomputeModule.MOE_ACT),
               grad_sync=GradSync.ITERATION, expert_weighting=ExpertWeighting.ACTIVATION, loss=Loss.FUSED,
               swiglu_fp8_input=True)
"""Every field away from its default."""


def test_every_grid_field_has_one_source_in_the_specs() -> None:
    for name in GRID_FIELDS - {"sps"}:
        assert (name in SPACE_FIELDS) != (name in MODEL_FIELDS), name
    assert SPACE_FIELDS - GRID_FIELDS == NOT_IN_GRID


def test_the_choices_are_declared_once_for_the_space_and_the_grid() -> None:
    """Every field the plan space and the grid share is one declaration: the same dataclass field
    object, inherited from :class:`PlanChoices` (type, default, range and help written once)."""
    shared = SPACE_FIELDS & GRID_FIELDS
    assert shared == {f.name for f in dataclasses.fields(PlanChoices)}
    for name in shared:
        declared = PlanChoices.__dataclass_fields__[name]
        assert PlanSpace.__dataclass_fields__[name] is declared, name
        assert PlanGrid.__dataclass_fields__[name] is declared, name


def test_the_tracing_options_are_declared_once_for_every_holder() -> None:
    """The tracing options are one option group (:class:`Tracing`): the model spec, the search
    spec, the engine's grid and the traced options hold the same dataclass field objects."""
    from archplace.front.specs.search import SearchSpec
    from archplace.workload.extract import ExtractOptions
    from archplace.workload.options import Tracing

    group = Tracing.__dataclass_fields__
    assert set(group) == {"attention", "kernels", "fuse", "capacity_factor", "expert_load_imbalance",
                          "recompute_modules", "expert_weighting", "loss", "swiglu_fp8_input"}
    from archplace.reporting.pages import ModelSetup

    for holder in (ModelSpec, SearchSpec, PlanGrid, ExtractOptions, ModelSetup):
        for name, field in group.items():
            assert holder.__dataclass_fields__[name] is field, (holder.__name__, name)
    assert all(field.kw_only for field in group.values())  # the holders keep their positional fields
    assert ModelSpec("gpt2", 64, attention="eager").attention is Attention.EAGER


def test_a_search_tries_the_plan_choices_with_its_own_defaults() -> None:
    """The search spec's plan choices are :class:`PlanChoices`: the fields it does not restate are
    the same field objects; the ones it restates (:class:`SearchChoices`) differ only in the
    default and in what the help shows, and keep the type."""
    import typing

    from archplace.base.options import METADATA_KEY
    from archplace.front.specs.search import SearchChoices, SearchSpec

    restated = {"tps", "recomputes", "schedules", "cps", "eps", "etps"}
    base_hints, search_hints = typing.get_type_hints(PlanChoices), typing.get_type_hints(SearchSpec)
    for field in dataclasses.fields(PlanChoices):
        held = SearchSpec.__dataclass_fields__[field.name]
        assert held is SearchChoices.__dataclass_fields__[field.name]
        assert search_hints[field.name] == base_hints[field.name], field.name
        if field.name not in restated:
            assert held is field, field.name
            continue
        mine, theirs = held.metadata[METADATA_KEY], field.metadata[METADATA_KEY]
        assert mine.tries == theirs.tries and (mine.low, mine.high) == (theirs.low, theirs.high)
    names = [f.name for f in dataclasses.fields(PlanChoices)]
    assert [f.name for f in dataclasses.fields(SearchChoices)] == names
    spec = SearchSpec(models="gpt2-xl", devices=8, global_batch=8)
    assert spec.recomputes == (Recompute.NONE, Recompute.FULL) and spec.cps is None
    assert spec.schedules[0] is PipelineSchedule.ONE_F_ONE_B
    assert (spec.chunks, spec.dp_overlap) == (PlanGrid().chunks, PlanGrid().dp_overlap)
    assert SearchSpec(models="m", devices=8, global_batch=8, recomputes=["both", "selective"]).recomputes == (
        Recompute.NONE, Recompute.FULL, Recompute.SELECTIVE)


def test_odd_grid_has_every_field_off_its_default() -> None:
    for field in dataclasses.fields(PlanGrid):
        assert getattr(ODD, field.name) != field.default, field.name


def test_plan_grid_copies_every_field_by_name() -> None:
    space = PlanSpace(tps=(2, 4), micro_batch_sizes=(3,), recomputes=(Recompute.FULL,),
                      schedules=(PipelineSchedule.INTERLEAVED,), chunks=(3,), sp=False, zero_stages=(1, 3),
                      dp_overlap=(True,), grad_reduce_dtype=GradReduceDtype.BF16,
                      precisions=(Precision.FP8,), cps=(2,), eps=(4,), etps=(2,), dp_replicates=(1, 2),
                      grad_sync=GradSync.ITERATION)
    model = ModelSpec("gpt2", fuse=True, attention=Attention.EAGER, kernels=Kernels.UNFUSED,
                      capacity_factor=1.25, expert_load_imbalance=1.5,
                      recompute_modules=("layernorm", "moe_act"), expert_weighting="activation",
                      loss="fused", swiglu_fp8_input=True)
    assert plan_grid(space, model) == ODD
    assert plan_grid(dataclasses.replace(space, sp=True), model).sps == (False, True)


def test_a_stored_grid_reads_back_equal() -> None:
    keys = [CostKey(tp, 3, False, 2, 4, 2) for tp in (4, 2)]
    stored = grid_identity(ODD)
    assert set(stored) == GRID_FIELDS - set(KEYED)
    assert grid_from_identity(stored, keys) == ODD


def test_default_fields_outside_the_legacy_set_are_not_stored() -> None:
    """A request made before a field existed keeps its key: the default grid stores exactly the
    fields every schema-2 store holds, with their values as the store wrote them by hand."""
    stored = grid_identity(PlanGrid(tps=(1,)))
    assert stored == {"recomputes": ["none", "selective", "full"],
                      "schedules": ["gpipe", "1f1b", "interleaved"], "chunks": [2, 4],
                      "zero_stages": [0, 1, 2, 3], "dp_overlap": [False, True], "grad_reduce_dtype": "fp32",
                      "fuse": False, "attention": "flash", "kernels": "fused"}
    assert set(stored) == set(ALWAYS_STORED)
    assert grid_from_identity(stored, [CostKey(1, b, False) for b in (1, 2, 4, 8)]) == PlanGrid(
        tps=(1,), sps=(False,), cps=(1,), eps=(1,), etps=(1,))


@pytest.mark.parametrize(("name", "value"), [("chunks", ["2"]), ("fuse", 1), ("attention", "fast"),
                                             ("capacity_factor", "1.5"), ("recomputes", "full")])
def test_a_stored_value_of_the_wrong_type_is_refused(name: str, value: object) -> None:
    stored = {**grid_identity(PlanGrid()), name: value}
    with pytest.raises(ValueError):
        grid_from_identity(stored, [CostKey(1, 1, False)])


def test_every_plan_field_reaches_the_engine_by_name() -> None:
    """``app.evaluate`` passes the engine each keyword of ``workflow.evaluate`` from the plan's or
    the model spec's field of that name; the plan's other fields go to the training setup."""
    import inspect

    from archplace.base.options import declared
    from archplace.front.app import evaluate_keywords
    from archplace.front.specs import Plan
    from archplace.placement import workflow

    keywords = {name for name, parameter in inspect.signature(workflow.evaluate).parameters.items()
                if parameter.kind is inspect.Parameter.KEYWORD_ONLY}
    plan_fields = set(declared(Plan))  # stage_layers: set by the layer-DAG planner only
    for name in keywords:
        assert (name in plan_fields) != (name in MODEL_FIELDS), name
    assert plan_fields - keywords == {"optimizer", "grad_reduce_dtype", "rank_order"}
    plan = Plan(tp=2, pp=2, dp=3, micro_batch=5, schedule=PipelineSchedule.INTERLEAVED, chunks=2, sp=True,
                zero_stage=2, cp=2)
    model = ModelSpec("gpt2", attention=Attention.SDPA, capacity_factor=1.5)
    given = evaluate_keywords(plan, model)
    assert given["tp"] == 2 and given["chunks"] == 2 and given["zero_stage"] == 2 and given["cp"] == 2
    assert given["attention"] is Attention.SDPA and given["capacity_factor"] == 1.5
    assert set(given) == keywords


def test_the_plan_schema_has_one_property_per_plan_field() -> None:
    """The JSON Schema of a plan (``common.schema.json``, ``$defs/plan``: the ``plan`` object of
    ``plan --json`` and ``evaluate --json``) names exactly the engine plan's fields (and the
    derived ``stage_device``), and an enum field's choices are its enum's values."""
    import enum
    import typing

    from archplace.placement.plan import Plan as EnginePlan
    from archplace.schemas import load_schema

    schema = load_schema("plan")["$defs"]["common"]["$defs"]["plan"]["properties"]
    assert set(schema) == {f.name for f in dataclasses.fields(EnginePlan)} | {"stage_device"}
    hints = typing.get_type_hints(EnginePlan)
    for name, kind in hints.items():
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            assert schema[name]["enum"] == [member.value for member in kind], name


def test_the_plan_schema_is_generated_from_the_plan() -> None:
    """``common.schema.json`` is what :mod:`archplace.schemas.generate` makes of it (``make
    schemas`` rewrites it): the plan object's properties are generated from the plan's fields,
    and a plan's JSON form validates against them, required keys included."""
    import jsonschema

    from archplace.placement.plan import Plan as EnginePlan
    from archplace.schemas import generate

    for file in generate.generated_files():  # every file with generated parts is up to date
        assert generate.schema_path(file).read_text(encoding="utf-8") == generate.schema_text(file), file
    text = generate.common_path().read_text(encoding="utf-8")
    properties, required = generate.plan_properties()
    assert list(properties) == [f.name for f in dataclasses.fields(EnginePlan)]
    schema = json.loads(text)  # the generated file, read once
    plan_schema = {"$defs": schema["$defs"], **schema["$defs"]["plan"]}
    plan = EnginePlan(tp=2, pp=2, dp=4, micro_batch=1, schedule=PipelineSchedule.INTERLEAVED, chunks=2,
                      sp=True, zero_stage=3, dp_replicate=2, stages=((0, 1), (2, 3), (4, 5), (6, 7)))
    jsonschema.validate(plan.to_dict(), plan_schema)
    assert set(required) <= set(plan.to_dict())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**plan.to_dict(), "zero_stage": 4}, plan_schema)


def test_search_request_keywords_are_search_spec_fields_with_its_defaults() -> None:
    """``api.spec_request`` passes each keyword of ``api.search_request`` from the search spec's
    field of that name, so each keyword must be a field, and Python's default the spec's."""
    import inspect

    from archplace.front import api
    from archplace.front.specs.search import SearchSpec

    fields = {f.name: f for f in dataclasses.fields(SearchSpec)}
    for name, parameter in inspect.signature(api.search_request).parameters.items():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        assert name in fields, name
        if parameter.default is not inspect.Parameter.empty:
            default = parameter.default
            default = tuple(default) if isinstance(default, list | tuple) else default
            assert default == fields[name].default, name



def test_traced_as_takes_each_option_from_the_key_or_the_grid_by_name() -> None:
    """What a search traces for a cost key (``SearchRequest.extract_options``) is the key's
    micro-batch and degrees with the grid's tracing options; a new ``ExtractOptions`` field
    named like a grid field reaches it without being listed."""
    from archplace.workload.extract import ExtractOptions, traced_as

    grid = dataclasses.replace(ODD, attention=Attention.SDPA)  # ring attention (cp 2) runs fused
    assert traced_as(64, CostKey(2, 3, True, 2, 4, 2), grid) == ExtractOptions.of(
        micro_batch=3, seq_len=64, tp=2, sp=True, fuse=True, attention=Attention.SDPA,
        kernels=Kernels.UNFUSED, cp=2, ep=4, capacity_factor=1.25, expert_load_imbalance=1.5, etp=2,
        recompute_modules=("layernorm", "moe_act"), expert_weighting="activation", loss="fused",
        swiglu_fp8_input=True)
