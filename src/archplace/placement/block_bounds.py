"""Lower bounds of the plan search's candidate blocks (:mod:`archplace.placement.search`):
the level-0 bound of every candidate of a block (its time over s segments and DP + optimizer
tail at the fewest parameters a device can hold), a scalar floor of a block's least level-0
bound, and the DP-group all-reduce costs they use, shared by the blocks of one search."""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

from archplace.placement.candidates import FamilyState, Variant
from archplace.placement.layout import RankLayout
from archplace.placement.plan import TrainingSetup
from archplace.placement.tables import FloatArray
from archplace.placement.timing import P2P_TRANSFERS_PER_BOUNDARY, optimizer_step_time_s
from archplace.placement.zero import WEIGHT_BYTES_PER_PARAM


class BlockBounds:
    """Bounds of candidate blocks on one setup, with their caches (see the module docstring)."""

    def __init__(self, setup: TrainingSetup) -> None:
        self.setup = setup
        self._step_coefficient = optimizer_step_time_s(1.0, setup.step_bandwidth_bytes_per_s, setup.optimizer)
        # all-reduce costs of the DP x CP and expert-data-parallel groups, per (tp, cp, ep, etp,
        # experts, p, d), and as arrays over a block's (p, d) (``group_bound``): the families
        # sharing their degrees share them
        self._layout_costs: dict[tuple[object, ...], tuple[tuple[float, float], tuple[float, float]]] = {}
        self._bound_costs: dict[tuple[object, ...], tuple[FloatArray, FloatArray]] = {}
        self._tails0: dict[tuple[object, ...], FloatArray] = {}  # level-0 tail bounds (``bound0``)
        self._bounds0: dict[tuple[object, ...], FloatArray] = {}
        self._grid_floors: dict[tuple[int, int], tuple[float, float, float]] = {}  # ``floor0`` per (grid, v)

    def floor0(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                m: npt.NDArray[np.int64], grid: int) -> float:
        """A lower bound of the least level-0 bound of a block (:meth:`bound0`), without its
        arrays: K t_low >= max(K / s * (sum of the layer times), K / v * (largest layer time))
        with K = v m + p - 1 and s = p v (a device's pace is the mean of its v segments, one of
        which holds the largest layer), each term at its least over the block, plus (ZeRO stage 0)
        the optimizer step of the fewest parameters a device can hold, the rest of the tail
        counted 0; lowered by a relative 1e-9 to stay below the floating-point figure, and
        finite. The search enters every block with it and computes the block's level-0 bounds
        when it surfaces, then re-enters the block with the least of them under its original
        tie-breakers, so blocks are visited in the same order as if they had entered with their
        level-0 bounds."""
        v = variant.chunks
        key = (grid, v)
        ratios = self._grid_floors.get(key)
        if ratios is None:
            k_factor = v * m + p - 1
            ratios = (float(np.min(k_factor / (p * v))), float(np.min(k_factor)), float(np.max(p)))
            self._grid_floors[key] = ratios
        k_per_segment, k_min, p_max = ratios
        floor = max(k_per_segment * state.layer_base_sum, k_min * state.layer_base_max / v)
        if variant.zero_stage == 0:
            floor += self._step_coefficient * max(state.layer_params_max, state.params_sum / p_max)
        return min(floor * (1 - 1e-9), sys.float_info.max)

    def bound0(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                d: npt.NDArray[np.int64], m: npt.NDArray[np.int64], grid: int) -> FloatArray:
        """Level-0 lower bound of every candidate of a block, ``grid`` numbering the distinct
        (p, d, m) arrays: blocks with equal inputs (1F1B and GPipe; families differing by
        recompute policy alone for the tail) share the arrays (computed once, never mutated)."""
        v = variant.chunks
        fam = state.family
        tail_key = (grid, v, variant.zero_stage, variant.overlap, fam.tp, fam.cp, fam.ep, fam.etp,
                    state.experts, state.layer_params_max, state.params_sum, state.dense_max,
                    state.dense_sum, state.expert_max, state.expert_sum)
        bound_key = (*tail_key, state.layer_base_max, state.layer_base_sum, state.boundary_min)
        bound = self._bounds0.get(bound_key)
        if bound is not None:
            return bound
        tail = self._tails0.get(tail_key)
        if tail is None:
            params = np.maximum(state.layer_params_max, state.params_sum / p)
            tail = self.tail_bound(state, variant, p, d, params)
            self._tails0[tail_key] = tail
        s = p * v
        t_low = np.maximum(np.maximum(state.layer_base_max / v, state.layer_base_sum / s),
                           self.transfer_floor(state, variant, p, d))
        params = np.maximum(state.layer_params_max, state.params_sum / p)
        bound = (v * m + p - 1) * t_low + tail + self.overlap_floor(state, variant, p, d, params, t_low)
        self._bounds0[bound_key] = bound
        return bound

    def transfer_floor(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                       d: npt.NDArray[np.int64]) -> FloatArray:
        """A lower bound of the slowest segment's time per micro-batch from the transfers in it,
        for every candidate (p, d) of a block (seconds):

        * pipeline sends: the s = p v segments' times sum to at least their layers' times and
          the s - 1 boundaries, each paid by both sides twice (activation and gradient,
          :mod:`archplace.placement.pipeline`) at no less than the smallest boundary tensor over
          the cluster's fastest link, so T >= (sum of layer times + 4 (s - 1) b_min / beta) / s
          (the sends left out when an interleaved plan overlaps them, ``pp_comm_overlap``: then
          a segment takes at least its compute);
        * ZeRO 2 and 3: a segment's time holds at least its layers' reduce-scatters (stage 2) or
          their two all-gathers and reduce-scatter (stage 3): each pass ends no earlier than its
          communication stream, which runs them one after another
          (:func:`~archplace.placement.zero.segment_zero_comm_s`), over the DP x CP group at its
          per-byte cost (the start-ups and the experts' collectives left out), so T is at least
          that of the largest layer over v (a device's pace is the mean of its v segments) and
          the average over the s segments. When the gradients are reduced once per iteration
          (``setup.grad_sync`` iteration) the reduce-scatters leave: stage 2 has none, stage 3
          its all-gathers;
        * ZeRO 0 and 1 reducing every micro-batch (``grad_sync`` micro_batch): a segment's time
          holds at least its gradient reduction (all-reduce, reduce-scatter), for the part of it
          left after the backward pass is at least the whole less that pass
          (:func:`~archplace.placement.zero.bucketed_exposed_s`), which the segment's compute
          contains (:func:`~archplace.placement.zero.micro_batch_reduce_s`); the same two
          averages.
        """
        v = variant.chunks
        s = p * v
        fastest = self.setup.cluster.fastest_bandwidth_bytes_per_s()
        sends = np.where(s > 1, P2P_TRANSFERS_PER_BOUNDARY * (s - 1) * state.boundary_min / fastest, 0.0)
        if v > 1 and self.setup.pp_comm_overlap:  # hidden under the segments' compute
            sends = np.zeros_like(sends)
        floor: FloatArray = np.asarray((state.layer_base_sum + sends) / s, dtype=np.float64)
        zs = variant.zero_stage
        every = variant.reduces_every_micro_batch
        if (zs <= 2 and not every) or state.dense_sum <= 0:
            return floor
        per_byte = self.group_costs(state, p, d, 0)[1]
        grad = float(self.setup.grad_bytes)
        if zs <= 1:  # the reduction: an all-reduce (stage 0) or a reduce-scatter of the gradients
            factor = grad if zs == 0 else grad / 2.0
        elif zs == 2:
            factor = grad / 2.0
        else:  # two all-gathers, and the reduce-scatter when every micro-batch reduces
            factor = (2.0 * WEIGHT_BYTES_PER_PARAM + (grad if every else 0.0)) / 2.0
        layer_comm = np.maximum(factor * per_byte * state.dense_max / v,
                                factor * per_byte * state.dense_sum / s)
        return np.maximum(floor, layer_comm)

    def overlap_floor(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                      d: npt.NDArray[np.int64], params: FloatArray, t_low: FloatArray) -> FloatArray:
        """What the bucketed once-per-iteration gradient reduction (``dp_overlap``; ZeRO 0 and 1,
        and 2 and 3 with ``grad_sync`` iteration) adds to :meth:`tail_bound`, which counts it 0,
        for candidates whose slowest segment takes at least ``t_low`` per micro-batch and whose
        largest device holds at least ``params``: max(0, R - v t_low), R the whole reduction's
        time over the shard group (one start-up at least).  The reduction left exposed after the
        last backward pass is at least R minus that pass
        (:func:`~archplace.placement.zero.bucketed_exposed_s`), itself at most the sum of the
        device's v segment times, v T, and
        (v m + p - 1) T + max(0, R - v T) grows with T, so it holds at T = t_low.  0 without
        overlap, when every micro-batch reduces (no reduction in the tail), and for chains with
        routed experts (their tail has two groups; :meth:`tail_bound` alone bounds it)."""
        zs = variant.zero_stage
        if not variant.overlap or variant.reduces_every_micro_batch or state.experts:
            return np.zeros(np.shape(t_low))
        const, per_byte = self.group_costs(state, p, d, 0)
        share = 1.0 if zs == 0 else 0.5  # an all-reduce, or a reduce-scatter (half of it)
        whole = share * (const + per_byte * (self.setup.grad_bytes * params))
        whole = np.where(params > 0, whole, 0.0)
        return np.maximum(0.0, whole - variant.chunks * t_low)

    def costs(self, state: FamilyState, p: int, d: int,
              replicas: bool = False) -> tuple[tuple[float, float], tuple[float, float]]:
        """All-reduce costs over the dense and the expert shard groups of a candidate (the DP x CP
        and expert-data-parallel groups without hybrid sharding), or with ``replicas`` over its
        replica groups ((0, 0) each without hybrid sharding; :mod:`archplace.placement.layout`)."""
        fam = state.family
        key = (fam.tp, fam.cp, fam.ep, fam.etp, state.experts, p, d, replicas)  # shared by the families
        costs = self._layout_costs.get(key)
        if costs is None:
            layout = RankLayout.for_setup(fam, p, d, self.setup)
            costs = (layout.replica_costs(self.setup.cluster, state.experts) if replicas
                     else layout.shard_costs(self.setup.cluster, state.experts))
            self._layout_costs[key] = costs
        return costs

    def group_costs(self, state: FamilyState, p: npt.NDArray[np.int64], d: npt.NDArray[np.int64],
                    which: int) -> tuple[FloatArray, FloatArray]:
        """All-reduce (start-up seconds, seconds per byte) of every candidate (p, d) of a block,
        arrays of the shape of ``p`` (``d`` the same shape), over the DP x CP group (``which`` 0)
        or the expert-data-parallel group (1): :meth:`costs` per distinct pair, cached as arrays
        per (degrees, p, d) so that the blocks sharing them share the arrays (never mutated)."""
        fam = state.family
        key = (fam.tp, fam.cp, fam.ep, fam.etp, state.experts, which, p.tobytes(), d.tobytes(), p.shape,
               p.dtype.str, d.dtype.str)
        arrays = self._bound_costs.get(key)
        if arrays is None:
            pairs = list(zip(p.ravel().tolist(), d.ravel().tolist(), strict=True))
            cost = {pair: self.costs(state, *pair)[which] for pair in set(pairs)}
            arrays = (np.array([cost[pair][0] for pair in pairs], dtype=np.float64).reshape(p.shape),
                      np.array([cost[pair][1] for pair in pairs], dtype=np.float64).reshape(p.shape))
            self._bound_costs[key] = arrays
        return arrays

    def tail_bound(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                   d: npt.NDArray[np.int64], params: FloatArray) -> FloatArray:
        """DP + optimizer tail of a device with ``params`` (charged) parameters, the bucketed
        (overlapped) gradient reduction counted 0: a lower bound of the tail when params bounds
        the largest device from below (every other part grows with params). With routed experts
        the largest of three lower bounds: the optimizer step of ``params`` over the larger shard
        count, and the tail of the dense part alone and of the experts' part alone, each of a
        lower bound of the largest device's dense (expert) parameters (every part of the tail is
        >= 0 and grows with its parameter count)."""
        setup = self.setup
        fam = state.family
        zs = variant.zero_stage
        coefficient = optimizer_step_time_s(1.0, setup.step_bandwidth_bytes_per_s, setup.optimizer)
        dense_group = d * fam.cp // setup.dp_replicate  # the shard groups (all of DP x CP without HSDP)
        if not state.experts:
            return self.group_bound(state, variant, p, d, params, dense_group, 0, coefficient)
        expert_group = fam.expert_group(d) // setup.dp_replicate
        step = coefficient * params / (np.maximum(dense_group, expert_group) if zs >= 1 else np.ones_like(d))
        dense = self.group_bound(state, variant, p, d, np.maximum(state.dense_max, state.dense_sum / p),
                                  dense_group, 0, coefficient)
        experts = self.group_bound(state, variant, p, d,
                                    np.maximum(state.expert_max, state.expert_sum / p),
                                    expert_group, 1, coefficient)
        return np.maximum(np.asarray(step, dtype=np.float64), np.maximum(dense, experts))

    def group_bound(self, state: FamilyState, variant: Variant, p: npt.NDArray[np.int64],
                    d: npt.NDArray[np.int64], params: FloatArray, group: npt.NDArray[np.int64],
                    which: int, coefficient: float) -> FloatArray:
        """Exposed traffic (bucketed reduction counted 0) + optimizer step of ``params``
        parameters reduced and sharded over a group of ``group`` ranks (``which``: 0 the DP x CP
        group, 1 the expert-data-parallel group), as ``zero.dp_tail_comm_s`` charges them (the
        gradient reduction only when it is once per iteration, ``setup.grad_sync``)."""
        setup = self.setup
        zs = variant.zero_stage
        shards = group if zs >= 1 else 1
        out: FloatArray = np.asarray(coefficient * params / shards, dtype=np.float64)
        every = variant.reduces_every_micro_batch
        if zs >= 3 and every:
            return out
        pp_b, dp_b, par_b = np.broadcast_arrays(np.asarray(p), np.asarray(d), np.asarray(params))
        size = np.broadcast_to(np.asarray(group), pp_b.shape)
        const, per_byte = self.group_costs(state, pp_b, dp_b, which)
        # as zero.dp_tail_comm_s, the bucketed (overlapped) reduction counted 0
        grads = setup.grad_bytes * par_b
        comm = (const / 2.0 + per_byte / 2.0 * (WEIGHT_BYTES_PER_PARAM * par_b) if 1 <= zs <= 2
                else np.zeros_like(const))
        if not variant.overlap and not every:
            comm = comm + (const + per_byte * grads if zs == 0 else const / 2.0 + per_byte / 2.0 * grads)
        return out + np.where((size > 1) & (par_b > 0), comm, 0.0)
