"""Segment tables of one layer chain for the placement solver.

Entry [i, e] (e >= i) of every table describes layers i..e as one pipeline segment; entries
below the diagonal are meaningless (masked by the users). Every sum is a sequential sum from
layer i (``numpy.cumsum`` of a row masked before i) and every derived figure repeats the
operations of :mod:`archplace.placement.pipeline` and :mod:`archplace.placement.memory` in the
same order, so the figures equal those of ``evaluate_plan`` bit for bit and both sides agree on
whether a segment fits and on its time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from archplace.cost.precision import FP8_WEIGHT_CACHE_BYTES_PER_PARAM
from archplace.placement.budget import WorkMeter
from archplace.placement.layout import Cost, RankLayout
from archplace.placement.memory import (
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    fp8_expert_count,
)
from archplace.placement.plan import LayerCost, Recompute, TrainingSetup
from archplace.placement.timing import OPTIMIZER_STEP_BYTES_PER_PARAM, p2p_link
from archplace.placement.zero import (
    dp_tail_comm_s,
    gathered_bytes,
    micro_batch_reduce_s,
    reduces_every_micro_batch,
    segment_zero_comm_s,
    shard_divisors,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNBOUNDED = 1 << 40
"""In-flight capacity of a segment that saves no activations and fits."""

INFINITE_SHARDS = 0
"""``shards`` value meaning "infinitely many replicas": the sharded parts of the model state
vanish (the limit of a ZeRO stage as d grows), used for bounds only."""

Shards = tuple[int, int]
"""(ranks the dense parameters are sharded over, ranks the routed experts' are sharded over):
the DP x CP and expert-data-parallel group sizes under a ZeRO stage >= 1, (1, 1) at stage 0."""

NO_SHARDS: Shards = (1, 1)
ALL_SHARDS: Shards = (INFINITE_SHARDS, INFINITE_SHARDS)


THRESHOLD_BLOCK = 1 << 22
"""Most (layer x threshold) entries :func:`_min_max_by_count` sweeps at once: a chain of n layers
has up to n (n + 1) / 2 distinct segment values, and one block for all of them would take
n^3 / 2 integers (32 GB at 2,000 distinct layers)."""


def _threshold_counts(values: FloatArray, thresholds: FloatArray) -> IntArray:
    """For a table that grows with its segment (sub-segments never exceed it) and does not depend
    on the segment's position: for each value tau of ``thresholds`` the fewest segments
    splitting the chain with each <= tau (a greedy sweep from the left, exact for such tables;
    n + 1 when a single layer exceeds tau), non-increasing in tau."""
    n = values.shape[0]
    reach = np.empty((n, len(thresholds)), dtype=np.int64)
    for i in range(n):  # last layer e with values[i, e] <= tau, or i - 1 when none
        reach[i] = i - 1 + np.searchsorted(values[i, i:], thresholds, side="right")
    position = np.zeros(len(thresholds), dtype=np.int64)
    count = np.zeros(len(thresholds), dtype=np.int64)
    columns = np.arange(len(thresholds))
    for _ in range(n):
        active = position < n
        if not active.any():
            break
        nxt = reach[np.minimum(position, n - 1), columns] + 1
        stuck = active & (nxt <= position)
        count[stuck] = n + 1
        position[stuck] = n
        advance = active & ~stuck
        count[advance] += 1
        position[advance] = nxt[advance]
    return count


def _min_max_by_count(values: FloatArray, upper: BoolArray, meter: WorkMeter | None = None) -> FloatArray:
    """out[s] (s = 0..n): the smallest possible maximum of ``values`` over splits of the chain
    into s segments (inf for s = 0): the least distinct value tau whose greedy count
    (:func:`_threshold_counts`) is at most s, with the values swept in increasing blocks of
    :data:`THRESHOLD_BLOCK` entries, stopping once every s has its value."""
    n = values.shape[0]
    thresholds = np.unique(values[upper])
    out = np.full(n + 1, np.inf)
    segments = np.arange(1, n + 1)
    step = max(1, THRESHOLD_BLOCK // n)
    for lo in range(0, len(thresholds), step):
        block = thresholds[lo:lo + step]
        if meter is not None:
            meter.charge(2 * n * len(block))
        count = _threshold_counts(values, block)
        first = np.searchsorted(-count, -segments, side="left")  # first tau with count <= s
        open_ = np.isinf(out[1:]) & (first < len(block))
        out[1:][open_] = block[first[open_]]
        if not np.isinf(out[1:]).any():
            break
    return out


class SegmentTables:
    """Per-segment figures of one layer chain (one TP width, micro-batch size, SP flag, CP and
    EP degree, expert-TP width and recompute policy) on one setup; see the module docstring.

    Attributes:
        n: layers in the chain.
        base: compute + recompute per micro-batch (a segment's time without its p2p), seconds.
        backward: backward + recompute per micro-batch, seconds.
        params: parameters (as float64).
        dense_params, expert_params: the dense parameters and the routed experts' (float64;
            expert_params None when the chain has none).
        saved: bytes one micro-batch keeps for the backward pass; extra: bytes re-materialised
            under full recomputation (0 otherwise); working: largest working set.
    """

    def __init__(self, layers: Sequence[LayerCost], setup: TrainingSetup, tp: int,
                 recompute: Recompute, sp: bool = False, meter: WorkMeter | None = None,
                 cp: int = 1, ep: int = 1, etp: int = 1) -> None:
        n = len(layers)
        self.n = n
        self.meter = meter
        if meter is not None:
            meter.charge(8 * n * n)  # the cumulative sums below
        self.setup = setup
        self.tp = tp
        self.cp = cp
        self.ep = ep
        self.etp = etp
        self.sp = sp
        self.recompute = recompute
        idx = np.arange(n)
        upper: BoolArray = idx[None, :] >= idx[:, None]
        self.upper = upper

        def column(values: Sequence[float]) -> FloatArray:
            return np.array(values, dtype=np.float64)

        def seg_sum(values: FloatArray) -> FloatArray:
            return np.cumsum(np.where(upper, values[None, :], 0.0), axis=1)

        def seg_max(values: FloatArray) -> FloatArray:
            return np.maximum.accumulate(np.where(upper, values[None, :], -np.inf), axis=1)

        fwd = seg_sum(column([layer.fwd_s for layer in layers]))
        bwd = seg_sum(column([layer.bwd_s for layer in layers]))
        compute = fwd + bwd
        if recompute is Recompute.FULL:
            redo = fwd
        elif recompute is Recompute.SELECTIVE:
            redo = seg_sum(column([layer.selective_recompute_s for layer in layers]))
        else:
            redo = np.zeros((n, n))
        self.base: FloatArray = compute + redo
        self.backward: FloatArray = bwd + redo
        self.boundary = column([layer.boundary_bytes for layer in layers])
        self.layer_params = column([float(layer.params) for layer in layers])
        self.layer_fwd = column([layer.fwd_s for layer in layers])
        self.layer_backward = column([layer.bwd_s + layer.recompute_s(recompute) for layer in layers])
        self.max_params: FloatArray = seg_max(self.layer_params)
        int_params = np.array([layer.params for layer in layers], dtype=np.int64)
        self.params: FloatArray = np.cumsum(np.where(upper, int_params[None, :], 0),
                                            axis=1).astype(np.float64)
        int_fp8 = np.array([layer.fp8_params for layer in layers], dtype=np.int64)
        int_experts = np.array([layer.expert_params for layer in layers], dtype=np.int64)
        self.has_experts = bool(int_experts.any())

        def int_sum(values: IntArray) -> FloatArray:
            return np.cumsum(np.where(upper, values[None, :], 0), axis=1).astype(np.float64)
        fp8_experts = np.array([fp8_expert_count(layer) for layer in layers], dtype=np.int64)
        self.fp8_params: FloatArray | None = (  # FP8 training's weight cache (dense part); None in bf16
            int_sum(int_fp8 - fp8_experts) if int_fp8.any() else None)
        self.dense_params: FloatArray = int_sum(int_params - int_experts) if self.has_experts else self.params
        self.expert_params: FloatArray | None = int_sum(int_experts) if self.has_experts else None
        self.fp8_expert_params: FloatArray | None = (
            int_sum(fp8_experts) if self.has_experts and fp8_experts.any() else None)
        self.layer_dense = column([float(layer.params - layer.expert_params) for layer in layers])
        self.layer_experts = column([float(layer.expert_params) for layer in layers])
        self.saved: FloatArray = seg_sum(column([layer.saved_bytes(recompute) for layer in layers]))
        self.extra: FloatArray = (seg_max(column([layer.activation_bytes for layer in layers]))
                                  if recompute is Recompute.FULL else np.zeros((n, n)))
        self.working: FloatArray = seg_max(column([layer.working_bytes for layer in layers]))
        self._mid: dict[tuple[tuple[float, float] | None, tuple[float, float] | None, bool],
                        FloatArray] = {}
        self._state: dict[tuple[int, Shards], FloatArray] = {}
        self._kmax: dict[tuple[int, Shards], IntArray] = {}
        self._zero: dict[tuple[object, ...], FloatArray] = {}
        self._costs: dict[tuple[int, int, bool], tuple[Cost, Cost]] = {}
        self._t_bound: FloatArray | None = None
        self._loose: tuple[int, FloatArray] | None = None

    def nbytes(self) -> int:
        """Bytes of the tables held, caches included."""
        arrays = [self.upper, self.base, self.backward, self.boundary, self.params, self.saved, self.extra,
                  self.working, self.max_params, *self._mid.values(), *self._state.values(),
                  *self._kmax.values(), *self._zero.values()]
        for extra in (self.fp8_params, self.expert_params, self.fp8_expert_params):
            if extra is not None:
                arrays.append(extra)
        if self.has_experts:
            arrays.append(self.dense_params)
        return sum(array.nbytes for array in arrays)

    def drop_caches(self) -> None:
        """Forget the cached time, state and capacity tables (rebuilt when next asked for)."""
        self._mid.clear()
        self._state.clear()
        self._kmax.clear()
        self._zero.clear()

    # ---------------------------------------------------------------- time

    def segment_time(self, link_in: tuple[float, float] | None,
                     link_out: tuple[float, float] | None, overlap: bool = False) -> FloatArray:
        """Time per micro-batch of every segment [i, e]: base + (p2p_in + p2p_out), where
        p2p_in = 2 (alpha + boundary[i - 1] / beta) on ``link_in`` (0 for the first segment,
        link_in None) and p2p_out = 2 (alpha + boundary[e] / beta) on ``link_out`` (0 for the
        last segment, link_out None), as ``pipeline.stage_times`` adds them; with ``overlap``
        (an interleaved plan's sends overlapping its computation) max(base, p2p_in + p2p_out)."""
        key = (link_in, link_out, overlap)
        if link_in is None and link_out is None:
            return self.base
        table = self._mid.get(key)
        if table is None:
            n = self.n
            p2p_in = np.zeros(n)
            if link_in is not None:
                alpha, beta = link_in
                p2p_in[1:] = 2.0 * (alpha + self.boundary[:-1] / beta)
            p2p_out = np.zeros(n)
            if link_out is not None:
                alpha, beta = link_out
                p2p_out = 2.0 * (alpha + self.boundary / beta)
            p2p = p2p_in[:, None] + p2p_out[None, :]
            # as stage_times: base + (max(base, p2p) - base) with overlap
            table = self.base + (np.maximum(self.base, p2p) - self.base if overlap else p2p)
            self._mid[key] = table
        return table

    def layout(self, pp: int, dp: int) -> RankLayout:
        """The rank layout of this chain's plans with pp stages and dp replicas."""
        return RankLayout.for_setup(self, pp, dp, self.setup)

    def expert_dp(self, dp: int) -> int:
        """Ranks of the expert-data-parallel group with dp replicas: tp * cp * dp / (etp * ep)
        (:attr:`RankLayout.expert_dp`)."""
        return self.tp * self.cp * dp // (self.etp * self.ep)

    def shards(self, zero_stage: int, dp: int) -> Shards:
        """(dense, expert) ZeRO shard counts with dp replicas: the DP x CP and expert-data-parallel
        group sizes (over ``setup.dp_replicate``, the hybrid-sharding replicas) with a ZeRO stage
        >= 1, else (1, 1)."""
        if zero_stage == 0:
            return NO_SHARDS
        r = self.setup.dp_replicate
        return dp * self.cp // r, self.expert_dp(dp) // r

    def group_costs(self, pp: int, dp: int, replicas: bool = False) -> tuple[Cost, Cost]:
        """All-reduce costs (start-up s, s per byte) over the dense and the expert shard groups
        (the DP x CP and expert-data-parallel groups without hybrid sharding;
        :meth:`RankLayout.shard_costs`), or with ``replicas`` over the replica groups
        (:meth:`RankLayout.replica_costs`); (0, 0) for the experts of a chain without them."""
        key = (pp, dp, replicas)
        costs = self._costs.get(key)
        if costs is None:
            layout = self.layout(pp, dp)
            cluster = self.setup.cluster
            costs = (layout.replica_costs(cluster, self.has_experts) if replicas
                     else layout.shard_costs(cluster, self.has_experts))
            self._costs[key] = costs
        return costs

    def position_links(self, pp: int, chunks: int, dp: int = 1) -> list[tuple[float, float] | None]:
        """Link after each of the pp * chunks segments (None for the last), as ``p2p_link``
        (pipeline neighbours ``RankLayout.pp_stride`` ranks apart, which depends on dp in the
        "tp-cp-ep-dp-pp" order)."""
        cluster = self.setup.cluster
        scatter = not self.sp
        stride = self.layout(pp, dp).pp_stride
        neighbour = p2p_link(cluster, tp=self.tp, pp=pp, segment=0, scatter_gather=scatter, stride=stride)
        wrap = p2p_link(cluster, tp=self.tp, pp=pp, segment=pp - 1, chunks=2, scatter_gather=scatter,
                        stride=stride)
        s = pp * chunks
        return [None if c == s - 1 else wrap if chunks > 1 and c % pp == pp - 1 else neighbour
                for c in range(s)]

    def position_times(self, pp: int, chunks: int, zero_stage: int | None = None, dp: int = 1,
                       dp_overlap: bool = False) -> list[FloatArray]:
        """Time table of every segment position c of a pp * chunks split: its input boundary's
        link is the one after position c - 1, its output boundary's the one after c; plus, at a
        ZeRO stage (None: without them), the DP traffic of every micro-batch (:meth:`batch_time`;
        ``dp_overlap``: the plan's)."""
        links = self.position_links(pp, chunks, dp)
        overlap = chunks > 1 and self.setup.pp_comm_overlap
        times = [self.segment_time(links[c - 1] if c > 0 else None, links[c], overlap)
                 for c in range(len(links))]
        extra = None if zero_stage is None else self.batch_time(pp, dp, zero_stage, dp_overlap)
        if extra is None:
            return times
        return [table + extra for table in times]

    def batch_time(self, pp: int, dp: int, zero_stage: int, dp_overlap: bool) -> FloatArray | None:
        """The exposed DP traffic of every micro-batch of every segment (and the compute its
        hidden part slows), as ``pipeline.stage_times`` adds it to T_c, with ``setup.grad_sync``
        (:mod:`archplace.placement.zero`): ZeRO-2/3's per-layer collectives (:meth:`zero_time`;
        none at stage 2 when the gradients are reduced once per iteration), or the gradient
        reduction of stages 0 and 1 when they reduce every micro-batch (:meth:`reduce_time`);
        None when there is none."""
        every = reduces_every_micro_batch(zero_stage, self.setup.grad_sync)
        if zero_stage >= 2:
            if self.shards(zero_stage, dp) == NO_SHARDS or (zero_stage == 2 and not every):
                return None
            return self.zero_time(pp, dp, zero_stage)
        r = self.setup.dp_replicate
        if not every or (dp * self.cp // r == 1 and not (self.has_experts and self.expert_dp(dp) // r > 1)):
            return None
        return self.reduce_time(pp, dp, zero_stage, dp_overlap)

    def reduce_time(self, pp: int, dp: int, zero_stage: int, dp_overlap: bool) -> FloatArray:
        """Exposed gradient reduction of ZeRO stage 0 or 1 per micro-batch (and the compute its
        hidden part slows) of every segment, bucketed over the segment's backward pass with
        ``dp_overlap``: [start, end] of :func:`archplace.placement.zero.micro_batch_reduce_s`, in
        seconds."""
        cost, expert_cost = self.group_costs(pp, dp)
        key = ("reduce", zero_stage, dp, dp_overlap, *cost, *expert_cost)
        table = self._zero.get(key)
        if table is None:
            setup = self.setup
            r = setup.dp_replicate
            experts = 0.0 if self.expert_params is None else self.expert_params
            reduce = micro_batch_reduce_s(cost, zero_stage=zero_stage, grad_bytes=setup.grad_bytes,
                                          dp=dp * self.cp // r, params=self.dense_params,
                                          backward_s=self.backward, overlap=dp_overlap,
                                          expert_cost=expert_cost, expert_dp=self.expert_dp(dp) // r,
                                          expert_params=experts, interference=setup.interference,
                                          replicas=r, grad_sync=setup.grad_sync)
            table = np.where(self.upper, reduce.exposed + reduce.slowed, 0.0)  # as pipeline.stage_times
            self._zero[key] = table
        return table

    def zero_time(self, pp: int, dp: int, zero_stage: int) -> FloatArray:
        """Exposed ZeRO-2/3 collectives per micro-batch of every segment (and the compute their
        hidden part slows), prefetched over each pass: [start, end] of
        :func:`archplace.placement.zero.segment_zero_comm_s`, in seconds."""
        cost, expert_cost = self.group_costs(pp, dp)
        key = (zero_stage, dp, *cost, *expert_cost)
        table = self._zero.get(key)
        if table is None:
            zero = segment_zero_comm_s(cost, zero_stage=zero_stage, grad_bytes=self.setup.grad_bytes,
                                       dp=dp * self.cp // self.setup.dp_replicate,
                                       params=self.layer_dense if self.has_experts else self.layer_params,
                                       fwd_s=self.layer_fwd, backward_s=self.layer_backward,
                                       expert_cost=expert_cost,
                                       expert_dp=self.expert_dp(dp) // self.setup.dp_replicate,
                                       expert_params=self.layer_experts if self.has_experts else None,
                                       interference=self.setup.interference, grad_sync=self.setup.grad_sync)
            table = np.where(self.upper, zero.exposed + zero.slowed, 0.0)  # as pipeline.stage_times
            self._zero[key] = table
        return table

    def time_bound(self) -> FloatArray:
        """out[s]: a lower bound on the bottleneck segment time of any split into s segments
        (the exact minimum of ``base``, ignoring memory and p2p)."""
        if self._t_bound is None:
            self._t_bound = _min_max_by_count(self.base, self.upper, self.meter)
        return self._t_bound

    # ---------------------------------------------------------------- memory

    def state(self, zero_stage: int, shards: Shards) -> FloatArray:
        """Model-state bytes (weights + gradients + optimizer, each divided as ``zero_stage`` and
        ``setup.grad_sync`` shard it: the dense parameters over ``shards[0]`` replicas, the
        routed experts' over ``shards[1]``; INFINITE_SHARDS: the sharded parts vanish) of every
        segment, as ``memory.model_state_bytes`` adds them."""
        key = (zero_stage, shards)
        table = self._state.get(key)
        if table is None:
            p = self.dense_params
            optimizer = OPTIMIZER_STATE_BYTES_PER_PARAM[self.setup.optimizer]
            grad = self.setup.grad_bytes
            sw, sg, so = shard_divisors(zero_stage, shards[0], self.setup.grad_sync)

            def part(per_param: int, divisor: int, count: FloatArray = p) -> FloatArray:
                if divisor == INFINITE_SHARDS:
                    return np.zeros_like(p)
                return per_param * count / divisor
            weights = part(WEIGHT_BYTES_PER_PARAM, sw)
            if self.fp8_params is not None:  # as memory.model_state_bytes adds it
                weights = weights + part(FP8_WEIGHT_CACHE_BYTES_PER_PARAM, sw, self.fp8_params)
            gradients, state = part(grad, sg), part(optimizer, so)
            if self.expert_params is not None:
                e = self.expert_params
                ew, eg, eo = shard_divisors(zero_stage, shards[1], self.setup.grad_sync)
                expert_weights = part(WEIGHT_BYTES_PER_PARAM, ew, e)
                if self.fp8_expert_params is not None:
                    expert_weights = expert_weights + part(FP8_WEIGHT_CACHE_BYTES_PER_PARAM, ew,
                                                           self.fp8_expert_params)
                else:
                    expert_weights = expert_weights + part(FP8_WEIGHT_CACHE_BYTES_PER_PARAM, ew,
                                                           np.zeros_like(e))
                weights = weights + expert_weights
                gradients = gradients + part(grad, eg, e)
                state = state + part(optimizer, eo, e)
            table = (weights + gradients) + state
            self._state[key] = table
        return table

    def gathered(self, zero_stage: int) -> FloatArray:
        """ZeRO-3's window of gathered state of every segment (0 below stage 3), in bytes."""
        return gathered_bytes(zero_stage, self.max_params, self.setup.grad_bytes)

    def capacity(self, zero_stage: int, shards: Shards) -> IntArray:
        """Largest in-flight count with which each segment, as a stage of a GPipe or 1F1B
        pipeline, fits in HBM (0: none; UNBOUNDED when it saves nothing and fits; -1 below the
        diagonal): ``StageMemory.total`` = ((state + (k saved + extra)) + working) + gathered
        <= HBM. Computed from a division and corrected against the exact expression, so it is
        exact. (Interleaved devices hold several segments: see ``search.interleaved_splits``.)
        """
        key = (zero_stage, shards)
        table = self._kmax.get(key)
        if table is not None:
            return table
        hbm = self.setup.hbm_bytes
        saved = self.saved
        state = self.state(zero_stage, shards)
        extra, working, window = self.extra, self.working, self.gathered(zero_stage)

        def total(k: FloatArray) -> FloatArray:
            return ((state + (k * saved + extra)) + working) + window
        rest = ((state + extra) + working) + window
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            approx = np.floor((hbm - rest) / saved)
        approx = np.where(saved > 0, approx, np.where(rest <= hbm, UNBOUNDED, 0))
        k = np.clip(np.nan_to_num(approx, nan=0.0, posinf=UNBOUNDED, neginf=0.0), 0, UNBOUNDED)
        rounds = 0
        while rounds < 64:
            rounds += 1
            grow = (k < UNBOUNDED) & (saved > 0) & (total(k + 1.0) <= hbm)
            shrink = (k >= 1) & (total(k) > hbm)
            if not (grow.any() or shrink.any()):
                break
            k = np.where(grow, k + 1.0, np.where(shrink, k - 1.0, k))
        if self.meter is not None:
            self.meter.charge(4 * (rounds + 1) * self.n * self.n)
        table = np.where(self.upper, k, -1).astype(np.int64)
        self._kmax[key] = table
        return table

    def memory(self, in_flight: int, zero_stage: int, shards: Shards,
               rows: slice = slice(None), cols: slice = slice(None)) -> FloatArray:
        """``StageMemory.total`` of the segments [rows, cols] as stages holding ``in_flight``
        micro-batches (inf below the diagonal)."""
        state = self.state(zero_stage, shards)[rows, cols]
        saved = self.saved[rows, cols]
        total = (((state + (in_flight * saved + self.extra[rows, cols])) + self.working[rows, cols])
                 + self.gathered(zero_stage)[rows, cols])
        return np.where(self.upper[rows, cols], total, np.inf)

    def loose_memory_bound(self, max_zero_stage: int = 1) -> FloatArray:
        """out[s]: a lower bound on the largest per-device memory of any plan whose chain is split
        into s segments, whatever the schedule, in-flight count, DP degree or ZeRO stage up to
        ``max_zero_stage``: the exact minimum over splits of (the least model state of those
        stages as d grows + one micro-batch's activations + extra + working) per segment."""
        key = min(max_zero_stage, 3)
        if self._loose is None or self._loose[0] != key:
            floor = self.state(min(key, 2), ALL_SHARDS)  # the weights, and for stage < 2 the gradients
            if key == 3:
                floor = np.minimum(floor, self.gathered(3))
            loose = (floor + (self.saved + self.extra)) + self.working
            self._loose = (key, _min_max_by_count(loose, self.upper, self.meter))
        return self._loose[1]

    # ---------------------------------------------------------------- DP + optimizer tail

    def step_coefficient(self) -> float:
        """Optimizer-step seconds per parameter (before ZeRO sharding)."""
        return (OPTIMIZER_STEP_BYTES_PER_PARAM[self.setup.optimizer]
                / self.setup.step_bandwidth_bytes_per_s)

    def tail(self, *, pp: int, dp: int, zero_stage: int, overlap: bool) -> FloatArray:
        """Exposed once-per-iteration DP traffic + optimizer step of every segment as the whole
        of its device (one segment per device), as ``pipeline.device_tails`` computes them, in
        seconds (:meth:`device_tail` of the segment tables)."""
        return self.device_tail(pp=pp, dp=dp, zero_stage=zero_stage, overlap=overlap,
                                dense=self.dense_params, experts=self.expert_params,
                                backward=self.backward)

    def device_tail(self, *, pp: int, dp: int, zero_stage: int, overlap: bool, dense: FloatArray,
                    experts: FloatArray | None, backward: FloatArray) -> FloatArray:
        """Exposed once-per-iteration DP traffic + optimizer step of devices holding ``dense``
        dense and ``experts`` routed-expert parameters (None: no experts in the chain) whose
        backward passes of the last micro-batch take ``backward`` seconds (arrays of one shape),
        as ``pipeline.device_tails`` computes them, in seconds."""
        setup = self.setup
        cost, expert_cost = self.group_costs(pp, dp)
        shards, expert_shards = self.shards(zero_stage, dp)
        r = setup.dp_replicate
        charged_experts = experts if experts is not None else 0.0
        exposed, _, slowed = dp_tail_comm_s(cost, zero_stage=zero_stage, grad_bytes=setup.grad_bytes,
                                            dp=dp * self.cp // r, params=dense, backward_s=backward,
                                            overlap=overlap, expert_cost=expert_cost,
                                            expert_dp=self.expert_dp(dp) // r, expert_params=charged_experts,
                                            interference=setup.interference, replicas=r,
                                            replica_costs=self.group_costs(pp, dp, replicas=True),
                                            grad_sync=setup.grad_sync)
        exposed = exposed + slowed  # as pipeline.evaluate_plan's (exposed + slowed) + step
        step = (OPTIMIZER_STEP_BYTES_PER_PARAM[setup.optimizer] * dense / shards
                / setup.step_bandwidth_bytes_per_s)
        if experts is not None:  # as pipeline.device_tails adds the experts' step
            step = step + np.where(charged_experts > 0,
                                   OPTIMIZER_STEP_BYTES_PER_PARAM[setup.optimizer] * charged_experts
                                   / expert_shards / setup.step_bandwidth_bytes_per_s, 0.0)
        return np.asarray(exposed + step, dtype=np.float64)
