"""Expert-tensor parallelism (etp) as a plan dimension of the placement engine: the expert
groups folded into a stage's tp * cp * dp ranks (etp fastest, then ep, then expert-DP), the
routed experts' memory and reductions over the expert-data-parallel group, and the search
against the brute force over (tp, cp, ep, etp, pp, dp, micro-batch, recompute, ZeRO stage,
rank order)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cp_ep_engine import check_against_brute_force, training_problems

from archplace.base.errors import ConfigError, InfeasibleError
from archplace.hw.cluster import Cluster
from archplace.placement.layout import RankLayout, group_allreduce_cost
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan, plan_memory
from archplace.placement.plan import (
    CostKey,
    LayerCost,
    PipelineSchedule,
    Plan,
    RankOrder,
    Recompute,
    TrainingSetup,
)
from archplace.placement.solver import plan_search
from archplace.placement.timing import strided_allreduce_cost

INTRA = (1e-6, 1e11)
INTER = (1e-5, 1e9)


def cluster(devices=16, per_node=4) -> Cluster:
    return Cluster(devices=devices, devices_per_node=per_node,
                   intra_node_bandwidth_bytes_per_s=INTRA[1], inter_node_bandwidth_bytes_per_s=INTER[1],
                   intra_node_latency_s=INTRA[0], inter_node_latency_s=INTER[0])


def setup(devices=16, per_node=4, order=RankOrder.TP_CP_EP_PP_DP, **kw) -> TrainingSetup:
    base = dict(cluster=cluster(devices, per_node), global_batch=16, seq_len=4096, hbm_bytes=1e12,
                hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e15, rank_order=order)
    base.update(kw)
    return TrainingSetup(**base)


def moe_layer(name, params=1000, experts=600, **kw) -> LayerCost:
    base = dict(fwd_s=1.0, bwd_s=2.0, params=params, activation_bytes=0.0, input_bytes=1e4,
                boundary_bytes=1e6, working_bytes=0.0, fwd_flop=1e9, bwd_flop=2e9, expert_params=experts)
    base.update(kw)
    return LayerCost(name, **base)


# ---------------------------------------------------------------- layout

@pytest.mark.parametrize("order, expert_dp, pipeline", [
    (RankOrder.TP_CP_EP_DP_PP, [0, 4], 8),
    (RankOrder.TP_CP_EP_PP_DP, [0, 8], 4),
])
def test_expert_groups_fold_etp_fastest_then_ep_then_edp(order, expert_dp, pipeline):
    """tp=4, dp=2, pp=2, etp=2, ep=2: a stage's 8 ranks hold etp x ep x edp = 2 x 2 x 2 expert
    ranks; the expert-TP group is 2 consecutive stage ranks, the EP group every 2nd, the
    expert-DP group every 4th (which the rank order spreads as the DP replicas)."""
    layout = RankLayout(4, 1, 2, 2, 2, order, etp=2)
    assert layout.expert_dp == 2 and layout.dense_dp == 2
    assert layout.expert_tensor_offsets().tolist() == [0, 1]
    assert layout.expert_parallel_offsets().tolist() == [0, 2]
    assert layout.expert_dp_offsets().tolist() == expert_dp
    assert layout.pp_stride == pipeline
    c = cluster(16, 4)
    assert layout.expert_dp_cost(c) == group_allreduce_cost(c, layout.expert_dp_offsets())
    assert layout.expert_dp_cost(c) == strided_allreduce_cost(c, 2, expert_dp[1])


def test_etp_one_is_the_layout_of_before():
    for order in RankOrder:
        for tp, cp, ep, dp in ((1, 1, 2, 4), (2, 2, 4, 2), (1, 2, 2, 1)):
            old = RankLayout(tp, cp, ep, 2, dp, order)
            assert old == RankLayout(tp, cp, ep, 2, dp, order, etp=1)
            assert old.expert_dp == tp * cp * dp // ep
            assert old.expert_dp_offsets().tolist() == sorted(
                old.stage_ranks(ep * np.arange(old.expert_dp)).tolist())


def test_etp_times_ep_must_divide_the_stage_ranks():
    with pytest.raises(ConfigError, match=r"etp\*ep = 2\*4 = 8 must divide tp\*cp\*dp = 2\*1\*2 = 4"):
        RankLayout(2, 1, 4, 1, 2, etp=2)
    # folding: with etp = 1 the expert-parallel ranks may take TP ranks (Megatron-Core's rule)
    assert RankLayout(2, 1, 2, 1, 1).expert_dp == 1
    assert RankLayout(4, 1, 1, 1, 1, etp=4).expert_dp == 1
    layers = [moe_layer("l0")]
    with pytest.raises(ConfigError, match=r"etp\*ep = 4\*2 = 8 must divide tp\*cp\*dp = 2\*2\*1 = 4"):
        evaluate_plan(layers, setup(8), Plan(tp=2, cp=2, ep=2, etp=4, pp=1, dp=1, micro_batch=1,
                                             recompute=Recompute.NONE, stages=((0, 0),)))


# ---------------------------------------------------------------- memory and reductions

@pytest.mark.parametrize("zero_stage, expected", [
    (0, (2000.0, 4000.0, 12000.0, 0.0)),
    (1, (2000.0, 4000.0, 12 * 400 / 4 + 12 * 600 / 2, 0.0)),
    (2, (2000.0, 4 * 400 / 4 + 4 * 600 / 2, 12 * 400 / 4 + 12 * 600 / 2, 0.0)),
    (3, (2 * 400 / 4 + 2 * 600 / 2, 4 * 400 / 4 + 4 * 600 / 2, 12 * 400 / 4 + 12 * 600 / 2, 8000.0)),
])
def test_expert_state_shards_over_tp_cp_dp_over_etp_ep(zero_stage, expected):
    """tp=2, dp=4, etp=2, ep=2: the 400 dense parameters shard over dp = 4 ranks, this rank's 600
    expert parameters (its 1/(etp ep) share) over tp*dp/(etp*ep) = 2 ranks; Adam (12 B), fp32
    gradients, bf16 weights."""
    layer = moe_layer("moe")
    plan = Plan(tp=2, ep=2, etp=2, pp=1, dp=4, micro_batch=1, recompute=Recompute.NONE,
                stages=((0, 0),), zero_stage=zero_stage)
    (memory,) = plan_memory([layer], setup(8), plan)
    assert (memory.weights, memory.gradients, memory.optimizer, memory.gathered) == expected


@pytest.mark.parametrize("etp, edp_alpha_beta", [
    (2, (2 * INTER[0], 1 / INTER[1])),  # edp ranks [0, 4]: one ring across the two nodes
    (1, None),  # edp = 4 ranks [0, 2, 4, 6], two per node: hierarchical
])
def test_expert_gradients_reduce_over_the_expert_data_parallel_group(etp, edp_alpha_beta):
    """8 devices, 4 per node, tp=2, dp=4, ep=2, ZeRO-0 without overlap: the exposed DP traffic
    is the dense all-reduce plus the experts' all-reduce over the expert-DP group; the latter by
    hand (fp32 gradients: 4 B per parameter)."""
    s = setup(8, 4)
    plan = Plan(tp=2, ep=2, etp=etp, pp=1, dp=4, micro_batch=1, recompute=Recompute.NONE, stages=((0, 0),))
    with_experts = evaluate_plan([moe_layer("moe")], s, plan)
    dense_only = evaluate_plan([moe_layer("moe", params=400, experts=0)], s, plan)
    expert_part = with_experts.breakdown_s["dp_comm"] - dense_only.breakdown_s["dp_comm"]
    if edp_alpha_beta is None:
        alpha, beta = strided_allreduce_cost(s.cluster, 4, 2)
        assert expert_part == pytest.approx(alpha + beta * 4 * 600, rel=1e-12)
    else:
        alpha, per_byte = edp_alpha_beta
        assert expert_part == pytest.approx(alpha + per_byte * 4 * 600, rel=1e-12)
    total = 0.0
    for key in BREAKDOWN_KEYS:
        total += with_experts.breakdown_s[key]
    assert total == with_experts.iteration_time_s


# ---------------------------------------------------------------- the search

def chain(etp, ep=1, n=4, **kw):
    """Layers of 1e6 parameters, 90 % routed experts (this rank's share: / (ep etp))."""
    return [moe_layer(f"l{k}", params=100_000 + 900_000 // (ep * etp), experts=900_000 // (ep * etp), **kw)
            for k in range(n)]


def test_expert_tensor_parallelism_wins_when_experts_do_not_fit_whole():
    costs = {CostKey(2, 1, True, 1, 1, 1): chain(1), CostKey(2, 1, True, 1, 1, 2): chain(2)}
    s = setup(2, 2, global_batch=8, hbm_bytes=4 * 18 * 600_000.0)
    options = dict(recomputes=[Recompute.NONE], schedules=[PipelineSchedule.ONE_F_ONE_B], chunks=(2,),
                   zero_stages=(0,), dp_overlap=(False,))
    (best,) = plan_search(costs, s, **options)
    assert (best.plan.tp, best.plan.etp, best.plan.ep, best.plan.dp, best.plan.pp) == (2, 2, 1, 1, 1)
    assert best.plan.to_dict()["etp"] == 2 and Plan.from_dict(best.plan.to_dict()) == best.plan
    check_against_brute_force((costs, s, options, 3), note=lambda _: None)


def test_equal_chains_prefer_the_smaller_etp():
    dense = [moe_layer(f"l{k}", experts=0) for k in range(4)]  # etp changes nothing: a tie
    costs = {CostKey(2, 1, True, 1, 1, etp): dense for etp in (2, 1)}
    results = plan_search(costs, setup(2, 2, global_batch=8), recomputes=[Recompute.NONE],
                          schedules=[PipelineSchedule.ONE_F_ONE_B], zero_stages=(0,),
                          dp_overlap=(False,), top_k=2)
    assert [r.plan.etp for r in results] == [1, 2]
    assert results[0].iteration_time_s == results[1].iteration_time_s


def test_infeasible_reasons_name_etp():
    with pytest.raises(InfeasibleError, match=r"no \(tp, cp, ep, etp, pp, dp, micro-batch\) .* etp\*ep "
                                              r"must divide tp\*cp\*dp"):
        plan_search({CostKey(1, 1, False, 1, 1, 4): chain(4)}, setup(2, 2, global_batch=8))
    with pytest.raises(InfeasibleError, match=r"no plan fits .*\(tp=2, etp=2, micro_batch=1"):
        plan_search({CostKey(2, 1, True, 1, 1, 2): chain(2)}, setup(2, 2, global_batch=8, hbm_bytes=1e5),
                    recomputes=[Recompute.NONE])
    with pytest.raises(ConfigError, match="etp must be a positive integer"):  # a plain tuple is checked
        plan_search({(1, 1, False, 1, 1, 0): chain(1)}, setup(2, 2))


@st.composite
def etp_chains(draw, n: int, cp: int, ep: int, etp: int):
    out = []
    for k in range(n):
        fwd = draw(st.sampled_from([0.5, 1.0, 2.0]))
        bwd = draw(st.sampled_from([fwd, 2 * fwd]))
        total = draw(st.sampled_from([0, 1_000, 50_000, 1_000_000, 3_000_000]))
        routed = draw(st.sampled_from([0, total // 2, (total * 9) // 10]))
        experts = routed // (ep * etp)  # this rank's share
        act = draw(st.sampled_from([0.0, 1e5, 1e6, 2e7])) / cp
        out.append(LayerCost(
            f"l{k}", fwd_s=fwd, bwd_s=bwd, params=total - routed + experts,
            activation_bytes=act, input_bytes=act / 4, boundary_bytes=draw(st.sampled_from([1e3, 1e6])) / cp,
            working_bytes=draw(st.sampled_from([0.0, 1e5])), fwd_flop=1e9, bwd_flop=2e9,
            selective_activation_bytes=act / 2, selective_recompute_s=fwd / 4,
            tp_comm_fwd_s=draw(st.sampled_from([0.0, fwd / 5])),
            cp_comm_fwd_s=fwd / 5 if cp > 1 else 0.0,
            ep_comm_fwd_s=fwd / 5 if ep * etp > 1 and experts else 0.0,
            ep_comm_bwd_s=bwd / 5 if ep * etp > 1 and experts else 0.0,
            expert_params=experts))
    return out


@st.composite
def etp_problems(draw):
    n = draw(st.integers(1, 4))
    keys = draw(st.lists(st.builds(CostKey, st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                                   st.just(False), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
                                   st.sampled_from([1, 2, 4])),
                         min_size=1, max_size=3, unique=True))
    costs = {key: draw(etp_chains(n, key.cp, key.ep, key.etp)) for key in keys}
    return draw(training_problems(costs, keys))


@given(etp_problems())
def test_plan_search_with_etp_equals_brute_force(problem):
    check_against_brute_force(problem)


@pytest.mark.slow  # ~30 s
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(etp_problems())
def test_plan_search_with_etp_equals_brute_force_many(problem):
    check_against_brute_force(problem)
