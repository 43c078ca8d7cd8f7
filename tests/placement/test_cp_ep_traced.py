"""The plan engine against brute force on traced models (issue 14): a small Mixtral-architecture
MoE (expert parallelism) and a small GPT at a long sequence (context parallelism), their layer
costs from the real tracing and cost model, every (tp, cp, ep, pp, dp, micro-batch, recompute,
schedule, ZeRO stage, overlap) and every stage split enumerated."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from test_cp_ep_engine import check_against_brute_force

from archplace.front import app
from archplace.front.specs import ClusterSpec, HardwareSpec, ModelSpec
from archplace.placement import workflow
from archplace.placement.plan import CostKey, PipelineSchedule, RankOrder, Recompute
from archplace.placement.solver import plan_search

MOE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
       "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
       "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
       "tie_word_embeddings": False}
GPT = {"model_type": "gpt2", "n_layer": 3, "n_embd": 128, "n_head": 4, "n_positions": 2048,
       "vocab_size": 1024}
OPTIONS = dict(recomputes=(Recompute.NONE, Recompute.FULL),
               schedules=(PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED), chunks=(2,),
               zero_stages=(0, 1, 3), dp_overlap=(False, True))


def _fraction_preset(tmp_path: Path) -> Path:
    """h100-80gb without its measured kernel tables and 5.2 us kernel floor: every kernel of these
    toy models sits at the floor there, so the memory pressure, not the time, would no longer
    decide the degrees these tests name."""
    preset = Path(app.__file__).parents[1] / "hw" / "presets" / "h100-80gb.yaml"
    lines = preset.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  kernel_tables:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("  attention_fwd:"))
    path = tmp_path / "h100-fractions.yaml"
    path.write_text("\n".join(lines[:start] + lines[end:]) + "\n", encoding="utf-8")
    return path


def _costs(tmp_path: Path, config: dict[str, object], seq_len: int, keys: list[CostKey]):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    hardware = HardwareSpec(str(_fraction_preset(tmp_path)))
    prob = app.problem(ModelSpec(str(path), seq_len), hardware, ClusterSpec(8, 8))
    return prob, workflow.layer_costs_for(prob, keys)


SLOW = pytest.mark.slow  # 3-10 s each: the traced brute-force tests run in make test-slow (CI), the
# engine's brute-force tests of CP, EP and expert-TP on synthetic chains in make test


@pytest.mark.slow
@pytest.mark.parametrize(("hbm_fraction", "order", "degrees"), [
    (1.45e-4, RankOrder.TP_CP_EP_PP_DP, (2, 4)),  # 11.9 MiB: only cp 2 with ep 4 fits
    pytest.param(1e-4, RankOrder.TP_CP_EP_PP_DP, None, marks=SLOW),  # nothing fits
    # ep 4: NCCL's all-to-all inside a node pays one start-up whatever the peer count
    pytest.param(2e-4, RankOrder.TP_CP_EP_PP_DP, (1, 4), marks=SLOW),
    pytest.param(1.7e-4, RankOrder.TP_CP_EP_DP_PP, None, marks=SLOW),
    pytest.param(1.0, RankOrder.TP_CP_EP_DP_PP, (1, 1), marks=SLOW),
])
def test_moe_with_expert_parallelism_equals_brute_force(tmp_path: Path, hbm_fraction: float,
                                                        order: RankOrder,
                                                        degrees: tuple[int, int] | None) -> None:
    keys = [CostKey(1, b, False, cp, ep) for b in (1, 2) for cp in (1, 2) for ep in (1, 2, 4)]
    prob, costs = _costs(tmp_path, MOE, 64, keys)
    assert any(layer.expert_params for layer in costs[CostKey(1, 1, False, 1, 4)])
    assert any(layer.ep_comm_fwd_s > 0 for layer in costs[CostKey(1, 1, False, 1, 4)])
    setup = dataclasses.replace(prob.setup, hbm_bytes=prob.setup.hbm_bytes * hbm_fraction, rank_order=order)
    check_against_brute_force((costs, setup, OPTIONS, 3), note=lambda _: None)
    if degrees is not None:  # the memory pressure chosen makes the degrees shown necessary
        best = plan_search(costs, setup, top_k=1, **OPTIONS)[0].plan
        assert (best.cp, best.ep) == degrees


@pytest.mark.slow
@pytest.mark.parametrize(("hbm_fraction", "cp"), [
    (2e-4, 4),  # 16.4 MiB: the sequence must be split 4 ways
    pytest.param(1.0, 1, marks=SLOW),
])
def test_long_context_with_context_parallelism_equals_brute_force(tmp_path: Path, hbm_fraction: float,
                                                                  cp: int) -> None:
    keys = [CostKey(tp, 1, sp, cp) for tp in (1, 2) for sp in (False, True) for cp in (1, 2, 4)
            if tp > 1 or not sp]
    prob, costs = _costs(tmp_path, GPT, 2048, keys)
    assert sum(layer.activation_bytes for layer in costs[CostKey(1, 1, False, 4)]) < sum(
        layer.activation_bytes for layer in costs[CostKey(1, 1, False, 1)]) / 3
    setup = dataclasses.replace(prob.setup, hbm_bytes=prob.setup.hbm_bytes * hbm_fraction)
    check_against_brute_force((costs, setup, OPTIONS, 3), note=lambda _: None)
    assert plan_search(costs, setup, top_k=1, **OPTIONS)[0].plan.cp == cp


@pytest.mark.slow
@pytest.mark.parametrize(("hbm_fraction", "order", "degrees"), [
    (1.4e-4, RankOrder.TP_CP_EP_PP_DP, (2, 2, 2)),  # 11.5 MiB: only tp 2 with ep 2 and etp 2 fits
    pytest.param(2e-4, RankOrder.TP_CP_EP_PP_DP, (1, 2, 1), marks=SLOW),
    pytest.param(1.4e-4, RankOrder.TP_CP_EP_DP_PP, None, marks=SLOW),
    pytest.param(1.0, RankOrder.TP_CP_EP_DP_PP, None, marks=SLOW),
])
def test_moe_with_expert_tensor_parallelism_equals_brute_force(tmp_path: Path, hbm_fraction: float,
                                                               order: RankOrder,
                                                               degrees: tuple[int, int, int] | None) -> None:
    """tp 2 (with SP, Megatron-Core's rule for MoE), ep in {1, 2}, expert-TP in {1, tp}: the routed
    experts' parameters per rank halve with each of ep and etp, and the engine's optimum and
    top 3 equal the enumeration."""
    keys = [CostKey(tp, b, tp > 1, 1, ep, etp) for tp in (1, 2) for b in (1, 2) for ep in (1, 2)
            for etp in sorted({1, tp})]
    prob, costs = _costs(tmp_path, MOE, 64, keys)
    whole = sum(layer.expert_params for layer in costs[CostKey(1, 1, False)])
    assert sum(layer.expert_params for layer in costs[CostKey(2, 1, True, 1, 2, 2)]) * 4 == whole
    assert sum(layer.expert_params for layer in costs[CostKey(2, 1, True, 1, 1, 1)]) == whole
    setup = dataclasses.replace(prob.setup, hbm_bytes=prob.setup.hbm_bytes * hbm_fraction, rank_order=order)
    check_against_brute_force((costs, setup, OPTIONS, 3), note=lambda _: None)
    if degrees is not None:  # the memory pressure chosen makes the degrees shown necessary
        best = plan_search(costs, setup, top_k=1, **OPTIONS)[0].plan
        assert (best.tp, best.ep, best.etp) == degrees
