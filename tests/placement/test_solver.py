"""optimal_plan and plan_search against the brute force of ``placement_helpers``: every
configuration, every contiguous split, scored by evaluate_plan."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_helpers import (
    COST_KEYS,
    RECOMPUTES,
    brute_force,
    chains,
    check_ranking,
    rank_key,
    setups,
)

from archplace.base.errors import ConfigError, InfeasibleError
from archplace.base.units import format_bytes
from archplace.hw.cluster import Cluster
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import (
    ZERO_STAGES,
    GradSync,
    LayerCost,
    PipelineSchedule,
    Recompute,
    TrainingSetup,
)
from archplace.placement.solver import optimal_plan, plan_search

SCHEDULES = list(SEARCHED_SCHEDULES)


def run_optimal(layers, setup, options):
    return optimal_plan(layers, setup, **options)


def check_optimal(layers, setup, options, label=False):
    """optimal_plan equals the brute force over the same fixed options."""
    schedule = options.get("schedule", PipelineSchedule.ONE_F_ONE_B)
    costs = {(options.get("tp", 1), options["micro_batch"], options.get("sp", False)): layers}
    brute = brute_force(costs, setup, recomputes=[Recompute(options["recompute"])],
                        schedules=[schedule], chunks=(options.get("chunks", 1),),
                        zeros=(options.get("zero_stage", 0),),
                        overlaps=(options.get("dp_overlap", False),))
    if label:
        event("no valid plan" if not brute.any_valid else "nothing fits" if not brute.ranked
              else "feasible")
    if not brute.ranked:
        with pytest.raises(InfeasibleError) as info:
            run_optimal(layers, setup, options)
        message = str(info.value)
        if not brute.any_valid:
            assert message.startswith("no valid plan")
        else:
            assert message.startswith(f"no plan fits in {format_bytes(setup.hbm_bytes)} HBM")
            # the reported candidate is the one that came closest
            assert f"needs {format_bytes(brute.min_peak)} on" in message
        return None
    result = run_optimal(layers, setup, options)
    check_ranking([result], brute, 1)
    assert result == evaluate_plan(layers, setup, result.plan)
    return result


# ---------------------------------------------------------------- hypothesis: optimal_plan

@st.composite
def optimal_problems(draw):
    layers = draw(chains(8))
    setup = draw(setups(layers, 16, grad_syncs=tuple(GradSync)))
    schedule = draw(st.sampled_from(SCHEDULES))
    tp = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    options = dict(micro_batch=draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4])),
                   recompute=draw(st.sampled_from(RECOMPUTES)), tp=tp, schedule=schedule,
                   chunks=draw(st.sampled_from([2, 2, 3])) if schedule is PipelineSchedule.INTERLEAVED
                   else 1,
                   zero_stage=draw(st.sampled_from(ZERO_STAGES)), dp_overlap=draw(st.booleans()),
                   sp=tp > 1 and draw(st.booleans()))  # sequence parallelism needs tp > 1
    return layers, setup, options


def _optimal_equals_brute_force(problem):
    layers, setup, options = problem
    check_optimal(layers, setup, options, label=True)


# 300 examples in the default run, 1,500 in the slow one (CI runs both)
test_optimal_plan_equals_brute_force = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(optimal_problems())(_optimal_equals_brute_force))
test_optimal_plan_equals_brute_force_more = pytest.mark.slow(settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(optimal_problems())(_optimal_equals_brute_force)))


# ---------------------------------------------------------------- hypothesis: plan_search

def subset(items):
    return st.lists(st.sampled_from(items), min_size=1, max_size=len(items), unique=True)


@st.composite
def search_problems(draw):
    n = draw(st.integers(1, 8))
    keys = draw(st.lists(COST_KEYS, min_size=1, max_size=3, unique=True))
    costs = {key: draw(chains(layers=n)) for key in keys}
    setup = draw(setups(costs[keys[0]], 16, grad_syncs=tuple(GradSync)))
    options = dict(recomputes=draw(subset(RECOMPUTES)), schedules=draw(subset(SCHEDULES)),
                   chunks=tuple(draw(subset([2, 3]))), zero_stages=tuple(draw(subset(list(ZERO_STAGES)))),
                   dp_overlap=tuple(draw(subset([False, True]))))
    return costs, setup, options, draw(st.sampled_from([1, 1, 3, 8]))


@pytest.mark.slow  # ~30 s: 300-400 brute-forced instances (make test keeps the smaller brute-force tests)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_problems())
def test_plan_search_equals_brute_force(problem):
    costs, setup, options, top_k = problem
    brute = brute_force(costs, setup, recomputes=options["recomputes"],
                        schedules=options["schedules"], chunks=options["chunks"],
                        zeros=options["zero_stages"], overlaps=options["dp_overlap"])
    event("no valid plan" if not brute.any_valid else "nothing fits" if not brute.ranked
          else "feasible")
    if not brute.ranked:
        with pytest.raises(InfeasibleError, match="^no (valid plan|plan fits)"):
            plan_search(costs, setup, top_k=top_k, **options)
        return
    results = plan_search(costs, setup, top_k=top_k, **options)
    check_ranking(results, brute, top_k)
    for result in results:
        layers = costs[(result.plan.tp, result.plan.micro_batch, result.plan.sp)]
        assert result == evaluate_plan(layers, setup, result.plan)
    assert len({rank_key(r.plan)[:-1] for r in results}) == len(results)  # distinct configurations


# ---------------------------------------------------------------- fixed instances

def uniform_chain(n, **overrides):
    base = dict(fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=1e6, input_bytes=1e4,
                boundary_bytes=1e4, working_bytes=1e5, fwd_flop=1e9, bwd_flop=2e9)
    base.update(overrides)
    return [LayerCost(f"block.{k}", **base) for k in range(n)]


def make_setup(devices=16, per_node=4, hbm=1e9, global_batch=32, **kwargs):
    cluster = Cluster(devices=devices, devices_per_node=per_node,
                      intra_node_bandwidth_bytes_per_s=1e10, inter_node_bandwidth_bytes_per_s=1e9,
                      intra_node_latency_s=1e-6, inter_node_latency_s=1e-5)
    return TrainingSetup(cluster=cluster, global_batch=global_batch, seq_len=128, hbm_bytes=hbm,
                         hbm_bandwidth_bytes_per_s=1e11, peak_flop_per_s=1e12, **kwargs)


@pytest.mark.parametrize("hbm", [2.2e6, 3.5e6, 6e6, 1e9])
@pytest.mark.parametrize("recompute", RECOMPUTES)
def test_ten_identical_layers_ties_and_memory(hbm, recompute):
    """Many exact ties: the tie-break must pick the same plan as the brute force."""
    check_optimal(uniform_chain(10), make_setup(hbm=hbm), dict(micro_batch=2, recompute=recompute))


@pytest.mark.parametrize("schedule,chunks", [(PipelineSchedule.GPIPE, 1),
                                             (PipelineSchedule.INTERLEAVED, 2)])
def test_ten_identical_layers_other_schedules(schedule, chunks):
    for hbm in (2.2e6, 6e6, 1e9):
        check_optimal(uniform_chain(10), make_setup(hbm=hbm),
                      dict(micro_batch=2, recompute=Recompute.NONE, schedule=schedule,
                           chunks=chunks, zero_stage=1, dp_overlap=True))


def test_uneven_chain_with_embedding_and_head():
    layers = ([LayerCost("embedding", fwd_s=0.01, bwd_s=0.02, params=8000, activation_bytes=1e4,
                         input_bytes=1e3, boundary_bytes=1e4, working_bytes=2e4, fwd_flop=0.0,
                         bwd_flop=0.0)]
              + uniform_chain(8)
              + [LayerCost("head", fwd_s=2.5, bwd_s=5.0, params=8000, activation_bytes=3e6,
                           input_bytes=1e4, boundary_bytes=4.0, working_bytes=3e6,
                           fwd_flop=2.5e9, bwd_flop=5e9)])
    for hbm in (1e9, 7e6):
        assert check_optimal(layers, make_setup(hbm=hbm),
                             dict(micro_batch=1, recompute=Recompute.NONE)) is not None


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
    setup = make_setup(hbm=90e6)
    message = re.escape(f"no plan fits in {format_bytes(90e6)} HBM: best candidate pp=4 dp=1 "
                        f"needs {format_bytes(180e6 + 4 * 1e6 + 1e5)} on stage 0 (tp=1, "
                        f"micro_batch=1, recompute=none, schedule=1f1b)")
    with pytest.raises(InfeasibleError, match=message):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE)
    # ZeRO-1 shards the 12 optimizer bytes: the closest candidate now uses every device
    message = re.escape(f"best candidate pp=4 dp=4 needs {format_bytes(60e6 + 30e6 + 4e6 + 1e5)}")
    with pytest.raises(InfeasibleError, match=message):
        plan_search({(1, 1, False): layers}, setup, recomputes=[Recompute.NONE], zero_stages=[1])


def test_no_valid_plan_and_bad_arguments():
    layers = uniform_chain(3)
    setup = make_setup(global_batch=6)
    with pytest.raises(InfeasibleError, match="micro-batch 4 does not divide the global batch 6"):
        optimal_plan(layers, setup, micro_batch=4, recompute=Recompute.NONE)
    with pytest.raises(InfeasibleError, match="tp=32 exceeds"):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE, tp=32)
    with pytest.raises(InfeasibleError, match="^no valid plan"):
        plan_search({(32, 1, False): layers}, setup)
    with pytest.raises(ConfigError):
        optimal_plan([], setup, micro_batch=1, recompute=Recompute.NONE)
    with pytest.raises(ConfigError, match="chunks=1 does not suit the interleaved"):
        optimal_plan(layers, setup, micro_batch=1, recompute="none", schedule="interleaved")
    with pytest.raises(ConfigError, match="unknown pipeline schedule"):
        optimal_plan(layers, setup, micro_batch=1, recompute="none", schedule="zigzag")
    with pytest.raises(ConfigError, match="chunks must be integers >= 2"):
        plan_search({(1, 1, False): layers}, setup, chunks=(1,))
    with pytest.raises(ConfigError, match="top_k"):
        plan_search({(1, 1, False): layers}, setup, top_k=0)
    with pytest.raises(ConfigError, match="keys must be"):
        plan_search({(1, 1): layers}, setup)  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="at least one"):
        plan_search({}, setup)


def test_recompute_lets_a_memory_bound_chain_fit():
    layers = uniform_chain(4, activation_bytes=1e8, selective_activation_bytes=2e7,
                           selective_recompute_s=0.1)
    setup = make_setup(hbm=1.5e8)
    with pytest.raises(InfeasibleError):
        optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.NONE)
    full = optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.FULL)
    assert full.breakdown_s["recompute"] > 0
    selective = optimal_plan(layers, setup, micro_batch=1, recompute=Recompute.SELECTIVE)
    assert 0 < selective.breakdown_s["recompute"] < full.breakdown_s["recompute"]
    assert plan_search({(1, 1, False): layers}, setup)[0].plan.recompute is Recompute.SELECTIVE
    assert dataclasses.replace(full.plan) == full.plan


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
    result = check_optimal(layers, setup, dict(micro_batch=1, recompute=Recompute.NONE))
    assert result.plan.stages == ((0, 0), (1, 4), (5, 5))
    assert result.iteration_time_s == (32 + 2) * 5.0


def test_few_micro_batches_cap_in_flight_counts():
    """m < p: the in-flight count saturates at m."""
    layers = uniform_chain(8, activation_bytes=2e6)
    for global_batch, hbm in ((2, 4.5e6), (3, 6.5e6), (4, 4.5e6)):
        setup = make_setup(hbm=hbm, global_batch=global_batch)
        check_optimal(layers, setup, dict(micro_batch=1, recompute=Recompute.NONE))
        check_optimal(layers, setup, dict(micro_batch=1, recompute=Recompute.NONE,
                                          schedule=PipelineSchedule.GPIPE))


def test_padding_allows_any_dp():
    layers = uniform_chain(4)
    strict = make_setup(global_batch=7)
    padded = make_setup(global_batch=7, dp_must_divide_batch=False)
    assert optimal_plan(layers, strict, micro_batch=1, recompute="none").plan.dp in (1, 7)
    best = plan_search({(1, 1, False): layers}, padded, top_k=3)
    check_optimal(layers, padded, dict(micro_batch=1, recompute="none"))
    assert best[0].iteration_time_s <= optimal_plan(layers, strict, micro_batch=1,
                                                    recompute="none").iteration_time_s


# ---------------------------------------------------------------- larger instances

def _longer_chains_equal_brute_force(data):
    """9 to 12 layers (up to 2048 splits per pipeline depth), one option set."""
    layers = data.draw(chains(layers=data.draw(st.integers(9, 12))))
    setup = data.draw(setups(layers, 8, grad_syncs=tuple(GradSync)))
    schedule = data.draw(st.sampled_from(SCHEDULES))
    options = dict(micro_batch=1, recompute=data.draw(st.sampled_from(RECOMPUTES)),
                   schedule=schedule,
                   chunks=2 if schedule is PipelineSchedule.INTERLEAVED else 1,
                   zero_stage=data.draw(st.sampled_from(ZERO_STAGES)), dp_overlap=data.draw(st.booleans()))
    check_optimal(layers, setup, options, label=True)


# 8 examples in the default run, 80 in the slow one
test_longer_chains_equal_brute_force = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(st.data())(_longer_chains_equal_brute_force))
test_longer_chains_equal_brute_force_more = pytest.mark.slow(settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(st.data())(_longer_chains_equal_brute_force)))


def gpt_like_chain(blocks, tp, micro_batch, sp):
    """A transformer-like chain: embedding, identical blocks, a heavier head."""
    b, shard = micro_batch, tp if sp else 1
    block = LayerCost("block", fwd_s=0.01 * b / tp + 1e-4, bwd_s=0.02 * b / tp + 1e-4,
                      params=1_000_000 // tp, activation_bytes=4e6 * b / shard,
                      input_bytes=2e5 * b / shard, boundary_bytes=2e5 * b / shard,
                      working_bytes=1e6 * b / tp, fwd_flop=1e9 * b / tp, bwd_flop=2e9 * b / tp,
                      selective_activation_bytes=1.5e6 * b / shard,
                      selective_recompute_s=0.002 * b / tp, tp_comm_fwd_s=1e-4, tp_comm_bwd_s=1e-4)
    embedding = LayerCost("embedding", fwd_s=1e-3 * b, bwd_s=2e-3 * b, params=3_000_000 // tp,
                          activation_bytes=2e5 * b / shard, input_bytes=1e3 * b,
                          boundary_bytes=2e5 * b / shard, working_bytes=4e5 * b, fwd_flop=0.0,
                          bwd_flop=0.0)
    head = LayerCost("head", fwd_s=0.03 * b / tp, bwd_s=0.06 * b / tp, params=3_000_000 // tp,
                     activation_bytes=8e6 * b / tp, input_bytes=2e5 * b / shard, boundary_bytes=4.0,
                     working_bytes=8e6 * b / tp, fwd_flop=3e9 * b / tp, bwd_flop=6e9 * b / tp)
    return [embedding] + [dataclasses.replace(block, name=f"block.{k}") for k in range(blocks)] \
        + [head]


@pytest.mark.parametrize("hbm", [1e9, 1.2e8, 6e7])
def test_plan_search_prunes_nothing_it_should_keep(hbm):
    """plan_search's top 5 over every option equal the best of optimal_plan per option set."""
    costs = {(t, b, sp): gpt_like_chain(18, t, b, sp) for t in (1, 2) for b in (1, 2)
             for sp in (False, True) if t > 1 or not sp}
    setup = make_setup(devices=64, per_node=8, hbm=hbm, global_batch=96)
    best = []
    for (t, b, sp), layers in costs.items():
        for rc in RECOMPUTES:
            for schedule, chunks in ((PipelineSchedule.GPIPE, 1), (PipelineSchedule.ONE_F_ONE_B, 1),
                                     (PipelineSchedule.INTERLEAVED, 2),
                                     (PipelineSchedule.INTERLEAVED, 3)):
                for zero in ZERO_STAGES:
                    for overlap in (False, True):
                        try:
                            result = optimal_plan(layers, setup, micro_batch=b, recompute=rc, tp=t,
                                                  schedule=schedule, chunks=chunks, zero_stage=zero,
                                                  dp_overlap=overlap, sp=sp)
                        except InfeasibleError:
                            continue
                        best.append((result.iteration_time_s, rank_key(result.plan), result))
    best.sort(key=lambda row: row[:2])
    results = plan_search(costs, setup, chunks=(2, 3), zero_stages=ZERO_STAGES, top_k=5)
    assert len(results) == min(5, len(best))
    for got, (t, key, _) in zip(results, best, strict=False):
        assert got.iteration_time_s == pytest.approx(t, rel=1e-9)
        assert rank_key(got.plan) == key


def test_rounding_tie_takes_the_smaller_split():
    """Regression (found by hypothesis in CI): two splits whose iteration times differ by one
    rounding (32.51 vs 32.510000000000005) are a tie; the lexicographically smaller split wins."""
    from archplace.hw.cluster import Cluster
    from archplace.placement.plan import LayerCost, PipelineSchedule, Recompute, TrainingSetup

    # (fwd_s, bwd_s, tp_comm_bwd_s); every other figure 0
    figures = [(0.1, 0.1, 0.0), (0.25, 0.25, 0.0), (2.0, 4.0, 0.0), (0.25, 0.25, 0.05),
               (3.0, 3.0, 0.6), (0.1, 3.0, 0.0)]
    layers = [LayerCost(f"l{i}", fwd_s=f, bwd_s=b, params=0, activation_bytes=0.0, input_bytes=0.0,
                        boundary_bytes=0.0, working_bytes=0.0, fwd_flop=0.0, bwd_flop=0.0, tp_comm_bwd_s=c)
              for i, (f, b, c) in enumerate(figures)]
    cluster = Cluster(devices=3, devices_per_node=2, intra_node_bandwidth_bytes_per_s=1e8,
                      inter_node_bandwidth_bytes_per_s=1e6, intra_node_latency_s=1e-3,
                      inter_node_latency_s=1e-5)
    setup = TrainingSetup(cluster, global_batch=1, seq_len=128, hbm_bytes=1.0, hbm_bandwidth_bytes_per_s=1e6,
                          peak_flop_per_s=1e12, dp_must_divide_batch=False)
    options = {"micro_batch": 1, "recompute": Recompute.NONE, "tp": 1,
               "schedule": PipelineSchedule.INTERLEAVED, "chunks": 2, "zero_stage": 0, "dp_overlap": False,
               "sp": False}
    result = check_optimal(layers, setup, options)
    # interleaving is planned with block-uniform splits only (the tie no longer arises). A
    # device's pace is the mean of its chunks: pp 2 (chunks (0, 1), (2, 2), (3, 3), (4, 5)) has
    # device 1 at (6 + 9.1) / 2 = 7.55 s, K = 2 + 1 = 3 slots: 22.65 s; pp 3 with one layer per
    # chunk has device 2 (layers 2 and 5) at (6 + 3.1) / 2 = 4.55 s, K = 2 + 2: 18.2 s
    assert result is not None and result.plan.pp == 3
    assert result.plan.stages == tuple((i, i) for i in range(6))
    assert check_optimal(layers, setup, {**options, "schedule": PipelineSchedule.ONE_F_ONE_B,
                                         "chunks": 1}) is not None


@pytest.mark.slow
@pytest.mark.parametrize("hbm", [1e9, 4e7])
def test_plan_search_with_overlapped_pipeline_sends_equals_brute_force(hbm):
    """With ``pp_comm_overlap`` an interleaved segment takes max(compute, sends): the search's
    tables, bounds and pace agree with ``evaluate_plan`` over every split the brute force
    tries; slow links (1e7 B/s between nodes) make the sends matter."""
    costs = {(t, 1, sp): gpt_like_chain(10, t, 1, sp) for t in (1, 2) for sp in (False, True)
             if t > 1 or not sp}
    cluster = Cluster(devices=16, devices_per_node=4, intra_node_bandwidth_bytes_per_s=1e9,
                      inter_node_bandwidth_bytes_per_s=1e7, intra_node_latency_s=1e-6,
                      inter_node_latency_s=1e-5)
    schedules = [PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED]
    best = {}
    for overlap in (False, True):
        setup = TrainingSetup(cluster=cluster, global_batch=32, seq_len=128, hbm_bytes=hbm,
                              hbm_bandwidth_bytes_per_s=1e11, peak_flop_per_s=1e12, pp_comm_overlap=overlap)
        brute = brute_force(costs, setup, recomputes=[Recompute.NONE], schedules=schedules,
                            chunks=(2,), zeros=(0, 1), overlaps=(False, True))
        results = plan_search(costs, setup, recomputes=[Recompute.NONE], schedules=schedules,
                              chunks=(2,), zero_stages=(0, 1), top_k=5)
        check_ranking(results, brute, 5)
        best[overlap] = results[0].iteration_time_s
    assert best[True] <= best[False]
