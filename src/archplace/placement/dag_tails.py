"""The DP and optimizer tail of a layer-graph plan's stage (:mod:`archplace.placement.downset_dp`):
the same operations, in the same order, as :func:`archplace.placement.pipeline.device_tails` on
the linearized plan, so the figures equal the final plan's bit for bit.

The DP groups are :class:`~archplace.placement.layout.RankLayout`'s in the setup's rank order:
with hybrid sharding (r = ``setup.dp_replicate`` > 1, FSDP's ``HYBRID_SHARD``) ZeRO-1 shards the
optimizer state over d / r ranks of each of r replicas, which all-reduce their gradient shards
once per iteration (:mod:`archplace.placement.zero`); with r = 1 the shard group is the whole DP
group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from archplace.placement.layout import RankLayout
from archplace.placement.plan import TrainingSetup
from archplace.placement.timing import OPTIMIZER_STEP_BYTES_PER_PARAM, optimizer_step_time_s
from archplace.placement.zero import dp_tail_comm_s

Groups = tuple[tuple[float, float], int, tuple[tuple[float, float], tuple[float, float]]]
"""A plan's DP groups: (all-reduce cost of a shard group, its ranks, the replica groups' costs)."""


def dp_groups(setup: TrainingSetup, tp: int, p: int, d: int) -> Groups:
    """The DP groups of ``p`` stages and ``d`` replicas (:class:`RankLayout`: with hybrid
    sharding's r = ``setup.dp_replicate``, ZeRO shard groups of d / r ranks and replica groups
    of r; the whole DP group when r = 1)."""
    layout = RankLayout(tp, 1, 1, p, d, setup.rank_order, 1, setup.dp_replicate)
    return layout.shard_costs(setup.cluster, False)[0], layout.dense_shards, \
        layout.replica_costs(setup.cluster, False)


def stage_tail(setup: TrainingSetup, groups: Groups, params: float, zero_stage: int) -> float:
    """Exposed DP traffic + optimizer step of a stage of ``params`` parameters without DP overlap,
    for the DP ``groups`` (:func:`dp_groups`), as ``pipeline.device_tails`` (one chunk)."""
    cost, shards, replicas = groups
    exposed, _, slowed = dp_tail_comm_s(cost, zero_stage=zero_stage, grad_bytes=setup.grad_bytes, dp=shards,
                                        params=float(params), backward_s=0.0, overlap=False,
                                        interference=setup.interference, replicas=setup.dp_replicate,
                                        replica_costs=replicas)
    step = optimizer_step_time_s(params, setup.step_bandwidth_bytes_per_s, setup.optimizer,
                                 shards if zero_stage else 1)
    return float((exposed + slowed) + step)


def overlapped_tails(setup: TrainingSetup, groups: Groups, params: Sequence[int],
                     backward_s: Sequence[float], zero_stage: int) -> list[float]:
    """:func:`stage_tail` with overlap of many stages at once, for the DP ``groups`` (:func:`dp_groups`).
    Same operations in the same order as :func:`archplace.placement.pipeline.device_tails`, so
    the figures are equal bit for bit."""
    cost, shards, replicas = groups
    count = np.asarray(params, dtype=np.float64)
    exposed, _, slowed = dp_tail_comm_s(cost, zero_stage=zero_stage, grad_bytes=setup.grad_bytes, dp=shards,
                                        params=count, backward_s=np.asarray(backward_s, dtype=np.float64),
                                        overlap=True, interference=setup.interference,
                                        replicas=setup.dp_replicate, replica_costs=replicas)
    exposed = exposed + slowed
    step = (OPTIMIZER_STEP_BYTES_PER_PARAM[setup.optimizer] * count / (shards if zero_stage else 1)
            / setup.step_bandwidth_bytes_per_s)
    return (exposed + step).tolist()


__all__ = ["Groups", "dp_groups", "overlapped_tails", "stage_tail"]
