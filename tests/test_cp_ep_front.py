"""Context and expert parallelism at the front door (issue 14): the specs' ``cps`` / ``eps``,
``plan`` / ``search`` ``--cp`` / ``--ep`` lists, ``evaluate --cp`` / ``--ep``, the Python API, the
search's cost keys and store identity, and the tables.

These tests check the parsing, validation, round trips and refusals; the numbers of cp and ep
are checked in tests/placement/test_cp_ep_engine.py, tests/cost and tests/workload.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

import archplace
from archplace.base.errors import ConfigError
from archplace.cli.options import cli_message
from archplace.dse.evaluate import DesignResult
from archplace.dse.request import SearchResult, request_identity
from archplace.front import api
from archplace.front.config_examples import EXAMPLES
from archplace.front.specs import Plan, PlanRun, PlanSpace, SearchSpec
from archplace.hw.presets import load_accelerator
from archplace.placement.plan import CostKey
from archplace.placement.result import PlanResult
from archplace.placement.workflow import PlanGrid
from archplace.reporting.plan_tables import detail_tables, plan_label
from archplace.reporting.tables import search_table
from cli_helpers import run
from front_door import CLUSTER, FIXED, gpt_config_file, one_design_space_file, refused


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return gpt_config_file(tmp_path_factory)


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> str:
    return one_design_space_file(tmp_path_factory)


# ------------------------------------------------------------------------------------- specs

def test_plan_space_degrees_are_checked_and_normalised() -> None:
    assert PlanSpace().cps is None and PlanSpace().eps is None  # automatic
    space = PlanSpace(cps=[2, 1, 2], eps=(8,))  # type: ignore[arg-type]
    assert space.cps == (2, 1) and space.eps == (8,)
    assert PlanSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space
    for bad, message in (((0,), "cps must be a whole number from 1 to 1,048,576, got 0"),
                         ((), "cps needs at least one value"), (2, "cps must be a list, got 2"),
                         ((True,), "cps must be a whole number")):
        with pytest.raises(ConfigError) as info:
            PlanSpace(cps=bad)  # type: ignore[arg-type]
        assert message in str(info.value) and info.value.fields == ("cps",)
    with pytest.raises(ConfigError) as info:
        PlanSpace(eps=(1, 2**21))
    assert cli_message(info.value) == "--ep must be a whole number from 1 to 1,048,576, got 2097152"


def test_plan_degrees_round_trip_through_plan_json() -> None:
    plan = Plan(tp=2, pp=2, dp=4, micro_batch=1, cp=4, ep=8)
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert plan.to_dict()["cp"] == 4 and plan.to_dict()["ep"] == 8
    with pytest.raises(ConfigError) as info:
        Plan(tp=1, pp=1, dp=1, micro_batch=1, ep=0)
    assert "plan.ep must be a whole number from 1" in str(info.value)


def test_run_files_read_the_degrees() -> None:
    run_file = {"model": "gpt2-xl", "hardware": "a100-80gb", "devices": 8, "global_batch": 8,
                "cps": [1, 2], "eps": [1]}
    parsed = PlanRun.from_dict(run_file)
    assert parsed.space.cps == (1, 2) and parsed.space.eps == (1,)
    assert PlanRun.from_dict(parsed.to_dict()) == parsed
    example = PlanRun.from_dict(yaml.safe_load(EXAMPLES["plan"]))
    assert example.space.cps is None and example.space.eps is None
    assert "cps: null" in EXAMPLES["plan"] and "eps: null" in EXAMPLES["plan"]


def test_search_spec_reads_the_degrees(tmp_path: Path) -> None:
    spec = SearchSpec(models=("gpt2-xl",), devices=1024, global_batch=4096)
    assert spec.cps is None and spec.eps is None
    assert SearchSpec.from_yaml(_written(tmp_path, EXAMPLES["search"])) == spec
    changed = spec.replace(cps=4, eps=[1, 8, 1])
    assert changed.cps == (4,) and changed.eps == (1, 8)  # a single value is a list of one
    assert SearchSpec.from_yaml(_written(tmp_path, changed.to_yaml())) == changed
    with pytest.raises(ConfigError, match=r"run.yaml: eps must be a whole number from 1 .* got -1"):
        SearchSpec.from_yaml(_written(tmp_path, "models: [m]\ndevices: 8\nglobal_batch: 8\neps: [-1]\n"))
    with pytest.raises(ConfigError) as info:
        spec.replace(cps=[0])
    assert cli_message(info.value).startswith("--cp must be")


def _written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------------------- CLI

@pytest.mark.parametrize(("options", "message"), [
    (["--cp", "0"], "--cp must be a whole number from 1 to 1,048,576, got 0"),
    (["--ep", "1", "--ep", str(2**21)], "--ep must be a whole number from 1 to 1,048,576, got 2097152"),
    (["--cp", "1", "--ep", "1", "--ep", "4"], "is a dense model (no routed experts to shard); use ep 1"),
])
def test_plan_options(options: list[str], message: str, model: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert message in refused(["plan", "--model", model, *CLUSTER, *options], capsys)


def test_plan_with_degree_one_is_the_plan_without(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", model, *CLUSTER, "--tp", "1", "--micro-batch", "1", "--json", "--top", "2"]
    code, plain, _ = run(base, capsys)
    assert code == 0
    code, degrees, _ = run([*base, "--cp", "1", "--ep", "1"], capsys)
    assert code == 0 and json.loads(degrees)["plans"] == json.loads(plain)["plans"]
    assert {(p["plan"]["cp"], p["plan"]["ep"]) for p in json.loads(plain)["plans"]} == {(1, 1)}
    code, split, _ = run([*base, "--cp", "2"], capsys)  # 128 tokens over 2 ranks: 4 chunks of 32
    assert code == 0 and {p["plan"]["cp"] for p in json.loads(split)["plans"]} == {2}


def test_plan_config_and_options_layer(model: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(yaml.safe_dump({"model": model, "hardware": "a100-80gb", "devices": 8,
                                      "global_batch": 8, "cps": [2], "tps": [1], "micro_batch_sizes": [1]}))
    code, out, err = run(["plan", "--config", str(config), "--json"], capsys)  # the file's cps
    assert code == 0 and json.loads(out)["plans"][0]["plan"]["cp"] == 2, err
    code, out, err = run(["plan", "--config", str(config), "--cp", "1", "--json"], capsys)  # the option wins
    assert code == 0 and json.loads(out)["plans"][0]["plan"]["cp"] == 1, err


def test_a_layer_graph_takes_no_degrees(capsys: pytest.CaptureFixture[str]) -> None:
    graph = str(Path(__file__).resolve().parents[1] / "examples" / "layer_graph.yaml")
    assert "--cp applies to --model" in refused(["plan", "--layer-graph", graph, *CLUSTER, "--cp", "1"],
                                                  capsys)


def test_evaluate_options_and_plan_files(model: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ["evaluate", "--model", model, *CLUSTER, *FIXED]
    assert "tp*cp*pp*dp = 1*2*1*8 = 16 exceeds the cluster's 8 devices" in refused(
        [*base, "--cp", "2"], capsys)
    assert "--ep must be a whole number from 1" in refused([*base, "--ep", "0"], capsys)  # as --tp
    code, out, _ = run([*base, "--cp", "1", "--ep", "1", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert (document["plan"]["cp"], document["plan"]["ep"]) == (1, 1)
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, again, _ = run(["evaluate", "--plan", str(saved), "--json"], capsys)  # evaluate --json round trip
    assert code == 0 and json.loads(again) == document
    document["plan"]["ep"] = 4
    saved.write_text(json.dumps(document))
    assert "--ep = 4: " in refused(["evaluate", "--plan", str(saved)], capsys)  # read
    code, _, err = run(["evaluate", "--plan", str(saved), "--ep", "1"], capsys)  # the option wins
    assert code == 0, err


def test_plan_json_to_evaluate_plan(model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", "--model", model, *CLUSTER, "--tp", "1", "--micro-batch", "1", "--cp", "1",
                        "--json"], capsys)
    assert code == 0
    saved = tmp_path / "best.json"
    saved.write_text(out)
    code, scored, _ = run(["evaluate", "--plan", str(saved), "--json"], capsys)
    assert code == 0
    assert json.loads(scored)["plan"] == json.loads(out)["plan"]


@pytest.mark.slow
def test_search_options(model: str, space: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "--model", model, "--space", space, "--devices", "8", "--global-batch", "8",
            "--jobs", "1", "--baseline", "none"]
    assert refused([*argv, "--ep", "0"], capsys).startswith("--ep must be a whole number")
    assert "is a dense model" in refused([*argv, "--ep", "2"], capsys)
    code, out, err = run([*argv, "--micro-batch", "1", "--cp", "1", "--ep", "1"], capsys)
    assert code == 0, err
    assert "tp/pp/dp" in out  # dense plans: the narrow column


# --------------------------------------------------------------------------------- Python API

def test_api_takes_the_degrees(model: str) -> None:
    cluster = {"devices": 8, "global_batch": 8}
    halved = archplace.evaluate(model, "a100-80gb", tp=1, pp=1, dp=4, micro_batch=1, cp=2, **cluster)
    assert (halved.plan.cp, halved.plan.devices) == (2, 8)
    with pytest.raises(ConfigError, match="eps must be a whole number"):
        archplace.plan(model, "a100-80gb", eps=[0], **cluster)
    fixed = archplace.evaluate(model, "a100-80gb", tp=1, pp=1, dp=8, micro_batch=1, cp=1, ep=1, **cluster)
    assert (fixed.plan.cp, fixed.plan.ep) == (1, 1)
    report = archplace.plan(model, "a100-80gb", tps=[1], micro_batch_sizes=[1], cps=[1], eps=[1], **cluster)
    assert report.plan == archplace.plan(model, "a100-80gb", tps=[1], micro_batch_sizes=[1], **cluster).plan


# ------------------------------------------------------------------------------------- search

def test_search_cost_keys_and_identity_carry_the_degrees(model: str, space: str) -> None:
    request = api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1],
                                 tps=[1, 2], cps=[1], eps=[1])
    assert request.cost_keys == (CostKey(1, 1, False), CostKey(2, 1, False), CostKey(2, 1, True))
    assert request_identity(request) == request_identity(
        api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1], tps=[1, 2]))
    fields = {f.name: getattr(request.plan_space, f.name) for f in dataclasses.fields(PlanGrid)}
    wider = dataclasses.replace(request, plan_space=PlanGrid(**{**fields, "cps": (1, 2), "eps": (4,)}))
    assert wider.cost_keys[:2] == (CostKey(1, 1, False, 1, 4), CostKey(1, 1, False, 2, 4))
    assert len(wider.cost_keys) == 6
    identity = request_identity(wider)
    assert identity != request_identity(request)
    assert [1, 1, False, 2, 4, 1] in identity["cost_keys"]
    with pytest.raises(ConfigError, match="cps must be a whole number from 1"):  # at the front door
        api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1], cps=[0])


# ------------------------------------------------------------------------------------- tables

def _text(*tables: object) -> str:
    console = Console(width=250, record=True)
    for table in tables:
        console.print(table)
    return console.export_text()


@pytest.fixture(scope="module")
def result(model: str) -> PlanResult:
    return archplace.evaluate(model, "a100-80gb", tp=2, pp=1, dp=4, micro_batch=1, zero_stage=1,
                              precision="bf16", devices=8, global_batch=8)


def test_plan_label_shows_the_degrees(result: PlanResult) -> None:
    assert plan_label(result) == "tp2 pp1 dp4 b=1 1f1b recompute=none zero1"
    wide = dataclasses.replace(result, plan=dataclasses.replace(result.plan, cp=2, ep=4))
    assert plan_label(wide) == "tp2 cp2 ep4 pp1 dp4 b=1 1f1b recompute=none zero1"


def test_detail_tables_show_every_part_and_kind(result: PlanResult) -> None:
    text = _text(*detail_tables(result))  # cp = ep = 1: their zero rows are left out (JSON keeps them)
    assert result.breakdown_s["cp_comm"] == 0.0 and "cp_comm" not in text and "ep_comm" not in text
    more = dataclasses.replace(result, breakdown_s={**result.breakdown_s, "cp_comm": 0.0, "ep_comm": 0.0},
                               comm_s={**result.comm_s, "cp": {"total": 0.5, "exposed": 0.25},
                                       "ep": {"total": 0.0, "exposed": 0.0}},
                               plan=dataclasses.replace(result.plan, dp=2, cp=2, ep=2))
    text = _text(*detail_tables(more))  # a plan with cp and ep shows their rows, zero or not
    assert "cp_comm" in text and "ep_comm" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["│", "cp", "│", "0.5000", "│", "0.2500", "│", "0.2500", "│", "0.0000", "│"] in rows  # + slowed
    assert any(row[:2] == ["│", "ep"] for row in rows)


def test_search_table_lists_cp_and_ep(result: PlanResult) -> None:
    acc = load_accelerator("tpuv4")
    dense = DesignResult(acc, 100.0, result)
    moe = DesignResult(dataclasses.replace(acc, name="moe"), 100.0,
                       dataclasses.replace(result, plan=dataclasses.replace(result.plan, cp=2, ep=4)))
    narrow = _text(search_table(SearchResult(evaluated=(dense,), model="m", devices=8, global_batch=8), 5))
    assert "tp/pp/dp" in narrow and " 2/1/4 " in narrow and "tp/cp/ep/pp/dp" not in narrow
    wide = _text(search_table(SearchResult(evaluated=(moe, dense), model="m", devices=8, global_batch=8), 5))
    assert "tp/cp/ep/pp/dp" in wide and " 2/2/4/1/4 " in wide and " 2/1/1/1/4 " in wide
