"""evaluate_plan on 3- and 4-layer chains, against figures computed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from archplace.base.errors import ConfigError, InfeasibleError
from archplace.hw.cluster import Cluster
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, Optimizer, PipelineSchedule, Plan, Recompute, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.placement.timing import p2p_link

# 8 devices, 2 per node: intra-node 1e11 B/s and 1 us, inter-node 1e10 B/s and 10 us.
CLUSTER = Cluster(devices=8, devices_per_node=2, intra_node_bandwidth_bytes_per_s=1e11,
                  inter_node_bandwidth_bytes_per_s=1e10, intra_node_latency_s=1e-6,
                  inter_node_latency_s=1e-5)
SETUP = TrainingSetup(cluster=CLUSTER, global_batch=8, seq_len=100, hbm_bytes=1e12,
                      hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e12)
LAYERS = (
    LayerCost("l0", fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=100.0, input_bytes=10.0,
              boundary_bytes=1e6, working_bytes=50.0, fwd_flop=1e12, bwd_flop=2e12),
    LayerCost("l1", fwd_s=2.0, bwd_s=4.0, params=2000, activation_bytes=200.0, input_bytes=20.0,
              boundary_bytes=2e6, working_bytes=70.0, fwd_flop=2e12, bwd_flop=4e12),
    LayerCost("l2", fwd_s=0.5, bwd_s=1.0, params=500, activation_bytes=50.0, input_bytes=5.0,
              boundary_bytes=1.0, working_bytes=500.0, fwd_flop=0.5e12, bwd_flop=1e12),
)
REL = 1e-12


def check_breakdown_sums(result):
    assert list(result.breakdown_s) == list(BREAKDOWN_KEYS)
    total = 0.0
    for key in BREAKDOWN_KEYS:
        total += result.breakdown_s[key]
    assert total == result.iteration_time_s


def test_tp1_pp2_dp2_no_recompute():
    plan = Plan(tp=1, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE,
                stages=((0, 1), (2, 2)))
    r = evaluate_plan(LAYERS, SETUP, plan)
    # m = 8 / (2 * 2) = 2. Stage 0: compute 3 + 6 = 9, p2p on the intra-node link (span
    # tp + 1 = 2): 2 * (1e-6 + 2e6 / 1e11) = 4.2e-5. Stage 1: 1.5. Bottleneck: stage 0.
    # DP group: 2 ranks at stride tp*pp = 2 -> span 3 > 2: inter-node.
    # all-reduce of 4 B * 3000 params: 2*(1/2)*12000/1e10 + 2*1*1e-5 = 2.12e-5.
    # optimizer: 30 * 3000 / 1e12 = 9e-8.
    b = r.breakdown_s
    assert b["compute"] == pytest.approx(18.0, rel=REL)
    assert b["bubble"] == pytest.approx(9.000042, rel=REL)
    assert b["recompute"] == 0.0
    assert b["pp_comm"] == pytest.approx(8.4e-5, rel=REL)
    assert b["dp_comm"] == pytest.approx(2.12e-5, rel=REL)
    assert b["optimizer"] == pytest.approx(9e-8, rel=REL)
    assert r.iteration_time_s == pytest.approx(27.00014729, rel=REL)
    check_breakdown_sums(r)
    assert r.throughput_samples_per_s == pytest.approx(8 / 27.00014729, rel=REL)
    assert r.tokens_per_s == pytest.approx(800 / 27.00014729, rel=REL)
    # model FLOP = (8 / 2) micro-batches * 10.5e12 * tp 1; 4 devices at 1e12 FLOP/s
    assert r.mfu == pytest.approx(4.2e13 / (27.00014729 * 4 * 1e12), rel=REL)
    # stage 0 holds min(2 - 0, 2) = 2 micro-batches, stage 1 holds 1
    m0, m1 = r.memory
    assert (m0.weights, m0.gradients, m0.optimizer, m0.activations, m0.working) == (
        6000.0, 12000.0, 36000.0, 600.0, 70.0)
    assert m0.total == 54670.0
    assert (m1.weights, m1.gradients, m1.optimizer, m1.activations, m1.working) == (
        1000.0, 2000.0, 6000.0, 50.0, 500.0)
    assert m1.total == 9550.0
    d = r.to_dict()
    assert d["plan"]["stages"] == [[0, 1], [2, 2]]
    assert [s["total"] for s in d["memory_per_device_bytes"]] == [54670.0, 9550.0]
    # per stage and micro-batch: stage 0 computes 9 s and sends 4.2e-5 s; stage 1 computes 1.5 s
    # and receives the same boundary (activation in, gradient out): 4.2e-5 s too
    s0, s1 = d["stage_times_s"]
    assert (s0["segment"], s0["compute"], s0["recompute"], s0["backward"]) == (0, 9.0, 0.0, 6.0)
    assert s0["p2p"] == pytest.approx(4.2e-5, rel=REL) and s0["total"] == pytest.approx(9.000042, rel=REL)
    assert (s1["segment"], s1["compute"]) == (1, 1.5)
    assert s1["p2p"] == pytest.approx(4.2e-5, rel=REL) and s1["total"] == pytest.approx(1.500042, rel=REL)
    assert PlanResult.from_dict(d) == r


def test_last_stage_pays_for_receiving_its_input():
    # Two stages, the last (l1 + l2: 6 + 1.5 = 7.5 s) the bottleneck; the boundary after l0
    # carries 1e6 B on the intra-node link (alpha 1e-6 s, beta 1e11 B/s). The last stage
    # receives the activation and sends its gradient back: 2 (1e-6 + 1e6 / 1e11) = 2.2e-5 s
    # per micro-batch, paid in each of the m = 2 slots and in the p - 1 = 1 bubble slot.
    plan = Plan(tp=1, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE, stages=((0, 0), (1, 2)))
    r = evaluate_plan(LAYERS, SETUP, plan)
    s0, s1 = r.stage_times
    assert s0.p2p_s == pytest.approx(2.2e-5, rel=REL) and s1.p2p_s == pytest.approx(2.2e-5, rel=REL)
    assert s1.total_s == pytest.approx(7.500022, rel=REL)
    assert r.breakdown_s["pp_comm"] == pytest.approx(2 * 2.2e-5, rel=REL)
    assert r.breakdown_s["bubble"] == pytest.approx(7.500022, rel=REL)
    check_breakdown_sums(r)


def test_tp2_uses_inter_node_links_and_scales_mfu():
    plan = Plan(tp=2, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE,
                stages=((0, 1), (2, 2)))
    r = evaluate_plan(LAYERS, SETUP, plan)
    # p2p spans tp + 1 = 3 > 2 ranks: inter-node, with the scatter/gather of Narayanan et al.
    # 2021, section 4.1: each TP rank sends 1e6 B at 1e10 B/s, then a 2-rank all-gather on the
    # intra-node link (1e-6 s + 1e6 B / 1e11 B/s): 2 * (1e-5 + 1e-4 + 1e-6 + 1e-5) = 2.42e-4
    # per micro-batch. DP: 2 ranks at stride 4 span 5: inter-node, 2.12e-5 as before.
    b = r.breakdown_s
    assert b["bubble"] == pytest.approx(9.000242, rel=REL)
    assert b["pp_comm"] == pytest.approx(4.84e-4, rel=REL)
    assert b["dp_comm"] == pytest.approx(2.12e-5, rel=REL)
    assert r.iteration_time_s == pytest.approx(27.00074729, rel=REL)
    check_breakdown_sums(r)
    assert r.mfu == pytest.approx(4 * 10.5e12 * 2 / (27.00074729 * 8 * 1e12), rel=REL)
    # with sequence parallelism the boundary is already sharded: no scatter/gather
    sp = evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, sp=True))
    assert sp.breakdown_s["pp_comm"] == pytest.approx(8.4e-4, rel=REL)


def test_tp1_pp3_dp1_full_recompute():
    plan = Plan(tp=1, pp=3, dp=1, micro_batch=1, recompute="full",
                stages=((0, 0), (1, 1), (2, 2)))
    assert plan.recompute is Recompute.FULL
    r = evaluate_plan(LAYERS, SETUP, plan)
    # m = 8. T0 = 3 + 1 + 2.2e-5 (sends l0's output), T1 = 6 + 2 + (2.2e-5 + 4.2e-5) (receives
    # l0's, sends l1's output), T2 = 1.5 + 0.5 + 4.2e-5 (receives l1's). Bottleneck: stage 1.
    b = r.breakdown_s
    assert b["compute"] == pytest.approx(48.0, rel=REL)
    assert b["recompute"] == pytest.approx(16.0, rel=REL)
    assert b["pp_comm"] == pytest.approx(8 * 6.4e-5, rel=REL)
    assert b["bubble"] == pytest.approx(16.000128, rel=REL)
    assert b["dp_comm"] == 0.0
    assert b["optimizer"] == pytest.approx(6e-8, rel=REL)
    assert r.iteration_time_s == pytest.approx(80.00064006, rel=REL)
    check_breakdown_sums(r)
    assert r.mfu == pytest.approx(8 * 10.5e12 / (80.00064006 * 3 * 1e12), rel=REL)
    # in flight 3, 2, 1; full recompute keeps inputs plus the layer's own activations
    assert [m.activations for m in r.memory] == [3 * 10.0 + 100.0, 2 * 20.0 + 200.0,
                                                 1 * 5.0 + 50.0]
    assert [m.total for m in r.memory] == [18000.0 + 130.0 + 50.0, 36000.0 + 240.0 + 70.0,
                                           9000.0 + 55.0 + 500.0]


def test_plan_that_does_not_fit_is_rejected_with_numbers():
    setup = dataclasses.replace(SETUP, hbm_bytes=50_000.0)
    plan = Plan(tp=1, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE,
                stages=((0, 1), (2, 2)))
    with pytest.raises(InfeasibleError, match=r"^stage 0 needs 53\.4 KiB > 48\.8 KiB HBM"):
        evaluate_plan(LAYERS, setup, plan)
    # the same layers split differently fit
    ok = Plan(tp=1, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE,
              stages=((0, 0), (1, 2)))
    assert evaluate_plan(LAYERS, setup, ok).memory[1].total <= 50_000.0


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 0), (1, 1))), "cover layers 0..1"),
    (dict(tp=2, pp=3, dp=2, micro_batch=1, stages=((0, 0), (1, 1), (2, 2))), "exceeds"),
    (dict(tp=1, pp=1, dp=3, micro_batch=1, stages=((0, 2),)), "does not divide"),
    (dict(tp=1, pp=1, dp=1, micro_batch=3, stages=((0, 2),)), "does not divide"),
])
def test_invalid_plans_are_config_errors(kwargs, message):
    plan = Plan(recompute=Recompute.NONE, **kwargs)
    with pytest.raises(ConfigError, match=message):
        evaluate_plan(LAYERS, SETUP, plan)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(tp=0, pp=1, dp=1, micro_batch=1, stages=((0, 2),)), "plan.tp must be a whole number from 1"),
    (dict(tp=1, pp=1, dp=-1, micro_batch=1, stages=((0, 2),)), "plan.dp must be a whole number from 1"),
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 2),)),
     "plan.stages must give pp \\* chunks = 2 layer ranges, got 1"),
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 0), (2, 2))), "contiguous"),
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((1, 1), (2, 2))), "contiguous"),
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 1), (2, 1))), "empty"),
])
def test_malformed_plans_are_rejected_when_built(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Plan(recompute=Recompute.NONE, **kwargs)


def test_unknown_recompute_and_bad_layer_are_rejected():
    with pytest.raises(ConfigError, match="recompute"):
        Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute="sometimes", stages=((0, 2),))
    with pytest.raises(ConfigError, match="fwd_s"):
        dataclasses.replace(LAYERS[0], fwd_s=-1.0)
    with pytest.raises(ConfigError, match="params"):
        dataclasses.replace(LAYERS[0], params=1.5)
    with pytest.raises(ConfigError, match="working_bytes"):
        dataclasses.replace(LAYERS[0], working_bytes=float("nan"))


def test_numpy_scalars_are_accepted_as_layer_figures():
    layer = dataclasses.replace(LAYERS[0], fwd_s=np.float32(1.5), params=np.int64(7))
    assert layer.fwd_s == 1.5 and type(layer.fwd_s) is float
    assert layer.params == 7 and type(layer.params) is int


# ---------------------------------------------------------------- schedules and options

# A 4-layer chain with selective-recompute and TP-communication figures.
LAYERS4 = (
    LayerCost("a", fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=100.0, input_bytes=10.0,
              boundary_bytes=1e6, working_bytes=50.0, fwd_flop=1e12, bwd_flop=2e12,
              selective_activation_bytes=40.0, selective_recompute_s=0.25, tp_comm_fwd_s=0.1,
              tp_comm_bwd_s=0.2),
    LayerCost("b", fwd_s=2.0, bwd_s=4.0, params=2000, activation_bytes=200.0, input_bytes=20.0,
              boundary_bytes=2e6, working_bytes=70.0, fwd_flop=2e12, bwd_flop=4e12,
              selective_activation_bytes=80.0, selective_recompute_s=0.5, tp_comm_fwd_s=0.2,
              tp_comm_bwd_s=0.4),
    LayerCost("c", fwd_s=0.5, bwd_s=1.0, params=500, activation_bytes=50.0, input_bytes=5.0,
              boundary_bytes=3e6, working_bytes=500.0, fwd_flop=0.5e12, bwd_flop=1e12),
    LayerCost("d", fwd_s=1.0, bwd_s=1.0, params=4000, activation_bytes=300.0, input_bytes=30.0,
              boundary_bytes=1.0, working_bytes=60.0, fwd_flop=1e12, bwd_flop=1e12,
              selective_activation_bytes=100.0, selective_recompute_s=0.1, tp_comm_fwd_s=0.1,
              tp_comm_bwd_s=0.1),
)


def test_interleaved_sends_overlapped_with_the_computation():
    """``pp_comm_overlap``: each chunk's sends (at most 1.04e-4 s) hide under its compute, so
    pp_comm is 0 and device 1 (chunks b and d) paces the pipeline at (6 + 2) / 2 = 4 s."""
    plan = Plan(tp=1, pp=2, dp=2, micro_batch=1, recompute=Recompute.NONE,
                stages=((0, 0), (1, 1), (2, 2), (3, 3)), schedule=PipelineSchedule.INTERLEAVED,
                chunks=2)
    r = evaluate_plan(LAYERS4, dataclasses.replace(SETUP, pp_comm_overlap=True), plan)
    assert r.breakdown_s["pp_comm"] == 0.0 and all(t.p2p_s == 0.0 for t in r.stage_times)
    assert r.breakdown_s["bubble"] == pytest.approx(4.0, rel=REL)
    assert r.iteration_time_s == pytest.approx(9 * 4.0 + 2.24e-5 + 1.8e-7, rel=REL)
    check_breakdown_sums(r)
    one_f_one_b = Plan(tp=1, pp=2, dp=2, micro_batch=1, recompute=Recompute.NONE, stages=((0, 1), (2, 3)))
    blocking = evaluate_plan(LAYERS4, SETUP, one_f_one_b)  # 1F1B keeps its sends blocking
    assert evaluate_plan(LAYERS4, dataclasses.replace(SETUP, pp_comm_overlap=True), one_f_one_b) == blocking


def test_gpipe_holds_every_micro_batch():
    plan = Plan(tp=1, pp=2, dp=1, micro_batch=2, recompute=Recompute.NONE, stages=((0, 1), (2, 2)),
                schedule=PipelineSchedule.GPIPE)
    r = evaluate_plan(LAYERS, SETUP, plan)
    # m = 8 / 2 = 4. T0 = 9 + 2 * (1e-6 + 2e6 / 1e11) = 9.000042, T1 = 1.5: (4 + 1) * T0.
    # dp = 1: no all-reduce; Adam step of stage 0's 3000 parameters: 30 * 3000 / 1e12.
    assert r.breakdown_s["compute"] == pytest.approx(36.0, rel=REL)
    assert r.breakdown_s["bubble"] == pytest.approx(9.000042, rel=REL)
    assert r.breakdown_s["dp_comm"] == 0.0
    assert r.iteration_time_s == pytest.approx(45.00021 + 9e-8, rel=REL)
    check_breakdown_sums(r)
    # GPipe: both stages hold all 4 micro-batches (1F1B would hold 2 and 1)
    assert [m.activations for m in r.memory] == [4 * 300.0, 4 * 50.0]
    assert [m.total for m in r.memory] == [54000.0 + 1200.0 + 70.0, 9000.0 + 200.0 + 500.0]
    one_f_one_b = evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, schedule="1f1b"))
    assert one_f_one_b.iteration_time_s == r.iteration_time_s
    assert [m.activations for m in one_f_one_b.memory] == [2 * 300.0, 1 * 50.0]


def test_interleaved_two_chunks_per_device():
    plan = Plan(tp=1, pp=2, dp=2, micro_batch=1, recompute=Recompute.NONE,
                stages=((0, 0), (1, 1), (2, 2), (3, 3)), schedule=PipelineSchedule.INTERLEAVED,
                chunks=2)
    assert plan.to_dict()["stage_device"] == [0, 1, 0, 1]
    r = evaluate_plan(LAYERS4, SETUP, plan)
    # m = 8 / 2 = 4 micro-batches, v m = 8 chunk slots, K = v m + p - 1 = 9.
    # Chunk times (p2p on the intra-node link, span 2; every chunk pays its input and its output
    # boundary): a 3 + 2.2e-5, b 6 + (2.2e-5 + 4.2e-5), c 1.5 + (4.2e-5 + 6.2e-5), d 2 + 6.2e-5.
    # A device's pace is the mean of its chunks: device 0 (a, c) 2.250063, device 1 (b, d)
    # 4.000063, the bottleneck, whose mean figures are charged per chunk slot: compute
    # (6 + 2) / 2 = 4 of which TP (0.6 + 0.2) / 2 = 0.4, p2p (6.4e-5 + 6.2e-5) / 2 = 6.3e-5.
    b = r.breakdown_s
    assert b["compute"] == pytest.approx(8 * (4.0 - 0.4), rel=REL)
    assert b["tp_comm"] == pytest.approx(8 * 0.4, rel=REL)
    assert b["recompute"] == 0.0
    assert b["pp_comm"] == pytest.approx(8 * 6.3e-5, rel=REL)
    assert b["bubble"] == pytest.approx(4.000063, rel=REL)
    # a device's parameters are its chunks' sum: device 1's 2000 + 4000 decide the tail. The DP
    # group (2 ranks at stride 2, span 3) is inter-node: 2 * 1/2 * 4 * 6000 / 1e10 + 2 * 1e-5.
    assert b["dp_comm"] == pytest.approx(2.24e-5, rel=REL)
    assert b["optimizer"] == pytest.approx(30 * 6000 / 1e12, rel=REL)
    assert r.iteration_time_s == pytest.approx(9 * 4.000063 + 2.24e-5 + 1.8e-7, rel=REL)
    check_breakdown_sums(r)
    assert r.mfu == pytest.approx(8 * 12.5e12 / (r.iteration_time_s * 4 * 1e12), rel=REL)
    # in flight (chunk-micro-batches of its chunks, Megatron's order): device 0 (chunks a, c)
    # peaks at 3 of a and 2 of c, or 4 of a and 1 of c: max(3 * 100 + 2 * 50, 4 * 100 + 50) =
    # 450 B; device 1 (chunks b, d): max(2 * 200 + 1 * 300, 3 * 200) = 700 B
    # (test_memory.test_interleaved_chunk_counts_follow_megatrons_order)
    d0, d1 = r.memory
    assert (d0.weights, d0.gradients, d0.optimizer, d0.activations, d0.working) == (
        3000.0, 6000.0, 18000.0, 450.0, 500.0)
    assert (d1.weights, d1.gradients, d1.optimizer, d1.activations, d1.working) == (
        12000.0, 24000.0, 72000.0, 700.0, 70.0)
    assert d1.total == 108770.0
    setup = dataclasses.replace(SETUP, hbm_bytes=108_000.0)
    with pytest.raises(InfeasibleError, match=r"^device 1 needs 106\.2 KiB > 105\.5 KiB HBM with "
                                              r"zero_stage=0 \(.*\); zero_stage=1 would need 71\.1 KiB, "
                                              r"zero_stage=2 would need"):
        evaluate_plan(LAYERS4, setup, plan)


def test_interleaved_runs_any_micro_batch_count_from_pp():
    """Megatron-Core runs the interleaved schedule for any m >= pp (timing.micro_batch_group_size):
    m = 5 on pp = 2 runs in groups of N = 5 (5 % 2 = 1 < pp, 5 % 3 = 2 >= pp: N = 3 is the
    smallest valid), with the same (v m + p - 1) pace; m = 1 < pp is refused; with padding, m = 1
    is raised to pp."""
    plan = Plan(tp=1, pp=2, dp=1, micro_batch=1, recompute=Recompute.NONE,
                stages=((0, 0), (1, 1), (2, 2), (3, 3)), schedule="interleaved", chunks=2)
    setup = dataclasses.replace(SETUP, global_batch=6)
    six = evaluate_plan(LAYERS4, setup, plan)
    assert six.plan.chunks == 2  # m = 6
    five = evaluate_plan(LAYERS4, dataclasses.replace(SETUP, global_batch=5), plan)
    slots = five.breakdown_s["compute"] + five.breakdown_s["tp_comm"] + five.breakdown_s["pp_comm"]
    assert five.breakdown_s["bubble"] * (2 * 5) == pytest.approx(slots, rel=1e-6)  # (p - 1) of v m slots
    with pytest.raises(ConfigError, match="at least pp=2 micro-batches, got 1"):
        evaluate_plan(LAYERS4, dataclasses.replace(SETUP, global_batch=1), plan)
    padded = dataclasses.replace(SETUP, global_batch=1, dp_must_divide_batch=False)
    r = evaluate_plan(LAYERS4, padded, plan)  # m = 1 raised to 2
    assert r.breakdown_s["bubble"] * (2 * 2) == pytest.approx(r.breakdown_s["compute"]
                                                              + r.breakdown_s["tp_comm"]
                                                              + r.breakdown_s["pp_comm"], rel=1e-6)


def test_wrap_around_link_of_interleaving():
    # 4 devices per pipeline, tp 1: neighbours span 2 ranks, the last device back to the first 4
    cluster = Cluster(devices=8, devices_per_node=3, intra_node_bandwidth_bytes_per_s=1e11,
                      inter_node_bandwidth_bytes_per_s=1e10, intra_node_latency_s=1e-6,
                      inter_node_latency_s=1e-5)
    intra, inter = (1e-6, 1e11), (1e-5, 1e10)
    assert [p2p_link(cluster, tp=1, pp=4, segment=c, chunks=2) for c in range(8)] == [
        intra, intra, intra, inter, intra, intra, intra, inter]
    assert p2p_link(cluster, tp=1, pp=4, segment=3, chunks=1) == intra


def test_selective_recompute_keeps_the_selective_bytes():
    plan = Plan(tp=1, pp=2, dp=1, micro_batch=1, recompute="selective", stages=((0, 1), (2, 3)))
    r = evaluate_plan(LAYERS4, SETUP, plan)
    # m = 8. T0 = 9 + (0.25 + 0.5) + 4.2e-5, T1 = 3.5 + 0.1: K = 9.
    b = r.breakdown_s
    assert b["compute"] == pytest.approx(8 * (9.0 - 0.9), rel=REL)
    assert b["tp_comm"] == pytest.approx(8 * 0.9, rel=REL)
    assert b["recompute"] == pytest.approx(8 * 0.75, rel=REL)
    assert b["bubble"] == pytest.approx(9.750042, rel=REL)
    assert b["optimizer"] == pytest.approx(30 * 4500 / 1e12, rel=REL)
    assert r.iteration_time_s == pytest.approx(9 * 9.750042 + 1.35e-7, rel=REL)
    check_breakdown_sums(r)
    # stage 0 keeps 2 micro-batches of 40 + 80 bytes; stage 1 one of 50 (c has no selective
    # figure: its full activations) + 100
    assert [m.activations for m in r.memory] == [240.0, 150.0]


def test_zero_sgd_and_overlap():
    cluster = Cluster(devices=8, devices_per_node=2, intra_node_bandwidth_bytes_per_s=1e11,
                      inter_node_bandwidth_bytes_per_s=1e3, intra_node_latency_s=1e-6,
                      inter_node_latency_s=1e-5)
    setup = dataclasses.replace(SETUP, cluster=cluster, optimizer=Optimizer.SGD)
    plan = Plan(tp=1, pp=1, dp=4, micro_batch=2, recompute=Recompute.NONE, stages=((0, 2),), optimizer="sgd",
                zero_stage=1)
    r = evaluate_plan(LAYERS, setup, plan)
    # m = 1, one stage: T = 10.5, K = 1. DP group of 4 ranks, 2 in each of 2 nodes: hierarchical
    # all-reduce of b bytes: inside the node 2 * 1/2 * b / 1e11 + 2 * 1e-6, across the nodes
    # each rank's half on its own port 2 * 1/2 * (b / 2) / 1e3 + 2 * 1e-5. ZeRO-1 reduce-scatters
    # the 4 * 3500 fp32 gradient bytes and all-gathers the 2 * 3500 bf16 weight bytes, each half
    # of an all-reduce: (2.2e-5 + 14000 * (1e-11 + 5e-4)) / 2 + (2.2e-5 + 7000 * (...)) / 2.
    ar = 1.4e-7 + 2e-6 + 7.0 + 2e-5  # the all-reduce of the gradients (stage 0)
    zero1 = 2.2e-5 + 10500 * (1e-11 + 5e-4)
    assert r.breakdown_s["dp_comm"] == pytest.approx(zero1, rel=REL)
    assert r.comm_s["dp"] == {"total": r.breakdown_s["dp_comm"], "exposed": r.breakdown_s["dp_comm"],
                              "hidden": 0.0, "slowed": 0.0}
    # SGD step (22 B / param) on 1/4 of the parameters
    assert r.breakdown_s["optimizer"] == pytest.approx(22 * 3500 / 4 / 1e12, rel=REL)
    (mem,) = r.memory
    assert (mem.weights, mem.gradients, mem.optimizer) == (7000.0, 14000.0, 8 * 3500 / 4)
    # Adam with bf16 moments: the same 8 B of state per parameter and a 4 + 2 x 8 + 2 = 22 B step,
    # the same time as SGD's, and 4 B less state than Adam's 12
    bf16 = evaluate_plan(LAYERS, dataclasses.replace(setup, optimizer=Optimizer.ADAM_BF16),
                         dataclasses.replace(plan, optimizer="adam-bf16"))
    assert bf16.breakdown_s["optimizer"] == r.breakdown_s["optimizer"]
    assert bf16.memory[0].optimizer == mem.optimizer
    adam = evaluate_plan(LAYERS, dataclasses.replace(setup, optimizer=Optimizer.ADAM),
                         dataclasses.replace(plan, optimizer="adam"))
    assert adam.memory[0].optimizer - bf16.memory[0].optimizer == 4 * 3500 / 4
    assert adam.breakdown_s["optimizer"] == pytest.approx(30 * 3500 / 4 / 1e12, rel=REL)
    overlapped = evaluate_plan(LAYERS, setup, dataclasses.replace(plan, dp_overlap=True))
    # the 14000 gradient bytes fill one bucket (Megatron-LM: 40M elements), ready only at the
    # end of the backward pass: nothing hides
    assert overlapped.breakdown_s["dp_comm"] == pytest.approx(zero1, rel=REL)
    check_breakdown_sums(overlapped)
    plain = evaluate_plan(LAYERS, setup, dataclasses.replace(plan, zero_stage=0))
    assert plain.memory[0].optimizer == 8 * 3500
    assert plain.breakdown_s["dp_comm"] == pytest.approx(ar, rel=REL)


def test_padded_batch_counts_useful_samples_only():
    setup = dataclasses.replace(SETUP, global_batch=7, dp_must_divide_batch=False)
    plan = Plan(tp=1, pp=1, dp=2, micro_batch=2, recompute=Recompute.NONE, stages=((0, 2),))
    r = evaluate_plan(LAYERS, setup, plan)
    # m = ceil(7 / 4) = 2 micro-batches of 2 per replica: 8 samples run, 7 count
    assert r.breakdown_s["compute"] == pytest.approx(2 * 10.5, rel=REL)
    assert r.throughput_samples_per_s == pytest.approx(7 / r.iteration_time_s, rel=REL)
    assert r.mfu == pytest.approx(7 / 2 * 10.5e12 / (r.iteration_time_s * 2 * 1e12), rel=REL)
    with pytest.raises(ConfigError, match="does not divide the global batch 7"):
        evaluate_plan(LAYERS, dataclasses.replace(setup, dp_must_divide_batch=True), plan)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(schedule="interleaved", chunks=1), "needs plan.chunks >= 2"),
    (dict(schedule="1f1b", chunks=2), "needs plan.schedule interleaved"),
    (dict(schedule="zigzag"), "plan.schedule: unknown schedule 'zigzag'"),
    (dict(zero_stage=True), "zero_stage must be 0, 1, 2 or 3"),
    (dict(zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
])
def test_schedule_options_are_checked(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Plan(tp=1, pp=2, dp=1, micro_batch=1, recompute="none", stages=((0, 0), (1, 1)), **kwargs)


def test_layer_cost_checks_tp_share():
    with pytest.raises(ConfigError, match="communication 2.0 s exceeds fwd_s"):
        dataclasses.replace(LAYERS[0], tp_comm_fwd_s=2.0)
    half = LAYERS[0].bwd_s * 0.6
    with pytest.raises(ConfigError, match="exceeds bwd_s"):  # the sum of the three kinds counts
        dataclasses.replace(LAYERS[0], cp_comm_bwd_s=half, ep_comm_bwd_s=half)
    assert dataclasses.replace(LAYERS[0], cp_comm_bwd_s=half).cp_comm_bwd_s == half
    with pytest.raises(ConfigError, match="expert_params = .* exceeds params"):
        dataclasses.replace(LAYERS[0], expert_params=LAYERS[0].params + 1)
    with pytest.raises(ConfigError, match="selective_activation_bytes"):
        dataclasses.replace(LAYERS[0], selective_activation_bytes=-1.0)


def test_dp_allreduce_is_hierarchical_when_a_node_holds_several_replicas():
    from archplace.placement.timing import dp_allreduce_cost

    # DGX A100-like: 8 devices per node, NVLink 3e11 B/s and 3 us, one 2.5e10 B/s port per device.
    dgx = Cluster(devices=32, devices_per_node=8, intra_node_bandwidth_bytes_per_s=3e11,
                  inter_node_bandwidth_bytes_per_s=2.5e10, intra_node_latency_s=3e-6,
                  inter_node_latency_s=6e-6)
    # tp = pp = 1, dp = 32: 8 replicas in each of 4 nodes
    const, per_byte = dp_allreduce_cost(dgx, tp=1, pp=1, dp=32)
    assert const == pytest.approx(2 * 7 * 3e-6 + 2 * 3 * 6e-6, rel=REL)
    assert per_byte == pytest.approx(2 * 7 / 8 / 3e11 + 2 * 3 / 4 / (8 * 2.5e10), rel=REL)
    # tp = 8: one replica per node, the flat ring on the inter-node link
    assert dp_allreduce_cost(dgx, tp=8, pp=1, dp=4) == (2 * 3 * 6e-6, 2 * 3 / 4 / 2.5e10)
    # the whole group inside one node: the flat ring on NVLink
    assert dp_allreduce_cost(dgx, tp=2, pp=1, dp=4) == (2 * 3 * 3e-6, 2 * 3 / 4 / 3e11)
    assert dp_allreduce_cost(dgx, tp=2, pp=1, dp=1) == (0.0, 0.0)


def test_scatter_gather_p2p_link():
    # tp = 2 across nodes: 1e-5 + 1e-6 start-up, 1 / (1 / (2 * 1e10) + 1 / (2 * 1e11)) B/s
    alpha, beta = p2p_link(CLUSTER, tp=2, pp=2, segment=0, scatter_gather=True)
    assert alpha == pytest.approx(1.1e-5, rel=REL)
    assert beta == pytest.approx(1 / 5.5e-11, rel=REL)
    assert p2p_link(CLUSTER, tp=1, pp=2, segment=0, scatter_gather=True) == p2p_link(
        CLUSTER, tp=1, pp=2, segment=0)
