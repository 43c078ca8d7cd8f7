"""evaluate_plan on a 3-layer chain, against figures computed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from archplace.errors import ConfigError, InfeasibleError
from archplace.hardware.cluster import Cluster
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, Plan, Recompute, TrainingSetup

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


def test_tp2_uses_inter_node_links_and_scales_mfu():
    plan = Plan(tp=2, pp=2, dp=2, micro_batch=2, recompute=Recompute.NONE,
                stages=((0, 1), (2, 2)))
    r = evaluate_plan(LAYERS, SETUP, plan)
    # p2p spans tp + 1 = 3 > 2 ranks: 2 * (1e-5 + 2e6 / 1e10) = 4.2e-4 per micro-batch.
    # DP: 2 ranks at stride 4 span 5: inter-node, 2.12e-5 as before.
    b = r.breakdown_s
    assert b["bubble"] == pytest.approx(9.00042, rel=REL)
    assert b["pp_comm"] == pytest.approx(8.4e-4, rel=REL)
    assert b["dp_comm"] == pytest.approx(2.12e-5, rel=REL)
    assert r.iteration_time_s == pytest.approx(27.00128129, rel=REL)
    check_breakdown_sums(r)
    assert r.mfu == pytest.approx(4 * 10.5e12 * 2 / (27.00128129 * 8 * 1e12), rel=REL)


def test_tp1_pp3_dp1_full_recompute():
    plan = Plan(tp=1, pp=3, dp=1, micro_batch=1, recompute="full",
                stages=((0, 0), (1, 1), (2, 2)))
    assert plan.recompute is Recompute.FULL
    r = evaluate_plan(LAYERS, SETUP, plan)
    # m = 8. T0 = 3 + 1 + 2.2e-5, T1 = 6 + 2 + 4.2e-5, T2 = 1.5 + 0.5. Bottleneck: stage 1.
    b = r.breakdown_s
    assert b["compute"] == pytest.approx(48.0, rel=REL)
    assert b["recompute"] == pytest.approx(16.0, rel=REL)
    assert b["pp_comm"] == pytest.approx(3.36e-4, rel=REL)
    assert b["bubble"] == pytest.approx(16.000084, rel=REL)
    assert b["dp_comm"] == 0.0
    assert b["optimizer"] == pytest.approx(6e-8, rel=REL)
    assert r.iteration_time_s == pytest.approx(80.00042006, rel=REL)
    check_breakdown_sums(r)
    assert r.mfu == pytest.approx(8 * 10.5e12 / (80.00042006 * 3 * 1e12), rel=REL)
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
    (dict(tp=0, pp=1, dp=1, micro_batch=1, stages=((0, 2),)), "tp must be a positive"),
    (dict(tp=1, pp=1, dp=-1, micro_batch=1, stages=((0, 2),)), "dp must be a positive"),
    (dict(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 2),)), "pp=2 but 1 stages"),
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
