"""Plans as files: ``plan --json`` then ``evaluate --plan`` scores the same plan the same, for
every plan feature (CLI and API); ``plan --config`` equals the same run from options;
``config --example plan`` is a runnable starting file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from archplace.cli.runs import run_fields
from archplace.front import api
from archplace.front.config_examples import EXAMPLES
from archplace.front.specs import ClusterSpec, EvaluateRun, HardwareSpec, ModelSpec, PlanRun, PlanSpace
from archplace.front.specs.runs import evaluate_fields
from archplace.placement.plan import PipelineSchedule, Recompute
from archplace.placement.result import PlanResult
from cli_helpers import run

GPT = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 8, "n_positions": 256,
       "vocab_size": 4096}
CLUSTER = ["--hardware", "a100-80gb", "--devices", "16", "--global-batch", "32"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("m") / "config.json"
    path.write_text(json.dumps(GPT))
    return str(path)


FEATURES: dict[str, Callable[[PlanResult], bool]] = {
    "tp": lambda r: r.plan.tp > 1 and not r.plan.sp,
    "pp": lambda r: r.plan.pp > 1 and r.plan.schedule is PipelineSchedule.ONE_F_ONE_B,
    "gpipe": lambda r: r.plan.schedule is PipelineSchedule.GPIPE and r.plan.pp > 1,
    "interleaved": lambda r: r.plan.schedule is PipelineSchedule.INTERLEAVED and r.plan.chunks >= 2,
    "sp": lambda r: r.plan.sp,
    **{f"recompute-{rc.value}": (lambda r, rc=rc: r.plan.recompute is rc) for rc in Recompute},  # type: ignore[misc]
    **{f"zero-{z}": (lambda r, z=z: r.plan.zero_stage == z) for z in range(4)},  # type: ignore[misc]
    "overlap-on": lambda r: r.plan.dp_overlap and r.plan.dp > 1,
    "overlap-off": lambda r: not r.plan.dp_overlap and r.plan.dp > 1,
}


@pytest.fixture(scope="module")
def plan_run(model: str) -> PlanRun:
    return PlanRun(ModelSpec(model), HardwareSpec("a100-80gb"), ClusterSpec(16, 32),
                   PlanSpace(tps=(1, 2), micro_batch_sizes=(1, 2), top_k=1000))


@pytest.fixture(scope="module")
def feature_plans(plan_run: PlanRun) -> dict[str, PlanResult]:
    """For each plan feature, the best plan that has it (of the 1,000 best plans)."""
    results = api.plan_run(plan_run)
    chosen = {name: next((r for r in results if has(r)), None) for name, has in FEATURES.items()}
    assert [name for name, r in chosen.items() if r is None] == []
    return {name: r for name, r in chosen.items() if r is not None}


@pytest.mark.parametrize("feature", FEATURES)
def test_api_evaluates_every_planned_feature_the_same(feature: str, plan_run: PlanRun,
                                                      feature_plans: dict[str, PlanResult]) -> None:
    planned = feature_plans[feature]
    document = json.loads(json.dumps({"plans": [], **planned.to_dict(), **run_fields(plan_run)}))
    evaluated = api.evaluate_run(EvaluateRun.from_dict(evaluate_fields(document)))
    assert evaluated.iteration_time_s == planned.iteration_time_s
    assert evaluated.plan == planned.plan and evaluated.memory == planned.memory


@pytest.mark.parametrize("feature", FEATURES)
def test_cli_evaluates_a_plan_object_of_every_feature_the_same(
        feature: str, model: str, feature_plans: dict[str, PlanResult], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    planned = feature_plans[feature]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(planned.plan.to_dict()))  # exactly the "plan" object
    code, out, err = run(["evaluate", "--plan", str(path), "--model", model, *CLUSTER, "--json"], capsys)
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["iteration_time_s"] == planned.iteration_time_s
    assert evaluated["plan"] == planned.plan.to_dict()


@pytest.mark.parametrize("options", [
    [],
    ["--attention", "eager", "--kernels", "unfused"],
    ["--attention", "sdpa", "--grad-reduce-dtype", "bf16"],
    ["--fuse", "--optimizer", "sgd", "--seq-len", "128"],
], ids=["defaults", "eager-unfused", "sdpa-bf16", "fuse-sgd-seq"])
def test_plan_json_then_evaluate_plan_alone(options: list[str], model: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["plan", "--model", model, *CLUSTER, "--tp", "2", "--micro-batch", "1", "--top", "2",
                          "--json", *options], capsys)
    assert code == 0, err
    path = tmp_path / "p.json"
    path.write_text(out)
    planned = json.loads(out)
    code, out, err = run(["evaluate", "--plan", str(path), "--json"], capsys)
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["iteration_time_s"] == planned["iteration_time_s"]
    assert evaluated["plan"] == planned["plan"]
    run_keys = ("model", "hardware", "cluster", "devices", "global_batch", "seq_len", "attention", "kernels",
                "fuse", "optimizer", "grad_reduce_dtype")
    assert {k: evaluated[k] for k in run_keys} == {k: planned[k] for k in run_keys}
    # and the evaluate output is itself a plan file
    path.write_text(out)
    code, again, _ = run(["evaluate", "--plan", str(path), "--json"], capsys)
    assert code == 0 and json.loads(again)["iteration_time_s"] == planned["iteration_time_s"]


def test_fp8_plan_json_then_evaluate_plan_alone(model: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """An FP8 plan (h100-80gb has FP8 tensor cores) round-trips: ``plan --json --precision fp8``
    then ``evaluate --plan`` scores the same plan, at fp8, the same."""
    cluster = ["--hardware", "h100-80gb", "--devices", "16", "--global-batch", "32"]
    code, out, err = run(["plan", "--model", model, *cluster, "--tp", "2", "--micro-batch", "1", "--top", "2",
                          "--precision", "fp8", "--json"], capsys)
    assert code == 0, err
    planned = json.loads(out)
    assert planned["plan"]["precision"] == "fp8"
    assert [p["plan"]["precision"] for p in planned["plans"]] == ["fp8", "fp8"]
    path = tmp_path / "p.json"
    path.write_text(out)
    code, out, err = run(["evaluate", "--plan", str(path), "--json"], capsys)
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["iteration_time_s"] == planned["iteration_time_s"]
    assert evaluated["plan"] == planned["plan"]
    assert evaluated["memory_per_device_bytes"] == planned["memory_per_device_bytes"]
    # the plan object alone, and the API's PlanResult.from_dict, read it back too
    path.write_text(json.dumps(planned["plan"]))
    code, out, err = run(["evaluate", "--plan", str(path), "--model", model, *cluster, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["iteration_time_s"] == planned["iteration_time_s"]
    again = PlanResult.from_dict(planned).to_dict()
    assert again == {key: planned[key] for key in again}
    # --precision on the command line overrides the file's
    code, out, err = run(["evaluate", "--plan", str(path), "--model", model, *cluster, "--precision", "bf16",
                          "--json"], capsys)
    assert code == 0, err
    as_bf16 = json.loads(out)
    assert as_bf16["plan"]["precision"] == "bf16"
    assert as_bf16["iteration_time_s"] > planned["iteration_time_s"]


def test_evaluate_options_override_the_plan_file(model: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--model", model, *CLUSTER, "--tp", "2", "--pp", "2", "--dp", "4", "--micro-batch", "1"]
    code, out, _ = run(["evaluate", *flags, "--stages", "0-2,3-5", "--json"], capsys)
    assert code == 0
    path = tmp_path / "p.json"
    path.write_text(out)
    for extra in (["--dp-overlap", "--zero-stage", "3"], ["--pp", "1", "--dp", "8"], ["--recompute", "full"],
                  ["--devices", "32", "--dp", "8"]):
        code, by_file, err = run(["evaluate", "--plan", str(path), *extra, "--json"], capsys)
        assert code == 0, err
        stages = [] if "--pp" in extra else ["--stages", "0-2,3-5"]  # a new depth: the even split
        code, by_flags, _ = run(["evaluate", *flags, *stages, *extra, "--json"], capsys)
        assert json.loads(by_file) == json.loads(by_flags)


@pytest.mark.slow
def test_a_plan_config_file_equals_the_same_options(model: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(yaml.safe_dump({"model": model, "hardware": "a100-80gb", "devices": 16,
                                      "global_batch": 32, "tps": [1, 2], "micro_batch_sizes": [1, 2],
                                      "recomputes": ["none", "full"], "attention": "eager",
                                      "zero_stages": [0, 1], "sp": False, "top_k": 3}))
    flags = ["--model", model, *CLUSTER, "--tp", "1", "--tp", "2", "--micro-batch", "1", "--micro-batch", "2",
             "--recompute", "none", "--recompute", "full", "--attention", "eager", "--zero-stage", "0,1",
             "--no-sp", "--top", "3", "--json"]
    code, by_flags, _ = run(["plan", *flags], capsys)
    assert code == 0
    code, by_file, err = run(["plan", "--config", str(config), "--json"], capsys)
    assert code == 0, err
    assert json.loads(by_file) == json.loads(by_flags)
    # options given on the command line override the file
    code, overridden, _ = run(["plan", "--config", str(config), "--devices", "8", "--top", "2", "--json"],
                              capsys)
    code, expected, _ = run(["plan", *flags, "--devices", "8", "--top", "2"], capsys)
    assert json.loads(overridden) == json.loads(expected) and json.loads(overridden)["devices"] == 8


def test_a_bad_config_file_names_the_field(model: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(f"model: {model}\nhardware: a100-80gb\ndevices: 16\nglobal_batch: 32\n"
                      "micro_batches: [1, 0]\n")  # the earlier name, still read
    code, _, err = run(["plan", "--config", str(config)], capsys)
    assert code == 2 and "micro_batch_sizes must be a whole number from 1 to 1,048,576, got 0" in err
    config.write_text(f"model: {model}\nhardware: a100-80gb\ndevices: 16\nglobal_batch: 32\nmicro_batch: 2\n")
    code, _, err = run(["plan", "--config", str(config)], capsys)
    assert code == 2 and "unknown field 'micro_batch'" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["evaluate", "--model", model, *CLUSTER], capsys)
    assert code == 2 and "missing fields --tp, --pp, --dp, --micro-batch" in err


def test_config_example_plan_loads_and_runs(model: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["config", "--example", "plan"], capsys)
    assert code == 0 and out == EXAMPLES["plan"] and out.startswith("#")
    spec = PlanRun.from_dict(yaml.safe_load(out))
    assert spec == PlanRun(ModelSpec("llama2-7b"), HardwareSpec("a100-80gb"), ClusterSpec(64, 512),
                           PlanSpace(top_k=5))
    path = tmp_path / "plan.yaml"
    path.write_text(out)
    code, out, err = run(["plan", "--config", str(path), "--model", model, "--devices", "16",
                          "--global-batch", "32", "--tp", "2", "--micro-batch", "1", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["hardware"] == "a100-80gb" and len(data["plans"]) == 5
    code, _, err = run(["config", "--example", "nothing"], capsys)
    assert code == 2 and "unknown example 'nothing'; choose from: plan" in err
