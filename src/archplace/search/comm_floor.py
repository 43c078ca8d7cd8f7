"""The communication floor of a plan's iteration time, for the pruning bounds of
:mod:`archplace.search.bounds`.

The compute floor alone (point 2 of :mod:`archplace.search.bounds`) ignores every transfer that
is not inside a layer graph: the pipeline's point-to-point sends and the data-parallel gradient
and parameter traffic.  On slow links (the ``phaze-paper`` cluster's 4 GiB/s) these dominate the
iteration and a compute-only bound prunes almost nothing.  This module adds what no plan can
avoid, whatever the design, using only the placement model's own formulas
(:mod:`archplace.placement.pipeline`, :mod:`archplace.placement.zero`,
:mod:`archplace.placement.timing`).

**The floor of one plan.**  Take a plan with TP width t, CP degree c, p pipeline devices, DP
degree d (n = t c p d <= N devices), micro-batch b, v chunks per device, any ZeRO stage, overlap,
recomputation, schedule and rank order; m >= G / (b d) micro-batches (both micro-batch rules
of :func:`~archplace.placement.timing.micro_batch_count` round up).  Write T for the slowest
segment's time per micro-batch and V = v T.  The placement model charges

    iteration = (v m + p - 1) T + max over devices of (exposed DP traffic + optimizer step).

* V >= (F + Q) / p: a device runs v segments, so V is at least its segments' summed time, and
  the busiest device at least the average over the p devices of all segments' summed times.
  Those hold every layer's forward and backward makespan (list schedules, each at least its
  layer's floor, summing to F, the compute floor of :func:`~archplace.search.bounds.chain_floor_s`;
  TP collectives, expert all-to-alls and ring attention are operators of the layer graphs and
  in F already) and every pipeline boundary twice, sender and receiver, at
  2 (alpha + bytes / beta) each (:func:`~archplace.placement.timing.pipeline_p2p_time_s`).  With
  p >= 2 there are at least p - 1 boundaries, each carrying at least the chain's smallest
  boundary tensor b_min; the scatter/gather link of :func:`~archplace.placement.timing.p2p_link`
  has 1/beta' >= 1/beta_max, so Q = 4 (p - 1) b_min / beta_max (alpha >= 0 dropped).
* (p - 1) T >= (p - 1) V / v_max, with v_max the most chunks any interleaved split of p devices
  can have in the plan space (1 without interleaving).
* The DP traffic C of the device j holding the most dense parameters, P_j >= P / p (P: the
  chain's dense parameters per TP rank; routed experts' traffic, on the expert-DP group, is
  left out: it only adds).  Every all-reduce the model prices over g = d c ranks
  (:func:`~archplace.placement.timing.strided_allreduce_cost`, ring or hierarchical,
  :func:`~archplace.placement.layout.group_allreduce_cost`) costs at least
  2 (g - 1) / (g beta_max) per byte, a reduce-scatter or an all-gather half of it
  (:mod:`archplace.placement.zero`).  Whatever the ZeRO stage, the device moves at least a
  reduce-scatter of its G-byte gradients and an all-gather of its W = 2-byte weights, or an
  all-reduce of the gradients (G >= W, so no cheaper): C >= (G + W) (g - 1) / (g beta_max) P_j.
  Where it goes:

  - ZeRO 0 and 1: at the end of the iteration, exposed whole, or with ``dp_overlap`` at least
    C minus the device's last backward pass (:func:`~archplace.placement.zero.bucketed_exposed_s`),
    itself at most V: iteration >= (v m + p - 1) T + max(0, C - V);
  - ZeRO 2: per micro-batch each layer's reduce-scatter is hidden at most by its own backward
    pass, so V >= RS, and the all-gather AG is exposed at the end: iteration >= (v m + p - 1) T
    + AG >= (v (m - 1) + p - 1) T + max(V, RS + AG);
  - ZeRO 3: per micro-batch each layer takes at least its all-gathers and reduce-scatter, so
    V >= C.

  In every case, iteration >= (m - 1) V + (p - 1) V / v_max + max(V, C).

So the design's throughput is at most G over that, and its throughput per device used at most
G over (that times n); both are maximised over (p, d).  The design enters only through F, and
the right-hand side grows with V, so replacing V by its floor keeps it a floor.  For each p and
each micro-batch count m, the smallest d giving m is the best (C grows with d, and so do the
devices used), so only those d are tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from archplace.hardware.cluster import Cluster
from archplace.placement.costs import CostKey
from archplace.placement.plan import PipelineSchedule
from archplace.placement.zero import WEIGHT_BYTES_PER_PARAM

FloatArray = NDArray[np.float64]

P2P_BOUNDARY_TRANSFERS = 4
"""Transfers of a pipeline boundary's tensor per micro-batch in the placement model: forward
activation and backward gradient, each charged to the sender and to the receiver
(:mod:`archplace.placement.pipeline`)."""


@dataclass(frozen=True)
class PlanLimits:
    """What every plan of a search shares, whatever the design: the cluster's size and fastest
    link, the global batch and the deepest interleaving.

    Attributes:
        devices: N, devices in the cluster.
        global_batch: G, samples per iteration.
        link_bytes_per_s: the fastest sustained link of the cluster (bytes/s): no transfer the
            placement model prices is faster.
        max_chunks: the most chunks per device of the plan space's interleaved schedule (1
            without it).
        grad_bytes: bytes per gradient element of the DP reduction (4 fp32 or 2 bf16).

    Raises:
        ValueError: a field out of range.
    """

    devices: int
    global_batch: int
    link_bytes_per_s: float
    max_chunks: int = 1
    grad_bytes: int = 4

    def __post_init__(self) -> None:
        if self.devices < 1 or self.global_batch < 1 or self.max_chunks < 1 or self.grad_bytes < 1:
            raise ValueError(f"plan limits: devices, global batch, chunks and gradient bytes must be "
                             f">= 1, got {self}")
        if not self.link_bytes_per_s > 0:
            raise ValueError(f"plan limits: link bandwidth must be > 0, got {self.link_bytes_per_s}")

    @classmethod
    def of(cls, cluster: Cluster, global_batch: int, schedules: tuple[PipelineSchedule, ...],
           chunks: tuple[int, ...], grad_bytes: int) -> PlanLimits:
        """The limits of a plan space (its schedules and chunk counts) on ``cluster``."""
        fastest = max(cluster.link(1)[1], cluster.link(cluster.devices_per_node + 1)[1])
        deepest = max(chunks, default=1) if PipelineSchedule.INTERLEAVED in schedules else 1
        return cls(cluster.devices, global_batch, fastest, max(1, deepest), grad_bytes)


class _ShapedLayer(Protocol):
    """What :class:`ChainShape` reads of a layer (a workload ``Layer`` or a ``LayerCost``)."""

    @property
    def params(self) -> int: ...
    @property
    def expert_params(self) -> int: ...
    @property
    def boundary_bytes(self) -> float: ...


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
    def of(cls, layers: Sequence[_ShapedLayer]) -> ChainShape:
        """The shape of a chain's layers (boundaries after every layer but the last)."""
        return cls(len(layers), float(sum(layer.params - layer.expert_params for layer in layers)),
                   float(min((layer.boundary_bytes for layer in layers[:-1]), default=0.0)))


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
        Two (U,) arrays; +inf where the floor is 0, 0 where it is +inf.  Element i depends on
        ``floor_s[i]`` only, by the same operations, so bounding designs in any grouping gives
        the same floats.
    """
    given = np.asarray(floor_s, dtype=np.float64)
    finite = np.isfinite(given)
    floor_s = np.where(finite, given, 0.0)
    width = key.tp * key.cp
    beta = limits.link_bytes_per_s
    dense, smallest = shape.dense_params, shape.min_boundary_bytes
    g_total = limits.global_batch
    per_batch = g_total / key.micro_batch
    rate = np.zeros_like(floor_s)
    per_device = np.zeros_like(floor_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        for p in range(1, min(shape.layers, limits.devices // width) + 1):
            widest = limits.devices // (width * p)
            d_all = np.arange(1, widest + 1, dtype=np.int64)
            m_all = np.ceil(per_batch / d_all)
            _, first = np.unique(-m_all, return_index=True)  # the smallest d of each m
            d = d_all[first]
            m = m_all[first]
            chunks = _deepest_split(p, shape.layers, limits.max_chunks)
            queue = (m - 1.0 + (p - 1) / chunks)[:, None]
            transfers = P2P_BOUNDARY_TRANSFERS * (p - 1) * smallest / beta
            v_floor = (floor_s + transfers) / p
            group = (d * key.cp).astype(np.float64)
            comm = ((limits.grad_bytes + WEIGHT_BYTES_PER_PARAM) * (group - 1.0) / (group * beta)
                    * (dense / p))[:, None]
            iteration = v_floor[None, :] * queue + np.maximum(v_floor[None, :], comm)
            samples = np.where(iteration > 0, g_total / iteration, np.inf)
            np.maximum(rate, samples.max(axis=0), out=rate)
            used = (width * p * d).astype(np.float64)[:, None]
            np.maximum(per_device, (samples / used).max(axis=0), out=per_device)
    return np.where(finite, rate, 0.0), np.where(finite, per_device, 0.0)


def _deepest_split(p: int, layers: int, max_chunks: int) -> int:
    """The most chunks per device p pipeline devices can take of ``layers`` layers (1 for p = 1
    or when no interleaving fits; the interleaved schedule needs p >= 2 and p v <= layers)."""
    if p < 2:
        return 1
    return max(1, min(max_chunks, layers // p))
