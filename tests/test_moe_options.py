"""The rank order, the expert capacity factor and the expert load imbalance at the front door
(issue 14): specs, CLI flags, YAML run files, the Python API, the plan's recorded order, and
the numbers they change.

The engine's treatment of the rank order is checked in tests/placement/test_cp_ep_engine.py and
the sharding of the experts in tests/workload/test_expert_parallel.py; these tests check that the
options reach them, are recorded, and are refused with one line when bad.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import archplace
from archplace.base.errors import ConfigError
from archplace.dse.request import SearchResult
from archplace.front import api
from archplace.front.config_examples import EXAMPLES
from archplace.front.specs import ModelSpec, Plan, PlanRun, PlanSpace, SearchSpec
from archplace.placement.plan import Plan as EnginePlan
from archplace.placement.plan import RankOrder, Recompute
from cli_helpers import run

# A small Mixtral-architecture model (tests/workload/test_expert_parallel.py's): 2 layers,
# hidden 256, 4 experts of width 512, top-2.
MOE: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
       "vocab_size": 1024}
# 16 a100-80gb devices, 8 per node: pp = 2 and dp = 8 put either the pipeline or the replicas
# across the two nodes, depending on the order.
CLUSTER = ["--hardware", "a100-80gb", "--devices", "16", "--global-batch", "16", "--seq-len", "64"]
FIXED = ["--tp", "1", "--pp", "2", "--dp", "8", "--micro-batch", "1"]
MOE_FIXED = ["--hardware", "a100-80gb", "--devices", "8", "--global-batch", "16", "--seq-len", "64",
             "--tp", "1", "--pp", "1", "--dp", "8", "--ep", "4", "--micro-batch", "2"]
ORDERS = [order.value for order in RankOrder]


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("moe") / "config.json"
    path.write_text(json.dumps(MOE))
    return str(path)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("gpt") / "config.json"
    path.write_text(json.dumps(GPT))
    return str(path)


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(argv, capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0]


# --- the rank order -------------------------------------------------------------------------

def test_engine_plan_rank_order_round_trip() -> None:
    plan = EnginePlan(tp=1, pp=2, dp=4, micro_batch=1, recompute=Recompute.NONE, stages=((0, 1), (2, 3)),
                      rank_order="tp-cp-ep-dp-pp")  # type: ignore[arg-type]
    assert plan.rank_order is RankOrder.TP_CP_EP_DP_PP
    data = plan.to_dict()
    assert data["rank_order"] == "tp-cp-ep-dp-pp"
    assert EnginePlan.from_dict(data) == plan
    del data["rank_order"]  # plans written before the field: the default order
    assert EnginePlan.from_dict(data).rank_order is RankOrder.TP_CP_EP_PP_DP
    with pytest.raises(ConfigError,
                       match="unknown rank_order 'dp-pp'; choose from: tp-cp-ep-pp-dp, tp-cp-ep-dp-pp"):
        EnginePlan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.NONE, stages=((0, 3),),
                   rank_order="dp-pp")  # type: ignore[arg-type]


def test_spec_rank_order_fields() -> None:
    assert Plan(tp=1, pp=1, dp=1, micro_batch=1).rank_order is RankOrder.TP_CP_EP_PP_DP
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, rank_order="TP-CP-EP-DP-PP")  # type: ignore[arg-type]
    assert plan.rank_order is RankOrder.TP_CP_EP_DP_PP
    assert Plan.from_dict(plan.to_dict()) == plan
    space = PlanSpace(rank_order="tp-cp-ep-dp-pp")  # type: ignore[arg-type]
    assert PlanSpace.from_dict(space.to_dict()) == space
    assert space.to_dict()["rank_order"] == "tp-cp-ep-dp-pp"
    with pytest.raises(ConfigError, match=r"^plan.rank_order: unknown rank_order 'x'; choose from: "):
        Plan(tp=1, pp=1, dp=1, micro_batch=1, rank_order="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^rank_order: unknown rank_order \['tp'\]"):
        PlanSpace(rank_order=["tp"])  # type: ignore[arg-type]


def test_the_order_moves_the_pipeline_and_dp_links(gpt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pp = 2, dp = 8 on two nodes of 8: tp-cp-ep-pp-dp keeps the pipeline neighbours in a node
    and spreads each stage's replicas over both; tp-cp-ep-dp-pp keeps a stage's replicas in one
    node and sends the pipeline across: less pp_comm and more dp_comm for the first."""
    got = {order: _json(["evaluate", "--model", gpt, *CLUSTER, *FIXED, "--rank-order", order, "--json"],
                        capsys)
           for order in ORDERS}
    pp_dp, dp_pp = got["tp-cp-ep-pp-dp"], got["tp-cp-ep-dp-pp"]
    assert (pp_dp["plan"]["rank_order"], dp_pp["plan"]["rank_order"]) == ("tp-cp-ep-pp-dp", "tp-cp-ep-dp-pp")
    assert pp_dp["breakdown_s"]["pp_comm"] < dp_pp["breakdown_s"]["pp_comm"]
    assert pp_dp["breakdown_s"]["dp_comm"] > dp_pp["breakdown_s"]["dp_comm"]
    assert pp_dp["breakdown_s"]["compute"] == dp_pp["breakdown_s"]["compute"]
    # the API gives the same numbers and records the order
    result = archplace.evaluate(gpt, "a100-80gb", devices=16, global_batch=16, seq_len=64, tp=1, pp=2, dp=8,
                                micro_batch=1, rank_order="tp-cp-ep-dp-pp")
    assert result.plan.rank_order is RankOrder.TP_CP_EP_DP_PP
    assert result.iteration_time_s == dp_pp["iteration_time_s"]


def test_plan_records_the_order_and_evaluate_scores_it_again(
        gpt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", gpt, *CLUSTER, "--tp", "1", "--micro-batch", "1", "--schedule", "1f1b",
            "--recompute", "none", "--zero-stage", "0", "--top", "2", "--json"]
    for order in ORDERS:
        doc = _json([*argv, "--rank-order", order], capsys)
        assert {p["plan"]["rank_order"] for p in doc["plans"]} == {order}
        path = tmp_path / f"{order}.json"
        path.write_text(json.dumps(doc))
        again = _json(["evaluate", "--plan", str(path), "--json"], capsys)
        assert again["plan"]["rank_order"] == order
        assert again["iteration_time_s"] == doc["iteration_time_s"]
        assert again["breakdown_s"] == doc["breakdown_s"]
    results = archplace.plan(gpt, "a100-80gb", devices=16, global_batch=16, seq_len=64, tps=[1],
                             micro_batch_sizes=[1], rank_order="tp-cp-ep-dp-pp")
    assert results.plan.rank_order is RankOrder.TP_CP_EP_DP_PP


def test_rank_order_flag_equals_yaml(gpt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"model": gpt, "seq_len": 64, "hardware": "a100-80gb", "devices": 16, "global_batch": 16,
            "tps": [1], "micro_batch_sizes": [1], "schedules": ["1f1b"], "recomputes": ["none"],
            "zero_stages": [0], "top_k": 1}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**base, "rank_order": "tp-cp-ep-dp-pp"}))
    from_file = _json(["plan", "--config", str(path), "--json"], capsys)
    path.write_text(yaml.safe_dump(base))
    from_flag = _json(["plan", "--config", str(path), "--rank-order", "tp-cp-ep-dp-pp", "--json"], capsys)
    assert from_file["plan"]["rank_order"] == "tp-cp-ep-dp-pp"
    assert from_file["plans"] == from_flag["plans"]
    run_file = PlanRun.from_dict({**base, "rank_order": "tp-cp-ep-dp-pp"})
    assert run_file.space.rank_order is RankOrder.TP_CP_EP_DP_PP


def test_bad_rank_order_is_one_line(gpt: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["evaluate", "--model", gpt, *CLUSTER, *FIXED, "--rank-order", "dp-pp"], capsys)
    assert "unknown rank_order 'dp-pp'; choose from: tp-cp-ep-pp-dp, tp-cp-ep-dp-pp" in line
    line = _refused(["plan", "--model", gpt, *CLUSTER, "--rank-order", "pp"], capsys)
    assert "choose from: tp-cp-ep-pp-dp, tp-cp-ep-dp-pp" in line


# --- capacity factor and load imbalance -----------------------------------------------------

def test_model_spec_fields() -> None:
    spec = ModelSpec("m", capacity_factor=1.25, expert_load_imbalance=2)
    assert (spec.capacity_factor, spec.expert_load_imbalance) == (1.25, 2.0)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert (ModelSpec("m").capacity_factor, ModelSpec("m").expert_load_imbalance) == (1.0, 1.0)
    for name in ("capacity_factor", "expert_load_imbalance"):
        for bad in (0.5, float("nan"), float("inf"), "2", True, 2000.0):
            with pytest.raises(ConfigError,
                               match=rf"^{name} must be a finite number at least 1 and at most 1024"):
                ModelSpec("m", **{name: bad})  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match=rf"^{name} must be a finite number"):
                SearchSpec(models=("m",), devices=1, global_batch=1, **{name: bad})  # type: ignore[arg-type]


def test_capacity_factor_raises_ep_comm_and_compute(moe: str, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    """Above 1 every expert is padded to capacity: its GEMMs and the all-to-all bytes grow.

    On a100-80gb without its measured kernel tables and 5.2 us kernel floor: every kernel of this
    toy model (hidden 256) sits at the floor there, so padding would not lengthen its GEMMs."""
    preset = Path(archplace.__file__).parent / "hw" / "presets" / "a100-80gb.yaml"
    lines = preset.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  kernel_tables:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("  attention_fwd:"))
    hardware = tmp_path / "a100-fractions.yaml"
    hardware.write_text("\n".join(lines[:start] + lines[end:]) + "\n", encoding="utf-8")
    fixed = [str(hardware) if arg == "a100-80gb" else arg for arg in MOE_FIXED]
    base = _json(["evaluate", "--model", moe, *fixed, "--json"], capsys)
    padded = _json(["evaluate", "--model", moe, *fixed, "--capacity-factor", "1.25", "--json"], capsys)
    assert padded["capacity_factor"] == 1.25 and base["capacity_factor"] == 1.0
    assert padded["breakdown_s"]["ep_comm"] > base["breakdown_s"]["ep_comm"] > 0
    assert padded["breakdown_s"]["compute"] > base["breakdown_s"]["compute"]
    assert padded["iteration_time_s"] > base["iteration_time_s"]
    # a load imbalance is ignored above capacity factor 1 (every expert padded), counted at 1
    skewed = _json(["evaluate", "--model", moe, *fixed, "--expert-load-imbalance", "1.5", "--json"],
                   capsys)
    assert skewed["breakdown_s"]["ep_comm"] > base["breakdown_s"]["ep_comm"]
    both = _json(["evaluate", "--model", moe, *fixed, "--capacity-factor", "1.25",
                  "--expert-load-imbalance", "1.5", "--json"], capsys)
    assert both["breakdown_s"] == padded["breakdown_s"]
    # the API gives the same numbers
    result = archplace.evaluate(moe, str(hardware), devices=8, global_batch=16, seq_len=64, tp=1, pp=1, dp=8,
                                ep=4, micro_batch=2, capacity_factor=1.25)
    assert result.breakdown_s == padded["breakdown_s"]


def test_moe_flags_equal_yaml(moe: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.yaml"
    plan = {"tp": 1, "pp": 1, "dp": 8, "ep": 4, "micro_batch": 2}
    run_file = {"model": moe, "seq_len": 64, "hardware": "a100-80gb", "devices": 8, "global_batch": 16,
                "capacity_factor": 1.25, "expert_load_imbalance": 1.5, "plan": plan}
    path.write_text(yaml.safe_dump(run_file))
    from_file = _json(["evaluate", "--plan", str(path), "--json"], capsys)
    from_flags = _json(["evaluate", "--model", moe, *MOE_FIXED, "--capacity-factor", "1.25",
                        "--expert-load-imbalance", "1.5", "--json"], capsys)
    assert from_file["breakdown_s"] == from_flags["breakdown_s"]
    assert (from_file["capacity_factor"], from_file["expert_load_imbalance"]) == (1.25, 1.5)
    # an evaluate --json document carries them, so that evaluate --plan scores it again
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(from_flags))
    again = _json(["evaluate", "--plan", str(doc), "--json"], capsys)
    assert again["breakdown_s"] == from_flags["breakdown_s"]
    # plan --config reads them too
    space = {key: value for key, value in run_file.items() if key != "plan"}
    path.write_text(yaml.safe_dump({**space, "tps": [1], "micro_batch_sizes": [2], "eps": [4], "cps": [1],
                                    "schedules": ["1f1b"], "recomputes": ["none"], "zero_stages": [0]}))
    planned = _json(["plan", "--config", str(path), "--json"], capsys)
    flagged = _json(["plan", "--model", moe, "--hardware", "a100-80gb", "--devices", "8", "--global-batch",
                     "16", "--seq-len", "64", "--tp", "1", "--micro-batch", "2", "--ep", "4", "--cp", "1",
                     "--schedule", "1f1b", "--recompute", "none", "--zero-stage", "0", "--capacity-factor",
                     "1.25", "--expert-load-imbalance", "1.5", "--json"], capsys)
    assert planned["plans"] == flagged["plans"]


def test_graph_takes_the_options(moe: str, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _json(["graph", "--model", moe, "--seq-len", "64", "--ep", "2", "--json"], capsys)
    padded = _json(["graph", "--model", moe, "--seq-len", "64", "--ep", "2", "--capacity-factor", "2",
                    "--json"], capsys)
    assert (padded["capacity_factor"], plain["capacity_factor"]) == (2.0, 1.0)
    assert padded["total"]["fwd_flop"] > plain["total"]["fwd_flop"]
    assert api.graph(moe, seq_len=64, ep=2, capacity_factor=2.0)["total"] == padded["total"]


def test_bad_values_are_one_line(moe: str, gpt: str, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--capacity-factor", "--expert-load-imbalance"):
        for value in ("0.5", "nan", "inf"):
            line = _refused(["evaluate", "--model", moe, *MOE_FIXED, flag, value], capsys)
            assert f"{flag} must be a finite number at least 1" in line  # the option given
        assert f"Invalid value for '{flag}'" in _refused(["graph", "--model", moe, flag, "x"], capsys)


def test_a_dense_model_refuses_them(gpt: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["evaluate", "--model", gpt, *CLUSTER, *FIXED, "--capacity-factor", "1.25"], capsys)
    assert line.startswith("archplace: error: --capacity-factor = 1.25 applies to mixture-of-experts "
                           "models; ")
    assert line.endswith(" is dense (leave it at 1)"), line
    line = _refused(["graph", "--model", gpt, "--expert-load-imbalance", "2"], capsys)
    assert "--expert-load-imbalance = 2 applies to mixture-of-experts models" in line
    with pytest.raises(ConfigError, match="capacity_factor = 1.5 applies to mixture-of-experts models"):
        archplace.plan(gpt, "a100-80gb", devices=16, global_batch=16, seq_len=64, capacity_factor=1.5)
    # 1.0 given explicitly is the default: accepted
    _json(["evaluate", "--model", gpt, *CLUSTER, *FIXED, "--capacity-factor", "1", "--json"], capsys)


def test_search_records_and_keys_them(moe: str, tmp_path: Path) -> None:
    request = api.search_request(moe, devices=8, global_batch=16, seq_len=64, micro_batch_sizes=[2], tps=[1],
                                 eps=[1, 2], capacity_factor=1.25, baseline=None)
    assert (request.plan_space.capacity_factor, request.plan_space.expert_load_imbalance) == (1.25, 1.0)
    chains = request.chains(request.models[0])
    assert {key.ep for key in chains} == {1, 2}
    from archplace.dse.request import request_identity
    identity = request_identity(request)
    assert identity["capacity_factor"] == 1.25 and "expert_load_imbalance" not in identity
    default = request_identity(api.search_request(moe, devices=8, global_batch=16, seq_len=64,
                                                  micro_batch_sizes=[2], tps=[1], eps=[1, 2], baseline=None))
    assert "capacity_factor" not in default  # earlier stores still resume
    result = SearchResult(evaluated=(), capacity_factor=1.25, expert_load_imbalance=1.5)
    assert SearchResult.from_dict(result.to_dict()) == result
    spec = SearchSpec.from_dict({"models": [moe], "devices": 8, "global_batch": 16, "capacity_factor": 1.25})
    assert api.spec_request(spec.replace(seq_len=64, tps=(1,), micro_batch_sizes=(2,), baseline=None)
                            ).plan_space.capacity_factor == 1.25


def test_examples_show_them_with_their_defaults() -> None:
    for name, defaults in (("plan", {"capacity_factor": 1.0, "expert_load_imbalance": 1.0,
                                     "rank_order": "tp-cp-ep-pp-dp"}),
                           ("search", {"capacity_factor": 1.0, "expert_load_imbalance": 1.0})):
        text = EXAMPLES[name]
        fields = yaml.safe_load(text)
        assert {key: fields[key] for key in defaults} == defaults, name
        for key in defaults:  # each with a comment
            assert next(line for line in text.splitlines() if line.startswith(f"{key}:")).count("#") == 1
    plan = PlanRun.from_dict(yaml.safe_load(EXAMPLES["plan"]))
    assert (plan.model.capacity_factor, plan.space.rank_order) == (1.0, RankOrder.TP_CP_EP_PP_DP)


def test_estimate_and_schedule_take_the_capacity_factor(moe: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One chip holds every expert (ep = 1): only a capacity factor above 1 pads the experts."""
    def flop(extra: list[str]) -> float:
        doc = _json(["estimate", "--model", moe, "--hardware", "a100-80gb", "--seq-len", "64", *extra,
                     "--json"], capsys)
        return float(doc["total"]["fwd"]["flop"])
    base = flop([])
    assert flop(["--capacity-factor", "2"]) > base
    assert flop(["--expert-load-imbalance", "2"]) == base  # ignored at ep = 1
    busy = {}
    for factor in (1.0, 2.0):
        problem = api.layer_problem(moe, "a100-80gb", "block", "fwd", seq_len=64, capacity_factor=factor)
        busy[factor] = sum(op.single_s for op in problem.ops)
    assert busy[2.0] > busy[1.0]
    code, _, err = run(["schedule", "--model", moe, "--hardware", "a100-80gb", "--seq-len", "64",
                        "--backend", "list", "--capacity-factor", "2"], capsys)
    assert code == 0, err


def test_a_layer_graph_takes_the_default_order_only(capsys: pytest.CaptureFixture[str]) -> None:
    graph = str(Path(__file__).resolve().parents[1] / "examples" / "layer_graph.yaml")
    argv = ["plan", "--layer-graph", graph, "--hardware", "a100-80gb", "--devices", "8",
            "--global-batch", "8"]
    assert _refused([*argv, "--rank-order", "tp-cp-ep-dp-pp"], capsys).endswith(
        "--rank-order tp-cp-ep-dp-pp: layer-graph plans use the rank order tp-cp-ep-pp-dp")
    assert "--capacity-factor applies to --model" in _refused([*argv, "--capacity-factor", "1.25"], capsys)
    doc = _json([*argv, "--rank-order", "tp-cp-ep-pp-dp", "--json"], capsys)
    assert doc["plan"]["rank_order"] == "tp-cp-ep-pp-dp"
