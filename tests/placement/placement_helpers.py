"""Brute force and hypothesis strategies for the placement tests.

The brute force enumerates every configuration (TP width, micro-batch, SP flag, CP and EP
degree, recompute, schedule and chunks, pipeline depth, DP degree, ZeRO stage, overlap) and
every contiguous split,
scores each plan with ``evaluate_plan`` and ranks the results by the documented tie-break.
It shares nothing with the solver but ``evaluate_plan`` and the value objects.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from archplace.base.errors import ConfigError, InfeasibleError
from archplace.hw.cluster import Cluster
from archplace.placement.interference import NO_INTERFERENCE, Interference
from archplace.placement.pipeline import evaluate_plan, micro_batches, plan_memory
from archplace.placement.plan import (
    CostKey,
    GradReduceDtype,
    GradSync,
    LayerCost,
    Optimizer,
    PipelineSchedule,
    Plan,
    Recompute,
    TrainingSetup,
)

INTERFERENCES = [NO_INTERFERENCE, Interference(sm_share=0.15),
                 Interference(sm_share=0.1, memory_bound_share=0.5, hbm_bandwidth_bytes_per_s=1e9)]
"""Free overlap (most draws' time model before interference), SM contention, SM and HBM."""
RECOMPUTES = [Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL]
SCHEDULE_RANK = {PipelineSchedule.ONE_F_ONE_B: 0, PipelineSchedule.INTERLEAVED: 1,
                 PipelineSchedule.GPIPE: 2}
LOOSE, TIGHT = 1e-9, 1e-13
COST_KEYS = st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.booleans()).filter(
    lambda key: key[0] > 1 or not key[2])
"""(tp, micro_batch, sp) cost keys of TP widths 1 and 2 (sequence parallelism needs tp > 1)."""


def compositions(n: int, parts: int):
    """Every split of layers 0..n-1 into ``parts`` contiguous non-empty ranges."""
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        yield tuple((bounds[k], bounds[k + 1] - 1) for k in range(parts))


def peak_need(layers, setup, plan) -> float:
    """The number ``evaluate_plan`` compares with HBM: the largest device total."""
    return max(m.total for m in plan_memory(layers, setup, plan))


def block_uniform(n, parts):
    """The interleaved splits the solver plans with: equal chunks, or (n - 2) layers divided
    evenly with layer 0 added to the first chunk and layer n - 1 to the last."""
    out = []
    for stages in compositions(n, parts):
        sizes = [b - a + 1 for a, b in stages]
        if len(set(sizes)) == 1 or parts >= 2 and len(set(sizes[1:-1] + [sizes[0] - 1, sizes[-1] - 1])) == 1:
            out.append(stages)
    return out


def rank_key(plan):
    """The documented tie-break after the iteration time (hybrid-sharding replicas first: the
    search ranks each replica count's plans after the smaller one's on equal times)."""
    return (plan.dp_replicate, plan.devices, plan.pp, plan.tp, plan.cp, plan.ep, plan.etp, plan.chunks,
            plan.micro_batch,
            RECOMPUTES.index(plan.recompute), SCHEDULE_RANK[plan.schedule], plan.sp, plan.zero_stage,
            plan.dp_overlap, plan.stages)


@dataclass
class Brute:
    """Outcome of a brute force: the best split of every feasible configuration, ranked, every
    iteration time seen, whether any valid configuration exists, and the least peak need."""

    ranked: list  # (time, rank_key, result), best first
    times: list
    any_valid: bool
    min_peak: float | None


def better_split(time_s, stages, best_s, best_stages) -> bool:
    """The documented rule between two splits of one configuration: a shorter iteration, and
    among times equal up to rounding (relative TIGHT) the lexicographically smaller stages."""
    if abs(time_s - best_s) <= TIGHT * max(time_s, best_s):
        return stages < best_stages
    return time_s < best_s


def brute_force(costs, setup, *, recomputes, schedules, chunks=(2,), zeros=(0,),
                overlaps=(False,), replicates=None) -> Brute:
    """Every configuration of ``costs`` scored and ranked (``replicates``: the hybrid-sharding
    replica counts, each with a setup of its own; None: the setup's)."""
    out = Brute([], [], False, None)
    for r in (replicates if replicates is not None else (setup.dp_replicate,)):
        one = _brute_force(costs, replace(setup, dp_replicate=r), recomputes=recomputes, schedules=schedules,
                           chunks=chunks, zeros=[z for z in zeros if r == 1 or z >= 1], overlaps=overlaps)
        out.ranked += one.ranked
        out.times += one.times
        out.any_valid = out.any_valid or one.any_valid
        if one.min_peak is not None:
            out.min_peak = one.min_peak if out.min_peak is None else min(out.min_peak, one.min_peak)
    out.ranked.sort(key=lambda row: row[:2])
    return out


def _brute_force(costs, setup, *, recomputes, schedules, chunks, zeros, overlaps) -> Brute:
    devices = setup.cluster.devices
    r = setup.dp_replicate
    best_per_config = []
    times = []
    any_valid = False
    min_peak = None
    for key, layers in costs.items():
        tp, b, sp, cp, ep, etp = CostKey.of(key)
        n = len(layers)
        for rc in recomputes:
            for schedule in schedules:
                for v in (chunks if schedule is PipelineSchedule.INTERLEAVED else (1,)):
                    for p in range(2 if v > 1 else 1, n // v + 1):
                        if tp * cp * p > devices:
                            break
                        for d in range(1, devices // (tp * cp * p) + 1):
                            if d % r or (tp * cp * d // r) % (etp * ep):
                                continue
                            for z in zeros:
                                for o in overlaps:
                                    best = None
                                    splits = (block_uniform(n, p * v) if v > 1
                                              else compositions(n, p * v))
                                    for stages in splits:
                                        plan = Plan(tp=tp, pp=p, dp=d, micro_batch=b, recompute=rc,
                                                    stages=stages, schedule=schedule, chunks=v,
                                                    sp=sp, zero_stage=z, dp_overlap=o, cp=cp, ep=ep,
                                                    etp=etp, **setup.plan_options())
                                        try:
                                            micro_batches(setup, plan)
                                        except ConfigError:
                                            break
                                        any_valid = True
                                        peak = peak_need(layers, setup, plan)
                                        min_peak = peak if min_peak is None else min(min_peak, peak)
                                        try:
                                            result = evaluate_plan(layers, setup, plan)
                                        except InfeasibleError:
                                            assert peak > setup.hbm_bytes
                                            continue
                                        assert peak <= setup.hbm_bytes
                                        times.append(result.iteration_time_s)
                                        if best is None or better_split(result.iteration_time_s, stages,
                                                                        best[0], best[2].plan.stages):
                                            best = (result.iteration_time_s, rank_key(plan), result)
                                    if best is not None:
                                        best_per_config.append(best)
    best_per_config.sort(key=lambda row: row[:2])
    return Brute(best_per_config, times, any_valid, min_peak)


def unambiguous(times, t) -> bool:
    """No iteration time lies in the gap between a rounding tie of ``t`` and a real difference."""
    return not any(t * (1 - LOOSE) <= x <= t * (1 + LOOSE) and abs(x - t) > t * TIGHT
                   for x in times)


def check_ranking(results, brute: Brute, top_k: int) -> None:
    """``results`` (from the solver) against the brute-force ranking."""
    expected = brute.ranked[:top_k]
    assert len(results) == len(expected)
    for got, (t, _key, _) in zip(results, expected, strict=True):
        assert abs(got.iteration_time_s - t) <= LOOSE * t
    for i, (got, (t, key, _)) in enumerate(zip(results, expected, strict=True)):
        if unambiguous(brute.times, t) and all(unambiguous(brute.times, row[0])
                                               for row in brute.ranked[:i + 1]):
            assert rank_key(got.plan) == key, (i, got.plan, key)


# ------------------------------------------------------------------ strategies

TIMES = st.sampled_from([0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0])
PARAMS = st.sampled_from([0, 1_000, 2_000, 5_000, 50_000, 1_000_000, 3_000_000])
BYTES = st.sampled_from([0.0, 1e3, 1e5, 1e6, 5e6, 2e7, 1e8])


@st.composite
def layer_costs(draw, index: int):
    fwd = draw(TIMES)
    bwd = draw(st.sampled_from([fwd, 2 * fwd, 3.0]))
    act = draw(BYTES)
    return LayerCost(
        f"l{index}", fwd_s=fwd, bwd_s=bwd, params=draw(PARAMS), activation_bytes=act,
        input_bytes=draw(BYTES), boundary_bytes=draw(BYTES), working_bytes=draw(BYTES),
        fwd_flop=draw(st.sampled_from([0.0, 1e9, 3e9])), bwd_flop=draw(st.sampled_from([0.0, 2e9])),
        selective_activation_bytes=draw(st.sampled_from([None, 0.0, act / 4, act / 2])),
        selective_recompute_s=draw(st.sampled_from([0.0, fwd / 4, fwd / 2])),
        tp_comm_fwd_s=draw(st.sampled_from([0.0, fwd / 5])),
        tp_comm_bwd_s=draw(st.sampled_from([0.0, bwd / 5])))


@st.composite
def chains(draw, max_layers: int = 8, layers: int | None = None):
    n = draw(st.integers(1, max_layers)) if layers is None else layers
    return [draw(layer_costs(k)) for k in range(n)]


@st.composite
def setups(draw, layers, max_devices: int = 16, grad_syncs=(GradSync.AUTO,)):
    """A training setup for ``layers``; its ``grad_sync`` one of ``grad_syncs`` (auto alone by
    default)."""
    devices = draw(st.integers(2, max_devices))
    cluster = Cluster(
        devices=devices, devices_per_node=draw(st.integers(1, devices - 1)),
        intra_node_bandwidth_bytes_per_s=draw(st.sampled_from([1e8, 1e9, 1e10])),
        inter_node_bandwidth_bytes_per_s=draw(st.sampled_from([1e6, 1e7, 1e8])),
        intra_node_latency_s=draw(st.sampled_from([0.0, 1e-6, 1e-3])),
        inter_node_latency_s=draw(st.sampled_from([1e-5, 1e-2, 0.1])))
    # memory limit relative to the model state of the whole chain plus all its activations
    state = 18.0 * sum(layer.params for layer in layers)
    act = sum(layer.activation_bytes for layer in layers) + max(layer.working_bytes
                                                                for layer in layers)
    scale = draw(st.sampled_from([0.1, 0.25, 0.4, 0.6, 1.0, 1.5, 2.0, 4.0, 10.0, 100.0]))
    return TrainingSetup(
        cluster=cluster, global_batch=draw(st.sampled_from([1, 4, 6, 8, 12, 16, 24, 32, 48, 64])),
        seq_len=128, hbm_bytes=max((state + act) * scale, 1.0),
        hbm_bandwidth_bytes_per_s=draw(st.sampled_from([1e6, 1e8, 1e11])), peak_flop_per_s=1e12,
        optimizer=draw(st.sampled_from(list(Optimizer))),
        dp_must_divide_batch=draw(st.booleans()),
        grad_reduce_dtype=draw(st.sampled_from(list(GradReduceDtype))),
        interference=draw(st.sampled_from(INTERFERENCES)),
        hbm_fraction=draw(st.sampled_from([1.0, 0.75])),
        grad_sync=draw(st.sampled_from(list(grad_syncs))))
