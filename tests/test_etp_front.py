"""Expert tensor parallelism at the front door (issue 14): the specs' ``etps``, ``plan`` /
``search`` ``--etp`` lists, ``evaluate --etp``, the plan grid's automatic widths and its cost
keys (SP only for a mixture-of-experts model at tp > 1), the Python API, the search's cost keys,
and the tables.

The numbers of etp are checked in tests/placement/test_etp_engine.py (synthetic chains); the
traced MoE chains at etp > 1 come with the workload's expert-TP transform.
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
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.placement import workflow
from archplace.placement.plan import CostKey, LayerCost, Recompute, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.placement.workflow import PlanGrid
from archplace.reporting.plan_tables import plan_label
from archplace.reporting.tables import search_table
from archplace.workload.zoo import load_model
from cli_helpers import run
from front_door import CLUSTER, FIXED, gpt_config_file, one_design_space_file, refused


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return gpt_config_file(tmp_path_factory)


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> str:
    return one_design_space_file(tmp_path_factory)


# ------------------------------------------------------------------------------------- specs

def test_plan_space_etps_are_checked_and_normalised() -> None:
    assert PlanSpace().etps is None  # automatic
    space = PlanSpace(etps=[2, 1, 2])  # type: ignore[arg-type]
    assert space.etps == (2, 1)
    assert PlanSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space
    with pytest.raises(ConfigError) as info:
        PlanSpace(etps=(0,))
    assert info.value.fields == ("etps",)
    assert cli_message(info.value) == "--etp must be a whole number from 1 to 1,048,576, got 0"


def test_plan_etp_round_trips_and_run_files_read_etps(tmp_path: Path) -> None:
    plan = Plan(tp=2, pp=1, dp=4, micro_batch=1, ep=2, etp=2, sp=True)
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan and plan.to_dict()["etp"] == 2
    parsed = PlanRun.from_dict({"model": "gpt2-xl", "hardware": "a100-80gb", "devices": 8, "global_batch": 8,
                                "etps": [1, 2]})
    assert parsed.space.etps == (1, 2) and PlanRun.from_dict(parsed.to_dict()) == parsed
    assert PlanRun.from_dict(yaml.safe_load(EXAMPLES["plan"])).space.etps is None
    assert "etps: null" in EXAMPLES["plan"] and "etps: null" in EXAMPLES["search"]
    spec = SearchSpec(models=("gpt2-xl",), devices=1024, global_batch=4096)
    assert spec.etps is None
    changed = spec.replace(etps=[1, 4, 1])
    assert changed.etps == (1, 4)
    path = tmp_path / "run.yaml"
    path.write_text(changed.to_yaml())
    assert SearchSpec.from_yaml(path) == changed
    with pytest.raises(ConfigError) as info:
        spec.replace(etps=[0])
    assert cli_message(info.value).startswith("--etp must be")


# ------------------------------------------------------------------------------ the plan grid

def test_automatic_etp_widths() -> None:
    mixtral, llama = load_model("mixtral-8x7b"), load_model("llama3-8b")
    assert workflow.valid_etp_degrees(mixtral, 1) == (1,)
    assert workflow.valid_etp_degrees(mixtral, 4) == (1, 4)
    assert workflow.valid_etp_degrees(llama, 4) == (1,)
    config = {**mixtral.config, "moe_intermediate_size": 1000}
    odd = dataclasses.replace(mixtral, config_json=json.dumps(config, sort_keys=True))
    assert workflow.valid_etp_degrees(odd, 8) == (1, 8)  # 1000 = 8 * 125
    assert workflow.valid_etp_degrees(odd, 16) == (1,)  # 16 does not divide the experts' FFN width
    assert PlanGrid().etps is None


def _layer(name: str, key: CostKey) -> LayerCost:
    routed = 900_000 // (key.ep * key.etp)  # this rank's share of the experts
    return LayerCost(name, fwd_s=1.0, bwd_s=2.0, params=100_000 + routed, activation_bytes=0.0,
                     input_bytes=1e4, boundary_bytes=1e6, working_bytes=0.0, fwd_flop=1e9, bwd_flop=2e9,
                     expert_params=routed)


def _problem(monkeypatch: pytest.MonkeyPatch, asked: list[CostKey], devices: int = 8,
             hbm: float = 12e6) -> workflow.Problem:
    """Mixtral's name on 8 devices of 12 MB: a layer of whole experts (18 MB of Adam state) fits
    nowhere, one of experts split in two (9.9 MB) does."""
    def fake_costs(prob, keys, **_):
        asked.extend(keys)
        return {key: [_layer(f"l{k}", key) for k in range(4)] for key in keys}
    monkeypatch.setattr(workflow, "layer_costs_for", fake_costs)
    monkeypatch.setattr(workflow, "check_precision", lambda acc, precision: None)
    return _moe_problem(_setup(devices, hbm))


def _setup(devices: int = 8, hbm: float = 1e12) -> TrainingSetup:
    cluster = Cluster(devices=devices, devices_per_node=devices, intra_node_bandwidth_bytes_per_s=1e11,
                      inter_node_bandwidth_bytes_per_s=1e9, intra_node_latency_s=1e-6,
                      inter_node_latency_s=1e-5)
    return TrainingSetup(cluster=cluster, global_batch=8, seq_len=4096, hbm_bytes=hbm,
                         hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e15)


def _moe_problem(setup: TrainingSetup) -> workflow.Problem:
    return workflow.Problem(load_model("mixtral-8x7b").with_seq_len(4096), None, setup)  # type: ignore[arg-type]


def test_plan_keys_carry_etp_and_moe_with_tp_takes_sp(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[CostKey] = []
    prob = _problem(monkeypatch, asked)
    grid = PlanGrid(tps=(1, 2), micro_batch_sizes=(1,), sps=(False, True), cps=(1,), eps=(1,),
                    recomputes=(Recompute.NONE,), zero_stages=(0,), precisions=(workflow.Precision.BF16,))
    (best,) = workflow.plan(prob, grid)
    # automatic: etp 1 at tp 1; 1 and 2 at tp 2, with SP only (Megatron-Core: MoE with TP needs SP)
    assert asked == [CostKey(1, 1, False), CostKey(2, 1, True, 1, 1, 1), CostKey(2, 1, True, 1, 1, 2)]
    assert (best.plan.tp, best.plan.etp, best.plan.sp) == (2, 2, True)  # only the split experts fit
    asked.clear()
    (best,) = workflow.plan(prob, dataclasses.replace(grid, tps=(1,), etps=(1, 2)))
    assert asked == [CostKey(1, 1, False, 1, 1, 1), CostKey(1, 1, False, 1, 1, 2)]
    assert best.plan.etp == 2 and best.plan.dp % 2 == 0  # etp 2 folded into the DP ranks
    with pytest.raises(ConfigError, match=r"plan.sp: mixtral-8x7b at tp = 2 needs sequence parallelism"):
        workflow.plan(prob, dataclasses.replace(grid, tps=(2,), sps=(False,)))
    with pytest.raises(ConfigError, match="at least one expert-TP width"):
        workflow.plan(prob, dataclasses.replace(grid, etps=()))


def test_dense_models_refuse_etp() -> None:
    dense = workflow.Problem(load_model("llama3-8b").with_seq_len(4096), None, _setup())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="plan.etp = 2: llama3-8b is a dense model") as info:
        workflow.plan(dense, PlanGrid(tps=(1,), etps=(2,)))
    assert info.value.fields == ("plan.etp",)
    with pytest.raises(ConfigError, match="plan.etp = 2: llama3-8b is a dense model"):
        workflow.evaluate(dense, tp=1, pp=1, dp=2, micro_batch=1, recompute=Recompute.NONE,
                          schedule="1f1b", etp=2)  # type: ignore[arg-type]


def test_evaluate_checks_etp_in_numbers() -> None:
    moe = _moe_problem(_setup())
    kw = dict(tp=1, pp=1, dp=2, micro_batch=1, recompute=Recompute.NONE, schedule="1f1b")
    refusal = r"plan: etp\*ep = 2\*2 = 4 must divide tp\*cp\*dp = 1\*1\*2 = 2"
    with pytest.raises(ConfigError, match=refusal) as info:
        workflow.evaluate(moe, ep=2, etp=2, **kw)  # type: ignore[arg-type]
    assert info.value.fields == ("plan.etp", "plan.ep")
    with pytest.raises(ConfigError, match=r"plan.ep = 4 must divide dp\*cp = 2\*1 = 2"):
        workflow.evaluate(moe, ep=4, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------- CLI

@pytest.mark.parametrize(("options", "message"), [
    (["--etp", "0"], "--etp must be a whole number from 1 to 1,048,576, got 0"),
    (["--etp", "1", "--etp", "2"], "--etp = 2: "),
])
def test_plan_etp_options(options: list[str], message: str, model: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    refusal = refused(["plan", "--model", model, *CLUSTER, *options], capsys)
    assert message in refusal
    if "--etp = 2" in message:
        assert refusal.endswith("is a dense model (no routed experts to split); use etp 1")


def test_plan_etp_one_is_the_plan_without(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", model, *CLUSTER, "--tp", "1", "--micro-batch", "1", "--json", "--top", "2"]
    code, plain, _ = run(base, capsys)
    assert code == 0
    code, given, _ = run([*base, "--etp", "1"], capsys)
    assert code == 0 and json.loads(given)["plans"] == json.loads(plain)["plans"]
    assert {p["plan"]["etp"] for p in json.loads(plain)["plans"]} == {1}


def test_a_layer_graph_takes_no_etp(capsys: pytest.CaptureFixture[str]) -> None:
    graph = str(Path(__file__).resolve().parents[1] / "examples" / "layer_graph.yaml")
    assert "--etp applies to --model" in refused(["plan", "--layer-graph", graph, *CLUSTER, "--etp", "1"],
                                                   capsys)


def test_evaluate_etp_and_plan_files(model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["evaluate", "--model", model, *CLUSTER, *FIXED]
    assert "--etp must be a whole number from 1" in refused([*base, "--etp", "0"], capsys)
    assert "--etp = 2: " in refused([*base, "--etp", "2"], capsys)
    code, out, _ = run([*base, "--etp", "1", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["plan"]["etp"] == 1
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, again, _ = run(["evaluate", "--plan", str(saved), "--json"], capsys)
    assert code == 0 and json.loads(again) == document
    document["plan"]["etp"] = 2
    saved.write_text(json.dumps(document))
    assert "--etp = 2: " in refused(["evaluate", "--plan", str(saved)], capsys)  # read from the file
    code, _, err = run(["evaluate", "--plan", str(saved), "--etp", "1"], capsys)  # the option wins
    assert code == 0, err


def test_search_etp_options(model: str, space: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "--model", model, "--space", space, "--devices", "8", "--global-batch", "8",
            "--jobs", "1", "--baseline", "none"]
    assert refused([*argv, "--etp", "0"], capsys).startswith("--etp must be a whole number")
    assert refused([*argv, "--etp", "2"], capsys) == (
        "--etp = 2: every model is dense (no routed experts to split); use etp 1")


# ------------------------------------------------------------------------------ API and search

def test_api_takes_etp(model: str) -> None:
    cluster = {"devices": 8, "global_batch": 8}
    with pytest.raises(ConfigError, match="etps must be a whole number"):
        archplace.plan(model, "a100-80gb", etps=[0], **cluster)
    with pytest.raises(ConfigError, match="plan.etp = 2: .* is a dense model"):
        archplace.evaluate(model, "a100-80gb", tp=1, pp=1, dp=8, micro_batch=1, etp=2, **cluster)
    fixed = archplace.evaluate(model, "a100-80gb", tp=1, pp=1, dp=8, micro_batch=1, etp=1, **cluster)
    assert fixed.plan.etp == 1


def test_search_cost_keys_carry_etp(model: str, space: str) -> None:
    request = api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1],
                                 tps=[1])
    assert request.plan_space.etps == (1,) and request.cost_keys == (CostKey(1, 1, False),)
    fields = {f.name: getattr(request.plan_space, f.name) for f in dataclasses.fields(PlanGrid)}
    wider = dataclasses.replace(request, plan_space=PlanGrid(**{**fields, "tps": (1, 2), "etps": (1, 2)}))
    assert CostKey(2, 1, True, 1, 1, 2) in wider.cost_keys and len(wider.cost_keys) == 6
    assert [2, 1, True, 1, 1, 2] in request_identity(wider)["cost_keys"]
    dense = request.models[0]
    assert all(key.etp == 1 for key in wider.model_keys(dense))  # a dense model: etp 1 only
    moe = load_model("mixtral-8x7b")
    assert all(key.sp or key.tp == 1 for key in wider.model_keys(moe))  # MoE with TP: SP only
    assert CostKey(2, 1, True, 1, 1, 2) in wider.model_keys(moe)
    with pytest.raises(ConfigError, match="etps must be a whole number from 1"):  # at the front door
        api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1], etps=[0])


# ------------------------------------------------------------------------------------- tables

def _text(*tables: object) -> str:
    console = Console(width=250, record=True)
    for table in tables:
        console.print(table)
    return console.export_text()


@pytest.fixture(scope="module")
def result(model: str) -> PlanResult:
    return archplace.evaluate(model, "a100-80gb", tp=2, pp=1, dp=4, micro_batch=1, zero_stage=1,
                              devices=8, global_batch=8)


def test_tables_show_etp_when_used(result: PlanResult) -> None:
    split = dataclasses.replace(result, plan=dataclasses.replace(result.plan, ep=2, etp=2))
    assert plan_label(result) == "tp2 pp1 dp4 b=1 1f1b recompute=none zero1"
    assert plan_label(split) == "tp2 ep2 etp2 pp1 dp4 b=1 1f1b recompute=none zero1"
    acc = load_accelerator("tpuv4")
    dense = DesignResult(acc, 100.0, result)
    moe = DesignResult(dataclasses.replace(acc, name="moe"), 100.0, split)
    narrow = _text(search_table(SearchResult(evaluated=(dense,), model="m", devices=8, global_batch=8), 5))
    assert "etp" not in narrow
    wide = _text(search_table(SearchResult(evaluated=(moe, dense), model="m", devices=8, global_batch=8), 5))
    assert "tp/cp/ep/etp/pp/dp" in wide and " 2/1/2/2/1/4 " in wide and " 2/1/1/1/1/4 " in wide


def test_evaluate_costs_the_etp_key(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[CostKey] = []
    prob = _problem(monkeypatch, asked, hbm=1e12)
    result = workflow.evaluate(prob, tp=1, pp=1, dp=2, micro_batch=1, recompute=Recompute.NONE,
                               schedule="1f1b", stages=((0, 3),), etp=2)  # type: ignore[arg-type]
    assert asked == [CostKey(1, 1, False, 1, 1, 2)] and result.plan.etp == 2


def test_the_search_finds_the_chains_of_an_etp_plan(result: PlanResult) -> None:
    from archplace.dse.runner import _plan_chains
    split = dataclasses.replace(result, plan=dataclasses.replace(result.plan, ep=2, etp=2))
    mine = CostKey(2, 1, False, 1, 2, 2)
    chains = {"m": {CostKey(2, 1, False, 1, 2, 1): "etp 1", mine: "etp 2"}}
    found = _plan_chains(DesignResult(load_accelerator("tpuv4"), 100.0, split), chains)  # type: ignore[arg-type]
    assert found == {"m": {mine: "etp 2"}}


def test_a_stored_request_reads_its_degrees_back(model: str, space: str) -> None:
    from archplace.reporting.pages import stored_request
    request = api.search_request(model, space=space, devices=8, global_batch=8, micro_batch_sizes=[1],
                                 tps=[1, 2], cps=[1, 2], eps=[1])
    request = dataclasses.replace(request, plan_space=dataclasses.replace(request.plan_space, etps=(1, 2)))
    stored = stored_request(request_identity(request), [m.name for m in request.models])
    assert (stored.grid.cps, stored.grid.eps, stored.grid.etps) == ((1, 2), (1,), (1, 2))
    rebuilt = dataclasses.replace(request, plan_space=stored.grid)
    assert rebuilt.cost_keys == request.cost_keys
