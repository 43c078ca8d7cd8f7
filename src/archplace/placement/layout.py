"""Where the TP, CP, EP, expert-TP, DP and PP groups of a plan sit among the device ranks, and
the links their collectives use.

A plan with degrees tp, cp, pp, dp occupies tp * cp * pp * dp ranks; the expert groups (etp x
ep x edp) fold the tp * cp * dp ranks that hold one pipeline stage. The layout follows
Megatron-Core (``megatron/core/parallel_state.py``): ``initialize_model_parallel(order=...)``
builds the dense groups with a ``RankGenerator`` over (tp, cp, dp, pp) in the order given,
fastest-varying first, and the expert groups with a second ``RankGenerator`` over (expert-TP,
ep, expert-DP, pp) in the same order, whose pipeline groups must equal the dense ones. Its
expert-DP size is ``world_size // (etp * ep * pp)`` and it raises unless ``etp * ep * pp``
divides the world size -- i.e. unless etp * ep divides tp * cp * dp (the "world_size ... is not
divisible by expert_tensor_model_pipeline_parallel size" check; "MoE parallel folding"). The
etp x ep x edp expert ranks of a stage are its tp x cp x dp dense ranks relabelled, expert-TP
fastest, then EP, then expert-DP, so

* the DP x CP group (Megatron-Core's ``dp-cp`` group: the dense gradients are reduced over it
  and its distributed optimizer shards over it, ``get_data_parallel_group(
  with_context_parallel=True)``; "we piggyback GPUs of context parallelism on data parallel
  group for weight gradient all-reduce", its docstring of ``context_parallel_size``) has
  dp * cp ranks: the stage's ranks with the same TP rank;
* the expert-tensor-parallel group (``LayerCost.expert_params`` are one rank's 1/etp share of
  its experts) has etp ranks: etp consecutive ones of the stage's ranks;
* the expert-parallel group has ep ranks: every etp-th of the stage's ranks;
* the expert-data-parallel group (``ep-dp`` group: the routed experts' gradients and
  optimizer shards) has edp = tp * cp * dp / (etp * ep) ranks: every (etp * ep)-th of the
  stage's ranks;

where "the stage's ranks" are its tp * cp * dp ranks listed TP fastest, then CP, then DP
(index k). With :class:`~archplace.placement.plan.RankOrder` "tp-cp-ep-dp-pp" (Megatron-Core's
default) they are consecutive: rank = k + tp cp dp j for pipeline device j, pipeline neighbours
tp * cp * dp ranks apart. With "tp-cp-ep-pp-dp" (archplace's default; before context and expert
parallelism it was "TP, then PP, then DP") rank = (k mod tp cp) + tp cp j + tp cp pp (k div tp cp),
pipeline neighbours tp * cp ranks apart. (Megatron-Core accepts expert layers with a pp-before-dp
order only when edp = dp, i.e. etp * ep = tp * cp, or pp = 1 -- its assertion "When not using
pp-last rank ordering, the data parallel size of the attention and moe layers must be the same";
archplace extends the relabelling above to every etp * ep dividing tp * cp * dp, an assumption.)

Hybrid sharding (HSDP, ``replicate`` r > 1; PyTorch FSDP's ``HYBRID_SHARD``, Zhao et al.,
"PyTorch FSDP", VLDB 2023, section 3.2.2 "hybrid sharding"; TorchTitan's
``data_parallel_replicate_degree`` x ``data_parallel_shard_degree``, whose device mesh is
(dp_replicate, dp_shard, cp, tp) with the replicate dimension outermost,
``torchtitan/distributed/parallel_dims.py``): r divides dp, and the DP x CP group's dp * cp
ranks, listed CP fastest then DP, fall into r consecutive *shard groups* of dp * cp / r ranks,
over which ZeRO shards and gathers; the *replica group* of a rank holds the r ranks at its
position in every shard group (every (dp * cp / r)-th member), over which the sharded gradients
are all-reduced. The expert-data-parallel group splits the same way (edp / r ranks per shard
group; etp * ep must divide tp * cp * dp / r, so that every replica holds whole expert groups).
With r = 1 the shard group is the whole group and there is no replica group.

A collective over a group uses :func:`archplace.placement.timing.strided_allreduce_cost` when
its ranks are evenly spaced, else :func:`group_allreduce_cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from archplace.base.errors import ConfigError
from archplace.hw.cluster import Cluster
from archplace.placement.plan import Plan, RankOrder, TrainingSetup, check_replicate
from archplace.placement.timing import group_span, strided_allreduce_cost

Cost = tuple[float, float]
"""(start-up seconds, seconds per byte) of an all-reduce (a reduce-scatter or an all-gather
costs half of each)."""


def group_allreduce_cost(cluster: Cluster, offsets: npt.NDArray[np.int64]) -> Cost:
    """(start-up s, s per byte) of a ring all-reduce over the ranks ``offsets`` (ascending, the
    group containing rank 0).

    Evenly spaced ranks: :func:`~archplace.placement.timing.strided_allreduce_cost`. Otherwise,
    with n ranks: when every node the group touches holds the same number g of its members,
    1 < g < n, the reduction is hierarchical as for DP groups (reduce-scatter inside the node on
    the link spanning its members there, all-reduce of each member's 1/g shard across the k = n/g
    nodes, all-gather inside; see ``dp_allreduce_cost``); else one ring on the link of the
    group's whole span: 2 (n - 1) alpha + 2 (n - 1)/n bytes / beta.
    """
    n = len(offsets)
    if n <= 1:
        return 0.0, 0.0
    steps = np.diff(offsets)
    if bool((steps == steps[0]).all()):
        return strided_allreduce_cost(cluster, n, int(steps[0]))
    node = cluster.devices_per_node
    _, counts = np.unique(offsets // node, return_counts=True)
    g = int(counts[0])
    if g <= 1 or g >= n or bool((counts != g).any()):
        alpha, beta = cluster.link(int(offsets[-1] - offsets[0]) + 1)
        return 2.0 * (n - 1) * alpha, 2.0 * (n - 1) / n / beta
    k = n // g
    alpha_in, beta_in = cluster.link(int(offsets[g - 1] - offsets[0]) + 1)
    alpha_out, beta_out = cluster.link(node + 1)
    return (2.0 * (g - 1) * alpha_in + 2.0 * (k - 1) * alpha_out,
            2.0 * (g - 1) / g / beta_in + 2.0 * (k - 1) / k / (g * beta_out))


def check_expert_degree(*, tp: int = 1, cp: int, ep: int, dp: int, etp: int = 1) -> None:
    """Raise ConfigError unless etp * ep divides tp * cp * dp (the expert-tensor- and
    expert-parallel ranks are folded into a pipeline stage's tensor-, context- and data-parallel
    ranks; Megatron-Core's condition, module docstring). With tp = etp = 1 the message names
    dp * cp only (the rule is then: ep divides dp * cp)."""
    if (tp * cp * dp) % (etp * ep) == 0:
        return
    if tp == 1 and etp == 1:
        raise ConfigError(f"plan: ep={ep} must divide dp*cp = {dp}*{cp} = {dp * cp} (the expert-parallel "
                          f"ranks are taken from the data- and context-parallel ranks)")
    raise ConfigError(f"plan: etp*ep = {etp}*{ep} = {etp * ep} must divide tp*cp*dp = {tp}*{cp}*{dp} = "
                      f"{tp * cp * dp} (the expert-tensor- and expert-parallel ranks are folded into a "
                      f"stage's tensor-, context- and data-parallel ranks)")


class StageDegrees(Protocol):
    """The degrees of a pipeline stage's ranks: a cost key, a cost family, segment tables."""

    @property
    def tp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def etp(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RankLayout:
    """The rank layout of one plan (module docstring).

    Attributes:
        tp, cp, ep, pp, dp: the plan's degrees.
        order: the rank order.
        etp: the expert-tensor-parallel width (etp * ep divides tp * cp * dp).
        replicate: the hybrid-sharding replicas r (module docstring; 1: ZeRO shards over the
            whole DP x CP group).

    Raises:
        ConfigError: etp * ep does not divide tp * cp * dp (tp * cp * dp / r with r > 1), or r
            is not a positive divisor of dp.
    """

    tp: int
    cp: int
    ep: int
    pp: int
    dp: int
    order: RankOrder = RankOrder.TP_CP_EP_PP_DP
    etp: int = 1
    replicate: int = 1

    def __post_init__(self) -> None:
        check_expert_degree(tp=self.tp, cp=self.cp, ep=self.ep, dp=self.dp, etp=self.etp)
        if self.replicate == 1:
            return
        check_replicate(self.replicate, dp=self.dp)
        if (self.tp * self.cp * self.dp // self.replicate) % (self.etp * self.ep):
            raise ConfigError(f"plan: etp*ep = {self.etp}*{self.ep} must divide tp*cp*dp/dp_replicate = "
                              f"{self.tp}*{self.cp}*{self.dp}/{self.replicate} (every hybrid-sharding "
                              f"replica holds whole expert groups)")

    @classmethod
    def of(cls, plan: Plan, order: RankOrder) -> RankLayout:
        """The layout of ``plan`` in ``order``."""
        return cls(plan.tp, plan.cp, plan.ep, plan.pp, plan.dp, order, plan.etp, plan.dp_replicate)

    @classmethod
    def for_setup(cls, degrees: StageDegrees, pp: int, dp: int, setup: TrainingSetup) -> RankLayout:
        """The layout of a stage's ``degrees`` (tp, cp, ep, etp: of a cost key, a cost family or
        segment tables) with ``pp`` stages and ``dp`` replicas, in the setup's rank order and
        with its hybrid-sharding replicas (``setup.rank_order``, ``setup.dp_replicate``)."""
        return cls(degrees.tp, degrees.cp, degrees.ep, pp, dp, setup.rank_order, degrees.etp,
                   setup.dp_replicate)

    @property
    def dense_dp(self) -> int:
        """Ranks of the DP x CP group: dp * cp (the dense parameters' ZeRO shards)."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """Ranks of the expert-data-parallel group: tp * cp * dp / (etp * ep) (the routed
        experts' ZeRO shards)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def dense_shards(self) -> int:
        """Ranks the dense parameters' ZeRO state is sharded over: dp * cp / replicate."""
        return self.dense_dp // self.replicate

    @property
    def expert_shards(self) -> int:
        """Ranks the routed experts' ZeRO state is sharded over: edp / replicate."""
        return self.expert_dp // self.replicate

    @property
    def pp_stride(self) -> int:
        """Ranks between pipeline neighbours: tp * cp ("tp-cp-ep-pp-dp") or tp * cp * dp
        ("tp-cp-ep-dp-pp")."""
        block = self.tp * self.cp
        return block if self.order is RankOrder.TP_CP_EP_PP_DP else block * self.dp

    def stage_ranks(self, index: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Global ranks of pipeline device 0's ranks number ``index`` (TP fastest, then CP,
        then DP; module docstring)."""
        if self.order is RankOrder.TP_CP_EP_DP_PP:
            return index
        block = self.tp * self.cp
        return index % block + block * self.pp * (index // block)

    def dense_dp_offsets(self) -> npt.NDArray[np.int64]:
        """Ranks of the DP x CP group of rank 0, ascending."""
        return np.sort(self.stage_ranks(self.tp * np.arange(self.dense_dp, dtype=np.int64)))

    def expert_dp_offsets(self) -> npt.NDArray[np.int64]:
        """Ranks of the expert-data-parallel group of rank 0, ascending."""
        return np.sort(self.stage_ranks(self.etp * self.ep * np.arange(self.expert_dp, dtype=np.int64)))

    def expert_parallel_offsets(self) -> npt.NDArray[np.int64]:
        """Ranks of the expert-parallel group of rank 0 (every etp-th of the stage's ranks),
        ascending."""
        return np.sort(self.stage_ranks(self.etp * np.arange(self.ep, dtype=np.int64)))

    def expert_tensor_offsets(self) -> npt.NDArray[np.int64]:
        """Ranks of the expert-tensor-parallel group of rank 0 (etp consecutive stage ranks),
        ascending."""
        return np.sort(self.stage_ranks(np.arange(self.etp, dtype=np.int64)))

    def dense_dp_cost(self, cluster: Cluster) -> Cost:
        """All-reduce cost over the DP x CP group (equal to ``dp_allreduce_cost(cluster, tp=tp,
        pp=pp, dp=dp)`` with cp = 1 in the default order)."""
        if self.dense_dp == 1:
            return 0.0, 0.0
        if self.cp == 1 and self.order is RankOrder.TP_CP_EP_PP_DP:
            return strided_allreduce_cost(cluster, self.dp, self.tp * self.pp)
        return group_allreduce_cost(cluster, self.dense_dp_offsets())

    def expert_dp_cost(self, cluster: Cluster) -> Cost:
        """All-reduce cost over the expert-data-parallel group."""
        if self.expert_dp == 1:
            return 0.0, 0.0
        return group_allreduce_cost(cluster, self.expert_dp_offsets())

    def _members(self, step: int, count: int) -> npt.NDArray[np.int64]:
        """Global ranks of pipeline device 0's stage indices 0, step, ..., (count - 1) step, ascending."""
        return np.sort(self.stage_ranks(step * np.arange(count, dtype=np.int64)))

    def shard_costs(self, cluster: Cluster, experts: bool) -> tuple[Cost, Cost]:
        """All-reduce costs over the shard groups of rank 0 (module docstring): the dense one
        (the whole DP x CP group when replicate = 1: :meth:`dense_dp_cost`) and, with
        ``experts``, the expert one ((0, 0) without)."""
        if self.replicate == 1:
            return self.dense_dp_cost(cluster), self.expert_dp_cost(cluster) if experts else (0.0, 0.0)
        dense = group_allreduce_cost(cluster, self._members(self.tp, self.dense_shards))
        expert = (group_allreduce_cost(cluster, self._members(self.etp * self.ep, self.expert_shards))
                  if experts else (0.0, 0.0))
        return dense, expert

    def replica_costs(self, cluster: Cluster, experts: bool) -> tuple[Cost, Cost]:
        """All-reduce costs over the replica groups of rank 0, dense and (with ``experts``)
        expert; (0, 0) each when replicate = 1."""
        if self.replicate == 1:
            return (0.0, 0.0), (0.0, 0.0)
        dense = group_allreduce_cost(cluster, self._members(self.tp * self.dense_shards, self.replicate))
        expert = (group_allreduce_cost(cluster, self._members(self.etp * self.ep * self.expert_shards,
                                                              self.replicate))
                  if experts else (0.0, 0.0))
        return dense, expert

    def pp_span(self, wrap: bool = False) -> int:
        """Ranks spanned by two pipeline neighbours, or with ``wrap`` by the interleaved
        schedule's wrap-around boundary from the last device to the first."""
        return group_span(self.pp if wrap else 2, self.pp_stride)
