"""The communication floor of a plan's iteration time, for the pruning bounds of
:mod:`archplace.dse.bounds`.

The compute floor alone (point 2 of :mod:`archplace.dse.bounds`) ignores every transfer that
is not inside a layer graph: the pipeline's point-to-point sends and the data-parallel gradient
and parameter traffic.  On slow links (the ``phaze-paper`` cluster's 4 GiB/s) these dominate the
iteration and a compute-only bound prunes almost nothing.  This module adds what no plan can
avoid, whatever the design, using only the placement model's own formulas
(:mod:`archplace.placement.pipeline`, :mod:`archplace.placement.zero`,
:mod:`archplace.placement.timing`).

**The floor of one plan.**  Take a plan with TP width t, CP degree c, p pipeline devices, v
chunks per device, DP degree d (n = t c p d <= N devices), micro-batch b, ZeRO stage z, with or
without overlap, any recomputation, schedule and rank order; m >= G / (b d) micro-batches (both
micro-batch rules of :func:`~archplace.placement.timing.micro_batch_count` round up).  Write T
for the slowest segment's time per micro-batch and V = v T.  The placement model charges

    iteration = (v m + p - 1) T + max over devices of (exposed DP traffic + optimizer step)
              = (m + a) V + tail,    a = (p - 1) / v.

* **V >= (F + Q) / p.**  A device runs v segments, so V is at least its segments' summed time,
  and the busiest device at least the average over the p devices of all segments' summed times.
  Those hold every layer's forward and backward makespan (list schedules, each at least its
  layer's floor, summing to F, the compute floor of :func:`~archplace.dse.bounds.chain_floor_s`;
  TP collectives, expert all-to-alls and ring attention are operators of the layer graphs and
  in F already) and every boundary between the p v segments twice, sender and receiver, at
  2 (alpha + bytes / beta) each (:func:`~archplace.placement.timing.pipeline_p2p_time_s`): each
  of the p v - 1 boundaries carries at least the chain's smallest boundary tensor b_min, and the
  scatter/gather link of :func:`~archplace.placement.timing.p2p_link` has 1/beta' >= 1/beta_max,
  so Q = 4 (p v - 1) b_min / beta_max (alpha >= 0 dropped).  v is 1 without interleaving, else
  one of the plan space's chunk counts with p >= 2 and p v <= layers: each is tried, since more
  chunks shrink the bubble a but add boundaries.
* **DP traffic.**  Let P_j be the dense parameters of the device holding the most, P_j >= P / p
  (P: the chain's dense parameters per TP rank; the routed experts' traffic, on the expert-DP
  group, only adds and is left out).  Every all-reduce the model prices over g = d c ranks
  (:func:`~archplace.placement.timing.strided_allreduce_cost`, ring or hierarchical, and
  :func:`~archplace.placement.layout.group_allreduce_cost`) costs at least 2 (g - 1) / (g beta_max)
  per byte, a reduce-scatter or an all-gather half of that (:mod:`archplace.placement.zero`).
  With u = (g - 1) / (g beta_max) P / p, G_b gradient bytes and W = 2 weight bytes per
  parameter, and the device's last backward pass at most V:

  - ZeRO 0: the gradient all-reduce (2 G_b u), exposed but for what overlaps that backward
    pass (:func:`~archplace.placement.zero.bucketed_exposed_s`): tail >= max(0, 2 G_b u - V),
    iteration >= (m - 1 + a) V + max(V, 2 G_b u);
  - ZeRO 1: the reduce-scatter (G_b u) likewise, the all-gather (W u) exposed:
    iteration >= (m - 1 + a) V + max(V, G_b u) + W u;
  - ZeRO 2: the layers' reduce-scatters run one after another on one stream, which a
    segment's backward pass does not outlast (:func:`~archplace.placement.zero.segment_zero_comm_s`),
    so V >= G_b u, and the all-gather is exposed: the same floor as ZeRO 1;
  - ZeRO 3: per micro-batch each layer takes at least its two all-gathers and its
    reduce-scatter, so V >= (2 W + G_b) u: iteration >= (m + a) max(V, (2 W + G_b) u).

  When the gradients are reduced at other times (the plan space's ``grad_sync``,
  :mod:`archplace.placement.zero`): reducing every micro-batch, ZeRO 0 and 1 put their
  reduction in every segment's time, which holds at least it (the part left after the segment's
  backward pass is at least the whole less that pass, which the segment's compute contains:
  :func:`~archplace.placement.zero.micro_batch_reduce_s`), so V >= 2 G_b u (ZeRO 0; iteration
  >= (m + a) max(V, 2 G_b u)) or V >= G_b u (ZeRO 1; iteration >= (m + a) max(V, G_b u) + W u);
  reducing once per iteration, ZeRO 2's reduce-scatter moves to the tail, bucketed over the last
  backward pass as ZeRO 1's (the ZeRO 1 floor), and ZeRO 3 keeps its all-gathers in V
  (V >= 2 W u) and adds that reduce-scatter to the tail: with V' = max(V, 2 W u), iteration >=
  (m + a) V' + max(0, G_b u - V'), which grows with V'.

  The plan's floor is the smallest of these over the plan space's ZeRO stages.

Each floor grows with V, so V may be replaced by its floor.  The design's throughput is at most
G over the plan's floor and its throughput per device used at most G over (floor x n), both
maximised over (p, v, d).  The design enters only through F.  For each p and each micro-batch
count m, the smallest d giving m is the best (u grows with d, and so do the devices used), so
only those d are tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from archplace.hw.cluster import Cluster
from archplace.placement.costs import CostKey
from archplace.placement.plan import GradSync, LayerCost, PipelineSchedule
from archplace.placement.timing import P2P_TRANSFERS_PER_BOUNDARY, smallest_boundary_bytes
from archplace.placement.zero import WEIGHT_BYTES_PER_PARAM, reduces_every_micro_batch
from archplace.workload.layers import Layer

FloatArray = NDArray[np.float64]

ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class PlanLimits:
    """What every plan of a search shares, whatever the design: the cluster's size and fastest
    link, the global batch, and the plan space's interleaving and ZeRO stages.

    Attributes:
        devices: N, devices in the cluster.
        global_batch: G, samples per iteration.
        link_bytes_per_s: the fastest sustained link of the cluster (bytes/s): no transfer the
            placement model prices is faster.
        chunks: chunk counts of the plan space's interleaved schedule (empty without it).
        zero_stages: the plan space's ZeRO stages.
        grad_bytes: bytes per gradient element of the DP reduction (4 fp32 or 2 bf16).
        grad_sync: when the plan space's gradients are reduced (:class:`GradSync`).

    Raises:
        ValueError: a field out of range.
    """

    devices: int
    global_batch: int
    link_bytes_per_s: float
    chunks: tuple[int, ...] = ()
    zero_stages: tuple[int, ...] = ZERO_STAGES
    grad_bytes: int = 4
    grad_sync: GradSync = GradSync.AUTO

    def __post_init__(self) -> None:
        if self.devices < 1 or self.global_batch < 1 or self.grad_bytes < 1:
            raise ValueError(f"plan limits: devices, global batch and gradient bytes must be >= 1, "
                             f"got {self}")
        if not self.link_bytes_per_s > 0:
            raise ValueError(f"plan limits: link bandwidth must be > 0, got {self.link_bytes_per_s}")
        if any(c < 2 for c in self.chunks) or not self.zero_stages or \
                not set(self.zero_stages) <= set(ZERO_STAGES):
            raise ValueError(f"plan limits: chunks must be >= 2 and ZeRO stages in 0..3, got {self}")

    @classmethod
    def of(cls, cluster: Cluster, global_batch: int, schedules: Sequence[PipelineSchedule],
           chunks: Sequence[int], zero_stages: Sequence[int], grad_bytes: int,
           grad_sync: GradSync = GradSync.AUTO) -> PlanLimits:
        """The limits of a plan space (its schedules, chunk counts, ZeRO stages and gradient
        synchronisation) on ``cluster``."""
        fastest = cluster.fastest_bandwidth_bytes_per_s()
        interleaved = tuple(sorted(set(chunks))) if PipelineSchedule.INTERLEAVED in schedules else ()
        return cls(cluster.devices, global_batch, fastest, interleaved, tuple(sorted(set(zero_stages))),
                   grad_bytes, grad_sync)


@dataclass(frozen=True)
class ChainShape:
    """What the communication floor needs of a layer chain.

    Attributes:
        layers: layers in the chain (the deepest pipeline has one per device).
        dense_params: parameters per TP rank, routed experts' excluded (reduced over DP x CP).
        min_boundary_bytes: the smallest tensor a pipeline boundary can carry (bytes; 0 for one
            layer).
    """

    layers: int
    dense_params: float
    min_boundary_bytes: float

    @classmethod
    def of(cls, layers: Sequence[LayerCost] | Sequence[Layer]) -> ChainShape:
        """The shape of a chain's layers (boundaries after every layer but the last)."""
        return cls(len(layers), float(sum(layer.params - layer.expert_params for layer in layers)),
                   smallest_boundary_bytes(layers))


def plan_bounds(floor_s: FloatArray, key: CostKey, shape: ChainShape,
                limits: PlanLimits) -> tuple[FloatArray, FloatArray]:
    """Upper bounds of (samples/s, samples/s per device used) over every plan of ``key``'s chain
    (module docstring), for U designs whose compute floor per micro-batch is ``floor_s``.

    Args:
        floor_s: (U,) F of each design, seconds (+inf: the design has no plan; 0: unbounded).
        key: the chain's (tp, micro_batch, sp, cp, ep, etp).
        shape: its :class:`ChainShape`.
        limits: the search's :class:`PlanLimits`.

    Returns:
        Two (U,) arrays; 0 where the floor is +inf, +inf where a plan's floor is 0.  Element i
        depends on ``floor_s[i]`` only, by the same operations, so bounding designs in any
        grouping gives the same floats.
    """
    given = np.asarray(floor_s, dtype=np.float64)
    finite = np.isfinite(given)
    floor = np.where(finite, given, 0.0)[None, :]
    width = key.tp * key.cp
    beta = limits.link_bytes_per_s
    g_total = limits.global_batch
    rate = np.zeros_like(given)
    per_device = np.zeros_like(given)
    grad, weight = float(limits.grad_bytes), float(WEIGHT_BYTES_PER_PARAM)
    with np.errstate(divide="ignore", invalid="ignore"):
        for p in range(1, min(shape.layers, limits.devices // width) + 1):
            d, m = _smallest_widths(g_total / key.micro_batch, limits.devices // (width * p))
            group = (d * key.cp).astype(np.float64)
            u = ((group - 1.0) / (group * beta) * (shape.dense_params / p))[:, None]
            m = m[:, None]
            used = (width * p * d).astype(np.float64)[:, None]
            for v in _chunk_counts(p, shape.layers, limits.chunks):
                a = (p - 1) / v
                transfers = P2P_TRANSFERS_PER_BOUNDARY * (p * v - 1) * shape.min_boundary_bytes / beta
                v_floor = (floor + transfers) / p
                queue = (m - 1.0 + a) * v_floor
                iteration = np.full((len(d), len(given)), np.inf)
                for z in limits.zero_stages:
                    these = _zero_floor(z, reduces_every_micro_batch(z, limits.grad_sync), queue, v_floor,
                                        m + a, u, grad, weight)
                    np.minimum(iteration, these, out=iteration)
                samples = np.where(iteration > 0, g_total / iteration, np.inf)
                np.maximum(rate, samples.max(axis=0), out=rate)
                np.maximum(per_device, (samples / used).max(axis=0), out=per_device)
    return np.where(finite, rate, 0.0), np.where(finite, per_device, 0.0)


def _zero_floor(z: int, every: bool, queue: FloatArray, v_floor: FloatArray, slots: FloatArray,
                u: FloatArray, grad: float, weight: float) -> FloatArray:
    """The iteration floor of ZeRO stage ``z`` (module docstring), its gradients reduced every
    micro-batch when ``every``: ``queue`` = (m - 1 + a) V, ``slots`` = m + a, V at ``v_floor``."""
    if z == 0:
        reduce = np.maximum(v_floor, 2.0 * grad * u)
        return slots * reduce if every else queue + reduce
    if z == 1 and every:
        return slots * np.maximum(v_floor, grad * u) + weight * u
    if z in (1, 2):
        return queue + np.maximum(v_floor, grad * u) + weight * u
    if every:
        return slots * np.maximum(v_floor, (2.0 * weight + grad) * u)
    gathered = np.maximum(v_floor, 2.0 * weight * u)
    return slots * gathered + np.maximum(0.0, grad * u - gathered)


def _smallest_widths(per_replica_samples: float, widest: int) -> tuple[NDArray[np.int64], FloatArray]:
    """(d, m): for each micro-batch count m = ceil(G / (b d)) of d = 1 .. widest, the smallest
    such d, with its m (``per_replica_samples`` = G / b)."""
    d_all = np.arange(1, widest + 1, dtype=np.int64)
    m_all = np.ceil(per_replica_samples / d_all)
    _, first = np.unique(-m_all, return_index=True)  # m falls with d: the first d of each m
    return d_all[first], m_all[first]


def _chunk_counts(p: int, layers: int, chunks: tuple[int, ...]) -> tuple[int, ...]:
    """v = 1 and every interleaved chunk count p devices can take of ``layers`` layers (the
    interleaved schedule needs p >= 2 and p v <= layers)."""
    return (1, *(v for v in chunks if p >= 2 and p * v <= layers))
