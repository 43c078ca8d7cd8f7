"""Upper bounds on a design's objective, for pruning that cannot lose the optimum.

A design is evaluated by scheduling every layer graph (list scheduler) and running the
placement engine over the plan space.  Both steps only add time to a floor that is cheap to
compute, so a bound can rule a design out before its schedules are computed:

1. **Layer floor.**  For every layer graph, ``L_l = lower_bound_s`` of its scheduling
   problem (:mod:`archplace.scheduling.bounds`: critical path at each operator's fastest
   latency, and total work over the cores of each type).  Each operator's fastest latency is
   the cost model's roofline of peak FLOP/s and HBM bandwidth, so ``L_l`` is where the chip's
   peak FLOP/s and HBM bandwidth enter.  The list schedule the evaluation uses takes at least
   ``L_l`` (the optimum does).
2. **Pipeline floor.**  Whatever the plan -- TP width t, p stages, DP degree d with
   ``t p d <= N``, micro-batch b, m >= G / (b d) micro-batches per pipeline, any schedule,
   recomputation, ZeRO or overlap -- each device runs the forward and backward passes of its
   layers for each of its m micro-batches, so the iteration takes at least
   ``m * sum_l (L_l^F + L_l^B) / p >= G t sum_l (L_l^F + L_l^B) / (b N_used)``
   (the bottleneck stage is at least the average stage; communication, bubbles, recomputation
   and the optimizer step only add).  Hence samples/s per device used is at most
   ``b / (t sum_l (L_l^F + L_l^B))``, maximised over the (t, b, SP) keys of the plan space.
3. **Memory floor.**  Model state is 2 + 4 + K bytes per parameter (weights, fp32 gradients, K
   optimizer bytes; :mod:`archplace.placement.memory`).  With ``t p d <= N`` and ZeRO-1 the
   busiest device holds at least ``6 P_t / p + K P_t / (p d) >= (6 + K) t P_t / N`` bytes, where
   ``P_t`` is the parameters per TP rank (the smallest over the plan space's TP widths); a
   design whose HBM is smaller cannot train the model at all.

So ``throughput <= N * per_device`` and ``throughput / (TDP * devices used) <= per_device /
TDP`` (the per-watt objective of WHAM).

4. **Communication floor** (given the search's :class:`~archplace.dse.comm_floor.PlanLimits`):
   the pipeline's sends and the data-parallel traffic no plan avoids, added to the compute floor
   plan by plan (:mod:`archplace.dse.comm_floor`); it replaces the two bounds of point 2 by
   tighter ones.

Pruning a design whose bound is below the incumbent's score therefore never changes the answer;
ties are not pruned.

:func:`design_bound` bounds one core configuration; the search bounds all of them at once with
:func:`archplace.dse.bounds_many.design_bounds` (the same floats, bit for bit) and keeps them in
its result store (:meth:`archplace.dse.store.ResultStore.record_bounds`), so a resumed search
reads them back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from archplace.cost.model import CostModel
from archplace.dse.comm_floor import ChainShape, PlanLimits, plan_bounds
from archplace.hw.accelerator import Accelerator
from archplace.hw.power import tdp_w
from archplace.placement.costs import CostKey
from archplace.placement.memory import (
    GRADIENT_BYTES_PER_PARAM,
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
)
from archplace.placement.plan import Optimizer
from archplace.scheduling.bounds import lower_bound_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.graph import OpGraph
from archplace.workload.layers import Layer, LayerChain, LayerKind


@dataclass(frozen=True)
class DesignBound:
    """Upper bounds for one core configuration (any HBM capacity).

    Attributes:
        samples_per_s: samples/s of the cluster, at most (points 2 and 4 above).
        samples_per_s_per_device: samples/s per device used, at most.
        model_state_floor_bytes: per-device memory no plan can go below (point 3).
    """

    samples_per_s: float
    samples_per_s_per_device: float
    model_state_floor_bytes: float

    def throughput(self, acc: Accelerator) -> float:
        """Upper bound of samples/s of ``acc`` (0 when its HBM is below the memory floor)."""
        if acc.hbm_bytes < self.model_state_floor_bytes:
            return 0.0
        return self.samples_per_s

    def per_watt(self, acc: Accelerator) -> float:
        """Upper bound of samples/s per watt of TDP of the devices used."""
        if acc.hbm_bytes < self.model_state_floor_bytes:
            return 0.0
        return self.samples_per_s_per_device / tdp_w(acc)


def _graph_floor_s(graph: OpGraph, acc: Accelerator, cost: CostModel, memo: dict[int, float]) -> float:
    key = id(graph)
    if key not in memo:
        memo[key] = lower_bound_s(ScheduleProblem.from_graph(graph, acc, cost)) if graph.ops else 0.0
    return memo[key]


def chain_floor_s(chain: LayerChain, acc: Accelerator, cost: CostModel,
                  fp8_cost: CostModel | None = None) -> float:
    """``sum_l (L_l^F + L_l^B)``: no schedule runs one micro-batch through every layer of
    ``chain`` on one device of ``acc`` faster (seconds; repeated layer graphs bounded once).
    With ``fp8_cost`` (FP8 training), every layer but the head is bounded with it, as
    :func:`archplace.placement.costs.layer_costs` costs them."""
    memo: dict[int, float] = {}
    fp8_memo: dict[int, float] = {}

    def floor(layer: Layer) -> float:
        model, seen = ((fp8_cost, fp8_memo) if fp8_cost is not None and layer.kind is not LayerKind.HEAD
                       else (cost, memo))
        return _graph_floor_s(layer.fwd, acc, model, seen) + _graph_floor_s(layer.bwd, acc, model, seen)
    return math.fsum(floor(layer) for layer in chain.layers)


def design_bound(acc: Accelerator, chains: Mapping[CostKey, LayerChain], devices: int, cost: CostModel,
                 optimizer: Optimizer = Optimizer.ADAM,
                 grad_bytes: int = GRADIENT_BYTES_PER_PARAM, *,
                 fp8_cost: CostModel | None = None, bf16: bool = True,
                 limits: PlanLimits | None = None) -> DesignBound:
    """Bounds of ``acc``'s core configuration over the plan space given by ``chains``' keys.

    Args:
        acc: the design (its HBM capacity is not used).
        chains: layer chain per :class:`~archplace.placement.plan.CostKey` (TP, micro-batch, SP, CP, EP,
            expert-TP) that the evaluation will plan with.
        devices: devices in the cluster, N.
        cost: the cost model the evaluation uses.
        optimizer: whose state sets the memory floor.
        grad_bytes: bytes per gradient element (4 fp32, 2 bf16; every ZeRO stage keeps at least
            1/d of them, so the floor over N devices holds for all).
        fp8_cost: the FP8 cost model when the plan space tries fp8 (used when ``acc`` has FP8
            tensor cores): the bound is the larger of the two precisions' (FP8's weight cache
            only adds memory, so the memory floor holds for both).
        bf16: the plan space tries bf16 (False with fp8 only).
        limits: the search's plan limits: with them, the communication floor of point 4 too
            (their ``devices`` and ``grad_bytes`` are used for it); None: compute only.

    Raises:
        ValueError: ``chains`` is empty.
    """
    if not chains:
        raise ValueError("design_bound needs at least one layer chain")
    per_device = rate = 0.0
    fp8 = [fp8_cost] if fp8_cost is not None and acc.fp8_speedup is not None else []
    for key, chain in chains.items():
        floors = ([chain_floor_s(chain, acc, cost)] if bf16 else []) + [chain_floor_s(chain, acc, cost, f)
                                                                         for f in fp8]
        if limits is not None:
            both = plan_bounds(np.array([min(floors, default=math.inf)]), CostKey.of(key),
                               ChainShape.of(chain.layers), limits)
            rate, per_device = max(rate, float(both[0][0])), max(per_device, float(both[1][0]))
            continue
        tp, micro_batch = key[0], key[1]
        for floor_s in floors:
            per_device = max(per_device, math.inf if floor_s <= 0 else micro_batch / (tp * floor_s))
    if limits is None:
        rate = per_device * devices
    return DesignBound(rate, per_device, memory_floor_bytes(chains, devices, optimizer, grad_bytes))


def memory_floor_bytes(chains: Mapping[CostKey, LayerChain], devices: int,
                       optimizer: Optimizer = Optimizer.ADAM,
                       grad_bytes: int = GRADIENT_BYTES_PER_PARAM) -> float:
    """Point 3 of the module docstring: the model state per device no plan over ``chains``' keys
    on ``devices`` devices goes below (bytes; the same for every design)."""
    params = min(chain.model_params * tp for (tp, *_), chain in chains.items())  # >= P: per-rank x t
    state = WEIGHT_BYTES_PER_PARAM + grad_bytes + OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer]
    return state * params / devices
