"""The communication floor of the pruning bound: no plan of the placement engine beats it (brute
force over every plan of small problems), it is computed as the docstring says (by hand), and the
search it prunes returns what evaluating every design returns on PHAZE's slow links."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.placement.placement_helpers import RECOMPUTES, brute_force, chains, setups

from archplace.cost.model import SystolicCostModel
from archplace.dse.bounds import design_bound
from archplace.dse.comm_floor import ChainShape, PlanLimits, plan_bounds
from archplace.dse.objective import Objective, score
from archplace.dse.runner import model_chains, plan_limits
from archplace.front import api
from archplace.hw.cluster import Cluster
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.plan import CostKey, GradSync, LayerCost, PipelineSchedule

SCHEDULES = SEARCHED_SCHEDULES


def _no_plan_beats_the_floor(data: st.DataObject) -> None:
    """Every plan of every ZeRO stage, overlap, recompute, schedule, depth and DP degree, with
    every gradient synchronisation: its samples/s and samples/s per device are at most the
    floor's, with F the layers' own times (the tightest floor a design can have)."""
    layers = data.draw(chains(max_layers=4))
    setup = data.draw(setups(layers, max_devices=8, grad_syncs=tuple(GradSync)))
    key = CostKey(data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 2])), False,
                  data.draw(st.sampled_from([1, 2])))
    brute = brute_force({key: layers}, setup, recomputes=RECOMPUTES, schedules=SCHEDULES, chunks=(2,),
                        zeros=(0, 1, 2, 3), overlaps=(False, True))
    limits = PlanLimits.of(setup.cluster, setup.global_batch, SCHEDULES, (2,), (0, 1, 2, 3), setup.grad_bytes,
                           setup.grad_sync)
    floor = math.fsum(layer.fwd_s + layer.bwd_s for layer in layers)
    rate, per_device = plan_bounds(np.array([floor]), key, ChainShape.of(layers), limits)
    g = setup.global_batch
    event("plans" if brute.times else "no plan")
    for time_s in brute.times:
        assert g / time_s <= rate[0] * (1 + 1e-9)
    for _, _, result in brute.ranked:
        plan = result.plan
        used = plan.tp * plan.cp * plan.pp * plan.dp
        assert g / (result.iteration_time_s * used) <= per_device[0] * (1 + 1e-9)


# 25 examples in the default run, 100 in the slow one (CI runs both)
test_no_plan_beats_the_floor = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(data=st.data())(_no_plan_beats_the_floor))
test_no_plan_beats_the_floor_more = pytest.mark.slow(settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
    given(data=st.data())(_no_plan_beats_the_floor)))


def _cluster(bandwidth: float, devices: int = 4) -> Cluster:
    return Cluster(devices, devices, bandwidth, bandwidth, 0.0, 0.0)


def _two_layers() -> ChainShape:
    """Two layers of 1e6 and 2e6 parameters, the boundary after the first carrying 1e6 bytes."""
    layers = [LayerCost(name, fwd_s=0.03, bwd_s=0.02, params=params, activation_bytes=0.0, input_bytes=0.0,
                        boundary_bytes=boundary, working_bytes=0.0, fwd_flop=0.0, bwd_flop=0.0)
              for name, params, boundary in (("a", 1_000_000, 1e6), ("b", 2_000_000, 5e5))]
    shape = ChainShape.of(layers)
    assert shape == ChainShape(2, 3e6, 1e6)
    return shape


def test_the_floor_by_hand_zero_0() -> None:
    """4 devices at 1e9 B/s, G = 4, b = 1, fp32 gradients, 1F1B only, ZeRO 0; F = 0.1 s.

    Per (p, d): m = ceil(4 / d) (the smallest d of each m: 1, 2, 4 at p = 1), V = (F + 4 (p - 1)
    1e6 / 1e9) / p, u = (d - 1)/d / 1e9 * 3e6 / p, floor (m - 1 + (p - 1)) V + max(V, 8 u):

    * p = 1: d = 1: 3 V + V = 0.4; d = 2: V + max(V, 0.012) = 0.2; d = 4: max(0.1, 0.018) = 0.1 s;
    * p = 2: V = 0.052; d = 1: (3 + 1) V + V = 0.26; d = 2: (1 + 1) V + max(V, 0.006) = 0.156 s.

    Best throughput 4 / 0.1 = 40 samples/s (on 4 devices: 10 per device); per device used, d = 1,
    2 and 4 at p = 1 all give 10.  At 1 MB/s, d = 2 pays 8 u = 12 s and p = 2 sends 4 s per
    micro-batch: one device, 0.4 s, wins: 10 samples/s.
    """
    shape = _two_layers()
    limits = PlanLimits.of(_cluster(1e9), 4, (PipelineSchedule.ONE_F_ONE_B,), (2, 4), (0,), 4)
    assert limits == PlanLimits(4, 4, 1e9, (), (0,), 4)
    rate, per_device = plan_bounds(np.array([0.1, math.inf, 0.0]), CostKey(1, 1, False), shape, limits)
    assert rate[0] == pytest.approx(40.0, rel=1e-12) and per_device[0] == pytest.approx(10.0, rel=1e-12)
    assert rate[1] == per_device[1] == 0.0  # no plan
    assert rate[2] > 1e3  # F = 0: only the transfers bound it
    slow, _ = plan_bounds(np.array([0.1]), CostKey(1, 1, False), shape, PlanLimits(4, 4, 1e6, (), (0,)))
    assert slow[0] == pytest.approx(10.0, rel=1e-12)


@pytest.mark.parametrize(("stages", "best_s"), [((0,), 0.18), ((1,), 0.145), ((2,), 0.145), ((3,), 0.18),
                                                 ((1, 3), 0.145), ((0, 1, 2, 3), 0.145)])
def test_the_floor_by_hand_zero_stages(stages: tuple[int, ...], best_s: float) -> None:
    """As above at 1e8 B/s: u = 0.0225 at p = 1, d = 4 (m = 1); 0.015 at d = 2 (m = 2); at p = 2
    (V = 0.07, a = 1) 0.0075 at d = 2.  Each plan's floor, by stage:

    ========== ======================= ====================== =====================
    plan       ZeRO 0                  ZeRO 1 and 2           ZeRO 3
               (m-1+a) V + max(V, 8u)  (m-1+a) V + max(V, 4u) (m + a) max(V, 8u)
                                       + 2u
    ========== ======================= ====================== =====================
    p 1, d 4   0.18                    0.145                  0.18
    p 1, d 2   0.22                    0.23                   0.24
    p 1, d 1   0.4                     0.4                    0.4
    p 2, d 2   0.21                    0.225                  0.21
    p 2, d 1   0.35                    0.35                   0.35
    ========== ======================= ====================== =====================

    A plan's floor is the least over the space's stages; the bound takes the best plan.
    """
    shape = _two_layers()
    rate, _ = plan_bounds(np.array([0.1]), CostKey(1, 1, False), shape, PlanLimits(4, 4, 1e8, (), stages))
    assert rate[0] == pytest.approx(4 / best_s, rel=1e-12)


def test_interleaving_trades_the_bubble_for_boundaries() -> None:
    """8 layers, F = 1 s, 4 devices, G = 4, 1e9 parameters on 1e9 B/s links (DP costs seconds).

    Without boundary traffic, p = 4, d = 1: m = 4, V = 0.25, (m - 1 + (p - 1)/v) V + V with v at
    most min(4, 8 // 4) = 2 chunks: 1.75 s without interleaving, 1.375 s with it.  Every other
    (p, d) is slower: p = 2, d = 1, v = 4: 3.25 x 0.5 + 0.5 = 2.125 s; p = 3, d = 1, v = 2: 5/3 s;
    p = 1: 4 s; d = 2 (m = 2) pays u = 0.5 / p s: at p = 2 ZeRO 1's 2 V + max(V, 4 u) + 2 u = 2.5 s.

    With 1e8-byte boundaries (0.1 s per transfer), v = 2 at p = 4 sends 4 (8 - 1) x 0.1 = 2.8 s
    per micro-batch against 1.2 s, and p = 2, d = 2, v = 1 becomes the best: V = (1 + 0.4)/2 = 0.7,
    u = 0.25, 2 V + max(V, 1) + 0.5 = 2.9 s (p = 2, d = 1: 5 V = 3.5 s; p = 4, d = 1, v = 1: 7 x
    0.55 = 3.85 s), with or without interleaving in the space.
    """
    key = CostKey(1, 1, False)
    floors = {(boundary, chunks): plan_bounds(np.array([1.0]), key, ChainShape(8, 1e9, boundary),
                                              PlanLimits(4, 4, 1e9, chunks))[0][0]
              for boundary in (0.0, 1e8) for chunks in ((), (2, 4))}
    assert floors[0.0, ()] == pytest.approx(4 / 1.75, rel=1e-12)
    assert floors[0.0, (2, 4)] == pytest.approx(4 / 1.375, rel=1e-12)
    assert floors[1e8, ()] == floors[1e8, (2, 4)] == pytest.approx(4 / 2.9, rel=1e-12)


SLOW = dict(space="tiny", devices=64, global_batch=128, seq_len=256, micro_batch_sizes=(1, 4), baseline=None,
            cluster="phaze-paper")
"""PHAZE's cluster (4 GiB/s for every transfer) on 64 devices, the 43 designs of ``tiny``."""


@pytest.mark.slow
def test_on_slow_links_the_floor_is_above_every_design_and_below_the_compute_bound(
        models: dict[str, str]) -> None:
    every = api.search(models["gpt"], strategy="exhaustive-all", **SLOW)
    request = api.search_request(models["gpt"], **SLOW)
    (chains_,) = model_chains(request).values()
    cost = SystolicCostModel(request.cluster)
    limits = plan_limits(request)
    tighter = 0
    for result in every.evaluated:
        acc = result.accelerator
        bound = design_bound(acc, chains_, request.cluster.devices, cost, limits=limits)
        compute = design_bound(acc, chains_, request.cluster.devices, cost)
        assert bound.throughput(acc) >= result.throughput_samples_per_s
        assert bound.per_watt(acc) >= result.throughput_per_watt
        assert bound.throughput(acc) <= compute.throughput(acc)
        assert bound.per_watt(acc) <= compute.per_watt(acc)
        if result.best is not None and bound.throughput(acc) < compute.throughput(acc) / 2:
            tighter += 1
    assert tighter > len(every.evaluated) // 2  # 4 GiB/s links: the transfers dominate


PHAZE = dict(space="tiny", devices=1024, global_batch=4096, seq_len=1024, micro_batch_sizes=(1, 2, 4, 8),
             baseline=None, cluster="phaze-paper")
"""PHAZE's experiment (1024 devices, global batch 4096, 4 GiB/s links) on the 43 designs of ``tiny``."""


@pytest.mark.slow  # 2 x 30 s
@pytest.mark.parametrize("objective", ["throughput", "throughput-per-watt"])
def test_on_phaze_links_the_pruned_search_returns_the_plain_answer(objective: str) -> None:
    """gpt2-xl in PHAZE's setting: the communication floor prunes, and loses nothing.  (Per watt,
    a plan on few devices moves little data, so the floor prunes less there.)"""
    plain = api.search("gpt2-xl", strategy="exhaustive-all", objective=objective, **PHAZE)
    pruned = api.search("gpt2-xl", strategy="exhaustive", objective=objective, **PHAZE)
    assert plain.best is not None and pruned.best is not None
    assert pruned.best.to_dict() == plain.best.to_dict()
    assert pruned.pruned > (len(plain.evaluated) // 4 if objective == "throughput" else 0)
    assert len(pruned.evaluated) + pruned.pruned == len(plain.evaluated)
    best = score(plain.best, Objective(objective))
    kept = {r.accelerator.name for r in pruned.evaluated}
    assert all(score(r, Objective(objective)) < best
               for r in plain.evaluated if r.accelerator.name not in kept)
