"""The communication floor of the pruning bound: no plan of the placement engine beats it (brute
force over every plan of small problems), it is computed as the docstring says (by hand), and the
search it prunes returns what evaluating every design returns on PHAZE's slow links."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from tests.placement.placement_helpers import RECOMPUTES, brute_force, chains, setups

from archplace import api
from archplace.cost.model import SystolicCostModel
from archplace.hardware.cluster import Cluster
from archplace.placement.plan import CostKey, PipelineSchedule
from archplace.search.bounds import design_bound
from archplace.search.comm_floor import ChainShape, PlanLimits, plan_bounds
from archplace.search.objective import Objective, score
from archplace.search.runner import model_chains, plan_limits

SCHEDULES = tuple(PipelineSchedule)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_plan_beats_the_floor(data: st.DataObject) -> None:
    """Every plan of every ZeRO stage, overlap, recompute, schedule, depth and DP degree: its
    samples/s and samples/s per device are at most the floor's, with F the layers' own times
    (the tightest floor a design can have)."""
    layers = data.draw(chains(max_layers=4))
    setup = data.draw(setups(layers, max_devices=8))
    key = CostKey(data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 2])), False,
                  data.draw(st.sampled_from([1, 2])))
    brute = brute_force({key: layers}, setup, recomputes=RECOMPUTES, schedules=SCHEDULES, chunks=(2,),
                        zeros=(0, 1, 2, 3), overlaps=(False, True))
    limits = PlanLimits.of(setup.cluster, setup.global_batch, SCHEDULES, (2,), setup.grad_bytes)
    floor = math.fsum(layer.fwd_s + layer.bwd_s for layer in layers)
    rate, per_device = plan_bounds(np.array([floor]), key, ChainShape.of(layers), limits)
    g = setup.global_batch
    note(f"{len(brute.times)} plans")
    for time_s in brute.times:
        assert g / time_s <= rate[0] * (1 + 1e-9)
    for _, _, result in brute.ranked:
        plan = result.plan
        used = plan.tp * plan.cp * plan.pp * plan.dp
        assert g / (result.iteration_time_s * used) <= per_device[0] * (1 + 1e-9)


def _cluster(bandwidth: float, devices: int = 4) -> Cluster:
    return Cluster(devices, devices, bandwidth, bandwidth, 0.0, 0.0)


def test_the_floor_by_hand() -> None:
    """Two layers, 4 devices at 1e9 B/s, G = 4, b = 1, fp32 gradients, no interleaving.

    Dense parameters 1e6 + 2e6 = 3e6; the boundary after layer 0 carries 1e6 bytes; F = 0.1 s.
    Per (p, d), m = ceil(4 / d), V = (F + 4 (p - 1) 1e6 / 1e9) / p, C = 6 (d - 1)/d / 1e9 * 3e6 / p:

    * p = 1: d 1, 2, 3 (m 4, 2, 2: d = 3 is not the smallest for m 2), 4 (m 1);
      d = 1: 3 V + V = 0.4; d = 2: V + max(V, 0.009) = 0.2; d = 4: max(0.1, 0.0135) = 0.1 s;
    * p = 2: V = 0.052, d 1, 2; d = 1: 3 V + V + V = 0.26 (bubble (p - 1) V), d = 2: V + V +
      max(V, 0.0045) = 0.156 s.

    Best throughput 4 / 0.1 = 40 samples/s (p = 1, d = 4 on 4 devices: 10 per device); best per
    device: p = 1, d = 2: 4 / 0.2 / 2 = 10, p = 1, d = 1: 4 / 0.4 = 10, so 10.
    """
    from archplace.placement.plan import LayerCost

    layers = [LayerCost("a", fwd_s=0.03, bwd_s=0.02, params=1_000_000, activation_bytes=0.0, input_bytes=0.0,
                        boundary_bytes=1e6, working_bytes=0.0, fwd_flop=0.0, bwd_flop=0.0),
              LayerCost("b", fwd_s=0.03, bwd_s=0.02, params=2_000_000, activation_bytes=0.0, input_bytes=0.0,
                        boundary_bytes=5e5, working_bytes=0.0, fwd_flop=0.0, bwd_flop=0.0)]
    shape = ChainShape.of(layers)
    assert shape == ChainShape(2, 3e6, 1e6)
    limits = PlanLimits.of(_cluster(1e9), 4, (PipelineSchedule.ONE_F_ONE_B,), (2, 4), 4)
    assert limits == PlanLimits(4, 4, 1e9, 1, 4)
    rate, per_device = plan_bounds(np.array([0.1, math.inf, 0.0]), CostKey(1, 1, False), shape, limits)
    assert rate[0] == pytest.approx(40.0, rel=1e-12) and per_device[0] == pytest.approx(10.0, rel=1e-12)
    assert rate[1] == per_device[1] == 0.0  # no plan
    assert math.isinf(per_device[2]) or per_device[2] > 1e6  # F = 0: only the transfers bound it
    slow = PlanLimits(4, 4, 1e6, 1, 4)  # 1 MB/s: d = 4 costs C = 6 * 0.75 * 3 = 13.5 s
    rate_slow, _ = plan_bounds(np.array([0.1]), CostKey(1, 1, False), shape, slow)
    # p = 2, d = 1: V = (0.1 + 4 * 1)/2 = 2.05, 3 V + V + V = 10.25; p = 1, d = 1: 0.4 (no DP, no
    # pipeline): the single device wins, 4 / 0.4 = 10
    assert rate_slow[0] == pytest.approx(10.0, rel=1e-12)


def test_interleaving_shrinks_the_bubble_term() -> None:
    """8 layers, F = 1 s, 4 devices, G = 4, 1e9 parameters on 1e9 B/s links (DP costs seconds).

    p = 4, d = 1: m = 4, V = 0.25, (m - 1) V + (p - 1) V / v + V = 1 + 0.75 / v, with v at most
    min(4, 8 // 4) = 2 chunks: 1.75 s without interleaving, 1.375 s with it.  Every other (p, d)
    is slower: p = 2, d = 1: 1.5 + 0.5 / 4 + 0.5 = 2.125 s; p = 1, d = 1: 4 s; any d = 2 pays
    C = 6 * 0.5 / p s (3 s at p = 1, 1.5 s at p = 2).
    """
    shape = ChainShape(8, 1e9, 0.0)
    key = CostKey(1, 1, False)
    one = plan_bounds(np.array([1.0]), key, shape, PlanLimits(4, 4, 1e9, 1))[0][0]
    four = plan_bounds(np.array([1.0]), key, shape, PlanLimits(4, 4, 1e9, 4))[0][0]
    assert one == pytest.approx(4 / 1.75, rel=1e-12) and four == pytest.approx(4 / 1.375, rel=1e-12)


SLOW = dict(space="tiny", devices=64, global_batch=128, seq_len=256, micro_batches=(1, 4), baseline=None,
            cluster="phaze-paper")
"""PHAZE's cluster (4 GiB/s for every transfer) on 64 devices, the 43 designs of ``tiny``."""


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


PHAZE = dict(space="tiny", devices=1024, global_batch=4096, seq_len=1024, micro_batches=(1, 2, 4, 8),
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
