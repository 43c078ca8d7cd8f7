"""The run specs: each checks itself and names the refused field (never a CLI option), and
``from_dict(to_dict(x)) == x``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cli.options import cli_message, flag_of
from archplace.front.specs import ClusterSpec, EvaluateRun, HardwareSpec, ModelSpec, Plan, PlanRun, PlanSpace
from archplace.front.specs.runs import evaluate_fields
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.plan import MICRO_BATCHES, GradReduceDtype, Optimizer, PipelineSchedule, Recompute
from archplace.workload.options import Attention, Kernels


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=0),
     "plan.micro_batch must be a whole number from 1 to 1,048,576, got 0"),
    (lambda: Plan(tp=0, pp=1, dp=1, micro_batch=1), "plan.tp must be a whole number from 1"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, sp=True), "plan.sp needs plan.tp > 1"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, schedule="zigzag"),  # type: ignore[arg-type]
     "plan.schedule: unknown schedule 'zigzag'; choose from: gpipe, 1f1b, interleaved"),
    (lambda: Plan(tp=1, pp=2, dp=1, micro_batch=1, schedule="interleaved"),  # type: ignore[arg-type]
     "plan.schedule interleaved needs plan.chunks >= 2 and plan.pp >= 2, got chunks=1, pp=2"),
    (lambda: Plan(tp=1, pp=2, dp=1, micro_batch=1, chunks=2),
     "plan.chunks=2 needs plan.schedule interleaved, not 1f1b"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, zero_stage=4),
     "plan.zero_stage must be 0, 1, 2 or 3, got 4"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, dp_overlap=1),  # type: ignore[arg-type]
     "plan.dp_overlap must be true or false, got 1"),
    (lambda: Plan(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 3),)),
     "plan.stages must give pp * chunks = 2 layer ranges, got 1"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, grad_reduce_dtype="fp8"),  # type: ignore[arg-type]
     "plan.grad_reduce_dtype: unknown grad_reduce_dtype 'fp8'"),
    (lambda: PlanSpace(micro_batch_sizes=(1, 0)),
     "micro_batch_sizes must be a whole number from 1 to 1,048,576, got 0"),
    (lambda: PlanSpace(micro_batch_sizes=()), "micro_batch_sizes needs at least one value"),
    (lambda: PlanSpace(micro_batch_sizes=4), "micro_batch_sizes must be a list, got 4"),  # type: ignore[arg-type]
    (lambda: PlanSpace(tps=(2, -1)), "tps must be a whole number from 1"),
    (lambda: PlanSpace(recomputes=("some",)),  # type: ignore[arg-type]
     "recomputes: unknown recompute 'some'; choose from: none, selective, full"),
    (lambda: PlanSpace(zero_stages=(0, 5)), "zero_stages must be 0, 1, 2 or 3, got 5"),
    (lambda: PlanSpace(chunks=(1,)), "chunks must be a whole number from 2"),
    (lambda: PlanSpace(top_k=0), "top_k must be a whole number from 1 to 1,000, got 0"),
    (lambda: PlanSpace(cps=(4, 0)), "cps must be a whole number from 1 to 1,048,576, got 0"),
    (lambda: PlanSpace(eps=()), "eps needs at least one value"),
    (lambda: Plan(tp=1, pp=1, dp=1, micro_batch=1, cp=0), "plan.cp must be a whole number from 1"),
    (lambda: PlanSpace(optimizer="lamb"), "optimizer: unknown optimizer 'lamb'"),  # type: ignore[arg-type]
    (lambda: ModelSpec(""), "model must be a model preset name or the path of an HF config.json"),
    (lambda: ModelSpec("gpt2-xl", seq_len=0), "seq_len must be a whole number from 1 to 1,048,576, got 0"),
    (lambda: ModelSpec("gpt2-xl", attention="slow"), "attention: unknown attention 'slow'"),  # type: ignore[arg-type]
    (lambda: ModelSpec("gpt2-xl", fuse="yes"), "fuse must be true or false, got 'yes'"),  # type: ignore[arg-type]
    (lambda: HardwareSpec("tpuv4", cluster=""), "cluster must be a hardware preset name"),
    (lambda: ClusterSpec(devices=0, global_batch=8),
     "devices must be a whole number from 1 to 1,048,576, got 0"),
    (lambda: ClusterSpec(devices=8, global_batch=True), "global_batch must be a whole number"),
    (lambda: Plan.from_dict({"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "zero": True}),
     "plan: unknown field 'zero'; known: tp, pp, dp"),
    (lambda: Plan.from_dict({"tp": 1, "pp": 1}), "plan: missing fields dp, micro_batch"),
    (lambda: PlanRun.from_dict({"model": "m", "hardware": "h", "devices": 8, "global_batch": 8,
                                "micro_batch": [1]}),
     "plan run: unknown field 'micro_batch'"),
    (lambda: PlanRun.from_dict({"model": "m", "devices": 8}),
     "plan run: missing fields hardware, global_batch"),
    (lambda: EvaluateRun.from_dict({"model": "m", "hardware": "h", "devices": 8, "global_batch": 8}),
     "evaluate run: missing field plan"),
])
def test_errors_name_the_field(build, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert message in str(info.value)
    assert "--" not in str(info.value)


def test_the_cli_shows_the_option_of_a_named_field() -> None:
    with pytest.raises(ConfigError) as info:
        Plan(tp=1, pp=1, dp=1, micro_batch=1, sp=True)
    assert cli_message(info.value).startswith("--sp needs --tp > 1: sequence parallelism splits activations "
                                              "over the TP group")
    with pytest.raises(ConfigError) as info:
        PlanRun.from_dict({"model": "m", "devices": 8})
    assert cli_message(info.value) == "plan run: missing fields --hardware, --global-batch"
    fields = ("tps", "micro_batch_sizes", "plan.micro_batch", "top_k", "zero_stages", "seq_len", "cps", "eps",
              "plan.cp", "plan.ep")
    assert [flag_of(f) for f in fields] == ["--tp", "--micro-batch", "--micro-batch", "--top", "--zero-stage",
                                            "--seq-len", "--cp", "--ep", "--cp", "--ep"]
    assert cli_message(ConfigError("tp 3 is odd")) == "tp 3 is odd"  # no fields: the text as it is


def test_the_micro_batch_default_is_defined_once() -> None:
    assert PlanSpace().micro_batch_sizes == MICRO_BATCHES == (1, 2, 4, 8)


def test_values_are_normalised() -> None:
    plan = Plan(tp=2, pp=2, dp=1, micro_batch=1, recompute="FULL", schedule="interleaved",  # type: ignore[arg-type]
                chunks=2, stages=[[0, 1], [2, 2], [3, 3], [4, 5]])  # type: ignore[arg-type]
    assert plan.recompute is Recompute.FULL and plan.schedule is PipelineSchedule.INTERLEAVED
    assert plan.stages == ((0, 1), (2, 2), (3, 3), (4, 5))
    space = PlanSpace(micro_batch_sizes=[2, 1, 2], dp_overlap=[True])  # type: ignore[arg-type]
    assert space.micro_batch_sizes == (2, 1) and space.dp_overlap == (True,)


def test_plan_reads_the_plan_object_plan_json_writes() -> None:
    written = {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 2, "recompute": "selective",
               "schedule": "interleaved", "chunks": 2, "sp": True, "zero_stage": 3, "dp_overlap": True,
               "stages": [[0, 1], [2, 2], [3, 3], [4, 5]], "stage_device": [0, 1, 0, 1]}
    plan = Plan.from_dict(written)
    assert plan == Plan(2, 2, 4, 2, Recompute.SELECTIVE, PipelineSchedule.INTERLEAVED, 2, True, 3, True,
                        stages=((0, 1), (2, 2), (3, 3), (4, 5)))
    document = {"plans": [], "plan": written, "iteration_time_s": 1.0, "model": "gpt2-xl",
                "hardware": "tpuv4", "cluster": None, "devices": 16, "global_batch": 32, "seq_len": None,
                "attention": "eager", "kernels": "unfused", "fuse": True, "optimizer": "sgd",
                "grad_reduce_dtype": "bf16"}
    run = EvaluateRun.from_dict(evaluate_fields(document))
    assert run.plan.optimizer is Optimizer.SGD and run.plan.grad_reduce_dtype is GradReduceDtype.BF16
    assert run.model == ModelSpec("gpt2-xl", None, attention=Attention.EAGER, kernels=Kernels.UNFUSED,
                                  fuse=True)
    assert run.cluster == ClusterSpec(16, 32) and run.hardware == HardwareSpec("tpuv4")
    assert evaluate_fields(written) == {"plan": written}
    with pytest.raises(ConfigError, match="neither a plan"):
        evaluate_fields({"iteration_time_s": 1.0})


# ------------------------------------------------------------------------------ round trips

_small = st.integers(1, 64)


@st.composite
def _plans(draw: st.DrawFn) -> Plan:
    schedule = draw(st.sampled_from(list(SEARCHED_SCHEDULES)))
    interleaved = schedule is PipelineSchedule.INTERLEAVED
    tp, pp = draw(_small), draw(st.integers(2 if interleaved else 1, 64))
    chunks = draw(st.integers(2, 4)) if interleaved else 1
    even = draw(st.booleans())
    return Plan(tp=tp, pp=pp, dp=draw(_small), micro_batch=draw(_small),
                recompute=draw(st.sampled_from(list(Recompute))), schedule=schedule, chunks=chunks,
                sp=draw(st.booleans()) and tp > 1, zero_stage=draw(st.integers(0, 3)),
                dp_overlap=draw(st.booleans()),
                grad_reduce_dtype=draw(st.sampled_from(list(GradReduceDtype))),
                optimizer=draw(st.sampled_from(list(Optimizer))),
                stages=None if even else tuple((i, i) for i in range(pp * chunks)),
                cp=draw(_small), ep=draw(_small))


_spaces = st.builds(
    PlanSpace,
    tps=st.none() | st.lists(_small, min_size=1, max_size=4).map(tuple),
    micro_batch_sizes=st.lists(_small, min_size=1, max_size=4).map(tuple),
    recomputes=st.lists(st.sampled_from(list(Recompute)), min_size=1).map(tuple),
    schedules=st.lists(st.sampled_from(list(SEARCHED_SCHEDULES)), min_size=1).map(tuple),
    chunks=st.lists(st.integers(2, 8), min_size=1, max_size=3).map(tuple),
    sp=st.booleans(), zero_stages=st.lists(st.integers(0, 3), min_size=1).map(tuple),
    dp_overlap=st.lists(st.booleans(), min_size=1).map(tuple),
    grad_reduce_dtype=st.sampled_from(list(GradReduceDtype)), optimizer=st.sampled_from(list(Optimizer)),
    top_k=st.integers(1, 1000), cps=st.none() | st.lists(_small, min_size=1, max_size=3).map(tuple),
    eps=st.none() | st.lists(_small, min_size=1, max_size=3).map(tuple))
_models = st.builds(ModelSpec, model=st.sampled_from(["gpt2-xl", "llama2-7b", "cfg/config.json"]),
                    seq_len=st.none() | st.integers(1, 2**20), attention=st.sampled_from(list(Attention)),
                    kernels=st.sampled_from(list(Kernels)), fuse=st.booleans())
_hardware = st.builds(HardwareSpec, hardware=st.sampled_from(["tpuv4", "a100-80gb"]),
                      cluster=st.none() | st.just("h100-sxm"))
_clusters = st.builds(ClusterSpec, devices=st.integers(1, 2**20), global_batch=st.integers(1, 2**30))


@given(_plans())
def test_plan_round_trip(plan: Plan) -> None:
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


@given(_spaces)
def test_plan_space_round_trip(space: PlanSpace) -> None:
    assert PlanSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space


@given(_models, _hardware, _clusters, _spaces, _plans())
def test_run_round_trips(model: ModelSpec, hardware: HardwareSpec, cluster: ClusterSpec, space: PlanSpace,
                         plan: Plan) -> None:
    for spec in (model, hardware, cluster):
        assert type(spec).from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    run = PlanRun(model, hardware, cluster, space)
    assert PlanRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    fixed = EvaluateRun(model, hardware, cluster, plan)
    assert EvaluateRun.from_dict(json.loads(json.dumps(fixed.to_dict()))) == fixed


# ------------------------------------------------------------------------------ plan-file stamp

_PLAN = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}


@pytest.mark.parametrize("version", [2, 0, -1, "1", 1.5, True, None])
def test_a_plan_file_of_another_schema_version_is_refused_in_one_line(version: object) -> None:
    document = {"schema_version": version, "archplace_version": "0.1.0", "plan": _PLAN,
                "model": "gpt2-xl", "hardware": "tpuv4", "devices": 8, "global_batch": 16}
    with pytest.raises(ConfigError) as info:
        evaluate_fields(document, "old.json: plan file")
    message = str(info.value)
    assert message.startswith(f"old.json: plan file: schema_version {version!r} of a plan or evaluate")
    assert message.endswith("this archplace reads version 1") and "\n" not in message
    with pytest.raises(ConfigError, match="schema_version 2"):  # a bare plan object with a stamp too
        evaluate_fields({"schema_version": 2, **_PLAN})


def test_a_plan_file_of_this_schema_version_or_without_a_stamp_is_read() -> None:
    stamped = {"schema_version": 1, "archplace_version": "0.1.0", "plan": _PLAN, "devices": 8}
    assert evaluate_fields(stamped) == {"devices": 8, "plan": _PLAN}
    assert evaluate_fields({"schema_version": 1, **_PLAN}) == {"plan": _PLAN}
    assert evaluate_fields(_PLAN) == {"plan": _PLAN}
    with pytest.raises(ConfigError, match="archplace_version must be text"):
        evaluate_fields({"archplace_version": 1, **_PLAN})
