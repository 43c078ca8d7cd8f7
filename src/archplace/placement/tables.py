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

from archplace.placement.budget import WorkMeter
from archplace.placement.memory import (
    GRADIENT_BYTES_PER_PARAM,
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    chain_reserve_bytes,
)
from archplace.placement.plan import LayerCost, Recompute, TrainingSetup
from archplace.placement.timing import OPTIMIZER_STEP_BYTES_PER_PARAM, dp_allreduce_cost, p2p_link

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNBOUNDED = 1 << 40
"""In-flight capacity of a segment that saves no activations and fits."""

INFINITE_SHARDS = 0
"""``zero_shards`` value meaning "no optimizer state at all" (the limit of ZeRO-1 as d grows),
used for bounds only."""


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
    """Per-segment figures of one layer chain (one TP width, micro-batch size, SP flag and
    recompute policy) on one setup; see the module docstring.

    Attributes:
        n: layers in the chain.
        base: compute + recompute per micro-batch (a segment's time without its p2p), seconds.
        backward: backward + recompute per micro-batch, seconds.
        params: parameters (as float64).
        saved: bytes one micro-batch keeps for the backward pass; extra: bytes re-materialised
            under full recomputation (0 otherwise); working: largest working set.
    """

    def __init__(self, layers: Sequence[LayerCost], setup: TrainingSetup, tp: int,
                 recompute: Recompute, sp: bool = False, meter: WorkMeter | None = None) -> None:
        n = len(layers)
        self.n = n
        self.meter = meter
        if meter is not None:
            meter.charge(8 * n * n)  # the cumulative sums below
        self.setup = setup
        self.tp = tp
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
        int_params = np.array([layer.params for layer in layers], dtype=np.int64)
        self.params: FloatArray = np.cumsum(np.where(upper, int_params[None, :], 0),
                                            axis=1).astype(np.float64)
        self.saved: FloatArray = seg_sum(column([layer.saved_bytes(recompute) for layer in layers]))
        self.extra: FloatArray = (seg_max(column([layer.activation_bytes for layer in layers]))
                                  if recompute is Recompute.FULL else np.zeros((n, n)))
        self.working: FloatArray = seg_max(column([layer.working_bytes for layer in layers]))
        self.reserve = chain_reserve_bytes(layers, recompute)
        self._mid: dict[tuple[tuple[float, float] | None, tuple[float, float] | None],
                        FloatArray] = {}
        self._state: dict[int, FloatArray] = {}
        self._kmax: dict[tuple[int, int], IntArray] = {}
        self._t_bound: FloatArray | None = None
        self._loose: FloatArray | None = None

    def nbytes(self) -> int:
        """Bytes of the tables held, caches included."""
        arrays = [self.upper, self.base, self.backward, self.boundary, self.params, self.saved, self.extra,
                  self.working, *self._mid.values(), *self._state.values(), *self._kmax.values()]
        return sum(array.nbytes for array in arrays)

    def drop_caches(self) -> None:
        """Forget the cached time, state and capacity tables (rebuilt when next asked for)."""
        self._mid.clear()
        self._state.clear()
        self._kmax.clear()

    # ---------------------------------------------------------------- time

    def segment_time(self, link_in: tuple[float, float] | None,
                     link_out: tuple[float, float] | None) -> FloatArray:
        """Time per micro-batch of every segment [i, e]: base + (p2p_in + p2p_out), where
        p2p_in = 2 (alpha + boundary[i - 1] / beta) on ``link_in`` (0 for the first segment,
        link_in None) and p2p_out = 2 (alpha + boundary[e] / beta) on ``link_out`` (0 for the
        last segment, link_out None), as ``pipeline.stage_times`` adds them."""
        key = (link_in, link_out)
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
            table = self.base + (p2p_in[:, None] + p2p_out[None, :])
            self._mid[key] = table
        return table

    def position_links(self, pp: int, chunks: int) -> list[tuple[float, float] | None]:
        """Link after each of the pp * chunks segments (None for the last), as ``p2p_link``."""
        cluster = self.setup.cluster
        scatter = not self.sp
        neighbour = p2p_link(cluster, tp=self.tp, pp=pp, segment=0, scatter_gather=scatter)
        wrap = p2p_link(cluster, tp=self.tp, pp=pp, segment=pp - 1, chunks=2, scatter_gather=scatter)
        s = pp * chunks
        return [None if c == s - 1 else wrap if chunks > 1 and c % pp == pp - 1 else neighbour
                for c in range(s)]

    def position_times(self, pp: int, chunks: int) -> list[FloatArray]:
        """Time table of every segment position c of a pp * chunks split: its input boundary's
        link is the one after position c - 1, its output boundary's the one after c."""
        links = self.position_links(pp, chunks)
        return [self.segment_time(links[c - 1] if c > 0 else None, links[c])
                for c in range(len(links))]

    def time_bound(self) -> FloatArray:
        """out[s]: a lower bound on the bottleneck segment time of any split into s segments
        (the exact minimum of ``base``, ignoring memory and p2p)."""
        if self._t_bound is None:
            self._t_bound = _min_max_by_count(self.base, self.upper, self.meter)
        return self._t_bound

    # ---------------------------------------------------------------- memory

    def state(self, zero_shards: int) -> FloatArray:
        """Model-state bytes (weights + gradients + optimizer / zero_shards) of every segment."""
        table = self._state.get(zero_shards)
        if table is None:
            p = self.params
            optimizer = OPTIMIZER_STATE_BYTES_PER_PARAM[self.setup.optimizer]
            opt = (np.zeros_like(p) if zero_shards == INFINITE_SHARDS
                   else optimizer * p / zero_shards)
            table = (WEIGHT_BYTES_PER_PARAM * p + GRADIENT_BYTES_PER_PARAM * p) + opt
            self._state[zero_shards] = table
        return table

    def capacity(self, zero_shards: int, chunks: int = 1) -> IntArray:
        """Largest in-flight count with which each segment fits in HBM (0: none; UNBOUNDED when
        it saves nothing and fits; -1 below the diagonal).

        chunks = 1: ``StageMemory.total`` = (state + (k saved + extra)) + working <= HBM.
        chunks = v > 1: the interleaved charge ((v state + q saved) + extra*) + working* <= HBM.
        Computed from a division and corrected against the exact expression, so it is exact.
        """
        key = (zero_shards, chunks)
        table = self._kmax.get(key)
        if table is not None:
            return table
        hbm = self.setup.hbm_bytes
        saved = self.saved
        state = self.state(zero_shards)
        if chunks == 1:
            extra, working = self.extra, self.working

            def total(k: FloatArray) -> FloatArray:
                return (state + (k * saved + extra)) + working
            rest = (state + extra) + working
        else:
            e_star, w_star = self.reserve
            scaled = chunks * state

            def total(k: FloatArray) -> FloatArray:
                return ((scaled + k * saved) + e_star) + w_star
            rest = (scaled + e_star) + w_star
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

    def memory(self, in_flight: int, zero_shards: int, chunks: int = 1,
               rows: slice = slice(None), cols: slice = slice(None)) -> FloatArray:
        """Per-device bytes of the segments [rows, cols] holding ``in_flight``
        (chunk-)micro-batches: ``StageMemory.total`` for chunks = 1, the interleaved charge
        otherwise (inf below the diagonal)."""
        state = self.state(zero_shards)[rows, cols]
        saved = self.saved[rows, cols]
        if chunks == 1:
            total = (state + (in_flight * saved + self.extra[rows, cols])) + self.working[rows, cols]
        else:
            e_star, w_star = self.reserve
            total = ((chunks * state + in_flight * saved) + e_star) + w_star
        return np.where(self.upper[rows, cols], total, np.inf)

    def loose_memory_bound(self) -> FloatArray:
        """out[s]: a lower bound on the largest per-device memory of any plan whose chain is split
        into s segments, whatever the schedule, in-flight count or ZeRO sharding: the exact
        minimum over splits of (weights + gradients + one micro-batch's activations + extra +
        working) per segment."""
        if self._loose is None:
            loose = (self.state(INFINITE_SHARDS) + (self.saved + self.extra)) + self.working
            self._loose = _min_max_by_count(loose, self.upper, self.meter)
        return self._loose

    # ---------------------------------------------------------------- DP + optimizer tail

    def step_coefficient(self) -> float:
        """Optimizer-step seconds per parameter (before ZeRO sharding)."""
        return (OPTIMIZER_STEP_BYTES_PER_PARAM[self.setup.optimizer]
                / self.setup.hbm_bandwidth_bytes_per_s)

    def tail(self, *, pp: int, dp: int, chunks: int, zero: bool, overlap: bool) -> FloatArray:
        """Exposed DP reduction + optimizer step of every segment as charged to its device
        (v copies of the segment), as ``pipeline.device_tails`` computes them, in seconds."""
        charged = chunks * self.params if chunks > 1 else self.params
        setup = self.setup
        if dp == 1:
            allreduce = np.zeros_like(charged)
        else:
            const_s, per_byte_s = dp_allreduce_cost(setup.cluster, tp=self.tp, pp=pp, dp=dp)
            allreduce = const_s + per_byte_s * (GRADIENT_BYTES_PER_PARAM * charged)
        if overlap:
            window = chunks * self.backward if chunks > 1 else self.backward
            exposed = np.maximum(0.0, allreduce - window)
        else:
            exposed = allreduce
        shards = dp if zero else 1
        step = (OPTIMIZER_STEP_BYTES_PER_PARAM[setup.optimizer] * charged / shards
                / setup.hbm_bandwidth_bytes_per_s)
        return exposed + step
