"""optimal_plan against a brute force written here: every p, every composition, every d."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from archplace.errors import ConfigError, InfeasibleError
from archplace.hardware.cluster import Cluster
from archplace.placement.memory import stage_memory
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, Plan, Recompute, TrainingSetup
from archplace.placement.solver import optimal_plan
from archplace.units import format_bytes


def compositions(n: int, p: int):
    """Every split of layers 0..n-1 into p contiguous non-empty stages."""
    for cuts in itertools.combinations(range(1, n), p - 1):
        bounds = (0, *cuts, n)
        yield tuple((bounds[k], bounds[k + 1] - 1) for k in range(p))


def brute_force(layers, setup, micro_batch, recompute, tp):
    """(best result, every (time, key) that fits, min over every plan of its peak stage memory)."""
    n, devices = len(layers), setup.cluster.devices
    scored = []
    best = None
    min_peak = None
    for p in range(1, n + 1):
        if tp * p > devices:
            break
        for d in range(1, devices // (tp * p) + 1):
            if setup.global_batch % (micro_batch * d):
                continue
            m = setup.global_batch // (micro_batch * d)
            for stages in compositions(n, p):
                plan = Plan(tp=tp, pp=p, dp=d, micro_batch=micro_batch, recompute=recompute,
                            stages=stages)
                peak = max(stage_memory(layers[a:b + 1], stage=j, in_flight=min(p - j, m),
                                        recompute=recompute).total
                           for j, (a, b) in enumerate(stages))
                min_peak = peak if min_peak is None else min(min_peak, peak)
                try:
                    result = evaluate_plan(layers, setup, plan)
                except InfeasibleError:
                    assert peak > setup.hbm_bytes
                    continue
                assert peak <= setup.hbm_bytes
                key = (plan.devices, p, stages)
                scored.append((result.iteration_time_s, key))
                if best is None or result.iteration_time_s < best.iteration_time_s:
                    best = result
    return best, scored, min_peak


def plan_key(plan):
    return (plan.devices, plan.pp, plan.stages)


def check_against_brute_force(layers, setup, micro_batch, recompute, tp, label=False):
    best, scored, min_peak = brute_force(layers, setup, micro_batch, recompute, tp)
    if label:
        event("no valid (p, d)" if min_peak is None else "nothing fits" if best is None
              else "feasible")
    if best is None:
        with pytest.raises(InfeasibleError) as info:
            optimal_plan(layers, setup, micro_batch=micro_batch, recompute=recompute, tp=tp)
        message = str(info.value)
        if min_peak is None:
            assert message.startswith("no valid plan")
        else:
            # the reported candidate is the one that came closest
            assert message.startswith(f"no plan fits in {format_bytes(setup.hbm_bytes)} HBM")
            assert f"needs {format_bytes(min_peak)} on stage" in message
        return None
    result = optimal_plan(layers, setup, micro_batch=micro_batch, recompute=recompute, tp=tp)
    assert result.iteration_time_s == pytest.approx(best.iteration_time_s, rel=1e-9)
    assert all(m.total <= setup.hbm_bytes for m in result.memory)
    assert result == evaluate_plan(layers, setup, result.plan)
    # tie-break: fewer devices, then smaller p, then lexicographically smallest stages;
    # checked when no plan lies in the gap between a rounding tie and a real difference
    loose = {key for t, key in scored if t <= best.iteration_time_s * (1 + 1e-9)}
    tight = {key for t, key in scored if t <= best.iteration_time_s * (1 + 1e-13)}
    if loose == tight:
        assert plan_key(result.plan) == min(loose)
    return result


# ---------------------------------------------------------------- hypothesis instances

TIMES = st.sampled_from([0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0])
PARAMS = st.sampled_from([0, 1_000, 2_000, 5_000, 50_000, 1_000_000, 3_000_000])
BYTES = st.sampled_from([0.0, 1e3, 1e5, 1e6, 5e6, 2e7, 1e8])


@st.composite
def layer_costs(draw, index):
    fwd = draw(TIMES)
    return LayerCost(
        f"l{index}", fwd_s=fwd, bwd_s=draw(st.sampled_from([fwd, 2 * fwd, 3.0])),
        params=draw(PARAMS), activation_bytes=draw(BYTES), input_bytes=draw(BYTES),
        boundary_bytes=draw(BYTES), working_bytes=draw(BYTES),
        fwd_flop=draw(st.sampled_from([0.0, 1e9, 3e9])), bwd_flop=draw(st.sampled_from([0.0, 2e9])))


@st.composite
def problems(draw):
    n = draw(st.integers(1, 8))
    layers = [draw(layer_costs(k)) for k in range(n)]
    devices = draw(st.integers(2, 16))
    cluster = Cluster(
        devices=devices, devices_per_node=draw(st.integers(1, devices - 1)),
        intra_node_bandwidth_bytes_per_s=draw(st.sampled_from([1e8, 1e9, 1e10])),
        inter_node_bandwidth_bytes_per_s=draw(st.sampled_from([1e6, 1e7, 1e8])),
        intra_node_latency_s=draw(st.sampled_from([0.0, 1e-6, 1e-3])),
        inter_node_latency_s=draw(st.sampled_from([1e-5, 1e-2, 0.1])))
    recompute = draw(st.sampled_from(list(Recompute)))
    micro_batch = draw(st.sampled_from([1, 1, 2, 2, 3, 4]))
    global_batch = draw(st.sampled_from([1, 4, 8, 12, 16, 24, 32, 48]))
    tp = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    # memory limit relative to the whole chain on one device with one micro-batch in flight
    whole = stage_memory(layers, stage=0, in_flight=1, recompute=recompute).total
    hbm = max(whole * draw(st.sampled_from([0.1, 0.25, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 4.0])),
              1.0)
    setup = TrainingSetup(cluster=cluster, global_batch=global_batch, seq_len=128, hbm_bytes=hbm,
                          hbm_bandwidth_bytes_per_s=draw(st.sampled_from([1e6, 1e8, 1e11])),
                          peak_flop_per_s=1e12)
    return layers, setup, micro_batch, recompute, tp


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_optimal_plan_equals_brute_force(problem):
    check_against_brute_force(*problem, label=True)


# ---------------------------------------------------------------- fixed instances

def uniform_chain(n, **overrides):
    base = dict(fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=1e6, input_bytes=1e4,
                boundary_bytes=1e4, working_bytes=1e5, fwd_flop=1e9, bwd_flop=2e9)
    base.update(overrides)
    return [LayerCost(f"block.{k}", **base) for k in range(n)]


def make_setup(devices=16, per_node=4, hbm=1e9, global_batch=32):
    cluster = Cluster(devices=devices, devices_per_node=per_node,
                      intra_node_bandwidth_bytes_per_s=1e10, inter_node_bandwidth_bytes_per_s=1e9,
                      intra_node_latency_s=1e-6, inter_node_latency_s=1e-5)
    return TrainingSetup(cluster=cluster, global_batch=global_batch, seq_len=128, hbm_bytes=hbm,
                         hbm_bandwidth_bytes_per_s=1e11, peak_flop_per_s=1e12)


@pytest.mark.parametrize("hbm", [2.2e6, 3.5e6, 6e6, 1e9])
@pytest.mark.parametrize("recompute", list(Recompute))
def test_ten_identical_layers_ties_and_memory(hbm, recompute):
    """Many exact ties: the tie-break must pick the same plan as the brute force."""
    layers = uniform_chain(10)
    check_against_brute_force(layers, make_setup(hbm=hbm), 2, recompute, 1)


def test_uneven_chain_with_embedding_and_head():
    layers = ([LayerCost("embedding", fwd_s=0.01, bwd_s=0.02, params=8000, activation_bytes=1e4,
                         input_bytes=1e3, boundary_bytes=1e4, working_bytes=2e4, fwd_flop=0.0,
                         bwd_flop=0.0)]
              + uniform_chain(8)
              + [LayerCost("head", fwd_s=2.5, bwd_s=5.0, params=8000, activation_bytes=3e6,
                           input_bytes=1e4, boundary_bytes=4.0, working_bytes=3e6,
                           fwd_flop=2.5e9, bwd_flop=5e9)])
    for hbm in (1e9, 7e6):
        result = check_against_brute_force(layers, make_setup(hbm=hbm), 1, Recompute.NONE, 1)
        assert result is not None


def test_solver_returns_evaluate_plan_result_and_breakdown_sums():
    layers = uniform_chain(6, fwd_s=0.5)
    setup = make_setup(hbm=1e7)
    result = optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE, tp=2)
    assert result.plan.tp == 2 and result.plan.devices <= 16
    total = 0.0
    for key in BREAKDOWN_KEYS:
        total += result.breakdown_s[key]
    assert total == result.iteration_time_s


def test_nothing_fits_reports_the_closest_candidate():
    layers = uniform_chain(4, params=10_000_000)  # 180 MB of model state per layer
    setup = make_setup(hbm=100e6)
    message = re.escape(f"no plan fits in {format_bytes(100e6)} HBM: best candidate pp=4 dp=1 "
                        f"needs {format_bytes(180e6 + 4 * 1e6 + 1e5)} on stage 0")
    with pytest.raises(InfeasibleError, match=message):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE)


def test_no_valid_plan_and_bad_arguments():
    layers = uniform_chain(3)
    setup = make_setup(global_batch=6)
    with pytest.raises(InfeasibleError, match="micro-batch 4 does not divide the global batch 6"):
        optimal_plan(layers, setup, micro_batch=4, recompute=Recompute.NONE)
    with pytest.raises(InfeasibleError, match="tp=32 exceeds"):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE, tp=32)
    with pytest.raises(ConfigError):
        optimal_plan(layers, setup, micro_batch=0, recompute=Recompute.NONE)
    with pytest.raises(ConfigError):
        optimal_plan([], setup, micro_batch=1, recompute=Recompute.NONE)


def test_recompute_lets_a_memory_bound_chain_fit():
    layers = uniform_chain(4, activation_bytes=1e8)
    setup = make_setup(hbm=1.5e8)
    with pytest.raises(InfeasibleError):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE)
    result = optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.FULL)
    assert result.breakdown_s["recompute"] > 0
    assert dataclasses.replace(result.plan) == result.plan


def test_exact_ties_go_to_the_lexicographically_smallest_stages():
    # Stage {5} bottlenecks every 3-stage split; [3, 1, 1, 1, 1] splits into two stages of at
    # most 5 in three ways, all with the same time (no parameters, no p2p cost).
    layers = [LayerCost(f"l{k}", fwd_s=t, bwd_s=0.0, params=0, activation_bytes=0.0,
                        input_bytes=0.0, boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1.0,
                        bwd_flop=0.0) for k, t in enumerate([3.0, 1.0, 1.0, 1.0, 1.0, 5.0])]
    cluster = Cluster(devices=3, devices_per_node=1, intra_node_bandwidth_bytes_per_s=1e9,
                      inter_node_bandwidth_bytes_per_s=1e9, intra_node_latency_s=0.0,
                      inter_node_latency_s=0.0)
    setup = TrainingSetup(cluster=cluster, global_batch=32, seq_len=1, hbm_bytes=1.0,
                          hbm_bandwidth_bytes_per_s=1e9, peak_flop_per_s=1.0)
    result = check_against_brute_force(layers, setup, 1, Recompute.NONE, 1)
    assert result.plan.stages == ((0, 0), (1, 4), (5, 5))
    assert result.iteration_time_s == (32 + 2) * 5.0


def test_few_micro_batches_cap_in_flight_counts():
    """m < p: the in-flight count saturates at m, which the DP handles in a separate sweep."""
    layers = uniform_chain(8, activation_bytes=2e6)
    for global_batch, hbm in ((2, 4.5e6), (3, 6.5e6), (4, 4.5e6)):
        setup = make_setup(hbm=hbm, global_batch=global_batch)
        check_against_brute_force(layers, setup, 1, Recompute.NONE, 1)
