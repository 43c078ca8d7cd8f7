"""Exact best-first search over parallel plans (the engine of ``solver.plan_search``).

A *candidate* fixes everything but the stage split: family (TP width t, micro-batch b, SP flag,
CP degree c, EP degree e, expert-TP width r, recompute policy -- one table of layer costs),
schedule and chunks v, pipeline depth p, DP degree d (hence m micro-batches; t c p d devices,
r e dividing t c d), ZeRO stage and DP overlap. Its best iteration time is

    min over splits into s = p v segments of  K * max_c T_c + max_c Y_c,   K = v m + p - 1,

subject to every segment fitting in HBM at its position (in-flight count), where T_c is the
segment's time per micro-batch (position-dependent only through its p2p link) and Y_c its DP +
optimizer tail (:meth:`SegmentTables.tail`). The minimum is attained at a point of the Pareto
front of (max T, max Y) over feasible splits, and the front is enumerated exactly: tau = the
least max T (a min-max DP, :mod:`archplace.placement.kernels`) among splits with max Y below the
previous point's, then y = the least max Y among splits with max T <= tau, and so on. Without
overlap Y is a non-decreasing function of the segment's parameter count, so (for ZeRO stages 0
and 1 reducing the gradients once per iteration, whose segment times do not depend on d) the
front of (max T, max params) is computed once per memory configuration and serves every d, ZeRO
setting and the no-overlap objective; with overlap Y also depends on the segment's backward
time, and with ZeRO-2/3 T depends on d (the per-layer collectives), as it does at stages 0 and 1
reducing every micro-batch (``setup.grad_sync`` micro_batch: the reduction is in T), so the front
of (max T, max Y) is enumerated per candidate. Chains with
routed-expert parameters are always enumerated per candidate: their Y adds the dense parameters'
tail (over the DP x CP group) and the experts' (over the expert-data-parallel group), a function
of two parameter counts, not of their sum. The p2p links, and so T, depend on d in the
"tp-cp-ep-dp-pp" rank order (pipeline neighbours t c d ranks apart): the shared fronts are keyed
by the links as well.

Interleaved candidates (v >= 2) are split as Megatron-LM requires (:func:`interleaved_splits`:
blocks evenly over the p v chunks), at most one or two splits per candidate, each scored
directly: a device's exact memory sums its non-adjacent chunks at every step of the schedule
(:func:`archplace.placement.memory.interleaved_device_memory`), which no DP over contiguous
segments can decompose.

Candidates are visited in order of a lower bound (best first), refined lazily: (0) the chain's
total time over s and its largest layer, and the smallest possible parameter count of the
largest device, (1) the exact min-max of time ignoring memory and p2p and a memory screen that
holds for every schedule (:meth:`SegmentTables.loose_memory_bound`), (2) the exact memory-aware
tau of the (max T, max params) front; levels 0 and 1 also hold the transfers no split avoids
(the pipeline sends, ZeRO-2/3's per-layer collectives, the bucketed reduction left after the
last backward pass: :meth:`~archplace.placement.block_bounds.BlockBounds.transfer_floor` and
:meth:`~archplace.placement.block_bounds.BlockBounds.overlap_floor`), which on slow links
decide; a block (one family and variant) enters with a scalar
floor of its level-0 bounds and computes them only when that floor surfaces
(:class:`~archplace.placement.block_bounds.BlockBounds`), in the same visit order. The search
stops when the next bound exceeds the k-th best iteration time found (with a relative slack of
1e-9 for rounding), so the k best candidates are exact. Two dominance rules skip work: memory
needs never grow with d, so a configuration that does not fit at some d does not fit at a
smaller d; and a ZeRO stage's masks equal to those of d = 1 (and to those of infinitely many
replicas) share their fronts.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from archplace.placement.block_bounds import BlockBounds
from archplace.placement.budget import WorkMeter, check_chain_length
from archplace.placement.candidates import (
    SLACK,
    Candidate,
    CandidateBlock,
    CostFamily,
    FamilyState,
    Found,
    Variant,
    interleaved_splits,
)
from archplace.placement.plan import (
    RECOMPUTE_ORDER,
    SCHEDULE_ORDER,
    PipelineSchedule,
    TrainingSetup,
)
from archplace.placement.resident import ResidentTables
from archplace.placement.scoring import CandidateScorer
from archplace.placement.tables import SegmentTables
from archplace.placement.timing import dp_degrees, smallest_boundary_bytes

__all__ = ["CostFamily", "Search", "Variant"]


class Search:
    """Best-first search of the top-k candidates (see the module docstring)."""

    def __init__(self, families: Sequence[CostFamily], variants: Sequence[Variant],
                 setup: TrainingSetup, top_k: int) -> None:
        self.setup = setup
        self.top_k = top_k
        self.variants = list(variants)
        self.states = []
        longest = max((len(fam.layers) for fam in families), default=0)
        check_chain_length(longest)
        self.meter = WorkMeter(layers=longest, devices=setup.cluster.devices)
        self.tables = ResidentTables(setup, self.meter)
        self.bounds = BlockBounds(setup)
        # the parameter figures of a chain, shared by its families (one per recompute policy)
        chain_figures: dict[tuple[int, ...], tuple[float, float, bool, float, float, float, float]] = {}
        for fam in families:
            state = FamilyState(fam)
            base = [layer.fwd_s + layer.bwd_s + layer.recompute_s(fam.recompute)
                    for layer in fam.layers]
            state.layer_base_max = max(base)
            state.layer_base_sum = float(sum(base))
            chain = tuple(map(id, fam.layers))  # the layers outlive the search
            figures = chain_figures.get(chain)
            if figures is None:
                params = [layer.params for layer in fam.layers]
                experts = [layer.expert_params for layer in fam.layers]
                dense = [total - expert for total, expert in zip(params, experts, strict=True)]
                figures = (float(max(params)), float(sum(params)), any(experts), float(max(dense)),
                           float(sum(dense)), float(max(experts)), float(sum(experts)))
                chain_figures[chain] = figures
            (state.layer_params_max, state.params_sum, state.experts, state.dense_max, state.dense_sum,
             state.expert_max, state.expert_sum) = figures
            state.boundary_min = smallest_boundary_bytes(fam.layers)
            self.states.append(state)
        self._ranks = {variant: self._variant_rank(variant) for variant in self.variants}
        self._interleavable: dict[tuple[int, int, int], npt.NDArray[np.bool_]] = {}
        self.max_zero_stage = max((variant.zero_stage for variant in self.variants), default=0)
        self.found: list[Found] = []
        self.cutoff = np.inf
        self.any_candidate = False
        self.scorer = CandidateScorer(self.states, setup, self.tables, self.bounds, self.meter)

    # ------------------------------------------------------------------ candidates

    def grid(self, fam: CostFamily, n: int, variant: Variant) -> tuple[npt.NDArray[np.int64], ...]:
        """(p, d, m) of every valid candidate of a family and schedule (see
        ``timing.micro_batch_count`` for the micro-batch rule; interleaved, only depths with a
        split of :func:`interleaved_splits`; with hybrid sharding's r = ``setup.dp_replicate``
        replicas, only d that r divides, etp * ep dividing tp * cp * d / r)."""
        setup = self.setup
        r = setup.dp_replicate
        devices = setup.cluster.devices
        v = variant.chunks
        interleaved = variant.schedule is PipelineSchedule.INTERLEAVED
        width = fam.tp * fam.cp  # devices of one pipeline stage of one replica
        depths = np.arange(2 if interleaved else 1, min(n // v, devices // width) + 1)
        if interleaved:  # only depths with a block-uniform split (``interleaved_splits``)
            key = (n, v, len(depths))
            splittable = self._interleavable.get(key)
            if splittable is None:
                splittable = np.array([bool(interleaved_splits(n, int(p) * v)) for p in depths], dtype=bool)
                self._interleavable[key] = splittable
            depths = depths[splittable].astype(np.int64)
        g = setup.global_batch
        if setup.dp_must_divide_batch:  # d among the divisors of g / b: a small grid on any cluster
            widths = np.array(dp_degrees(setup, fam.micro_batch, devices // width), dtype=np.int64)
            p = np.repeat(depths, len(widths)).astype(np.int64)
            d = np.tile(widths, len(depths))
            m = (g // fam.micro_batch) // d if len(d) else d
            valid = width * p * d <= devices
            if interleaved:  # Megatron-Core runs any m >= pp (timing.micro_batch_group_size)
                valid &= m >= p
            if fam.ep * fam.etp > 1 or r > 1:  # the expert ranks are folded into each replica's ranks
                valid &= (d % r == 0) & fam.expert_degree_fits(d // r)
            return p[valid], d[valid], m[valid]
        widths = devices // (width * depths)  # padded batches: every d up to the devices
        p = np.repeat(depths, widths).astype(np.int64)
        d = (np.arange(len(p)) - np.repeat(np.cumsum(widths) - widths, widths) + 1).astype(np.int64)
        m = -(-g // (fam.micro_batch * d))
        if interleaved:
            m = np.maximum(m, p)
        if fam.ep * fam.etp > 1 or r > 1:
            keep = (d % r == 0) & fam.expert_degree_fits(d // r)
            p, d, m = p[keep], d[keep], m[keep]
        return p, d, m

    def run(self) -> list[Found]:
        """Visit candidates best bound first; returns every found optimum within the cutoff.

        Blocks (one family x variant) enter the heap with their level-0 bounds; the first time a
        block surfaces its bounds are refined to level 1 at once (vectorised) and it re-enters.
        """
        with np.errstate(over="ignore"):  # an overflowing bound is +inf, which orders correctly
            return self._run()

    def _run(self) -> list[Found]:
        heap: list[tuple[float, int, int, int]] = []
        blocks: list[CandidateBlock] = []
        grids: dict[tuple[int, int, int, int, int, int, bool, int],
                    tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], int]] = {}
        grid_ids: dict[tuple[bytes, bytes, bytes], int] = {}  # distinct (p, d, m) contents
        counter = itertools.count()
        # the grid depends on the schedule only through whether it interleaves, the floor of a
        # block (``BlockBounds.floor0``) on the variant only through its chunks and ZeRO stage 0
        shapes = [(variant.schedule is PipelineSchedule.INTERLEAVED, variant.chunks)
                  for variant in self.variants]
        ranks = [self._ranks[variant] for variant in self.variants]
        for f, state in enumerate(self.states):
            fam = state.family
            n = len(fam.layers)
            family_key = (fam.tp, fam.micro_batch, fam.cp, fam.ep, fam.etp, n)
            floors: dict[tuple[int, int, bool], float] = {}
            for variant, shape, rank in zip(self.variants, shapes, ranks, strict=True):
                key = (*family_key, *shape)
                found = grids.get(key)
                if found is None:
                    p, d, m = self.grid(fam, n, variant)
                    content = (p.tobytes(), d.tobytes(), m.tobytes())
                    found = grids[key] = (p, d, m, grid_ids.setdefault(content, len(grid_ids)))
                p, d, m, grid = found
                if not len(p):
                    continue
                self.any_candidate = True
                blocks.append(CandidateBlock(f, variant, p, d, m, None, grid=grid))
                floor_key = (grid, variant.chunks, variant.zero_stage == 0)
                floor = floors.get(floor_key)
                if floor is None:
                    floor = floors[floor_key] = self.bounds.floor0(state, variant, p, m, grid)
                heap.append((floor, rank, next(counter), len(blocks) - 1))
        heapq.heapify(heap)  # the keys are distinct (counter): the pops' order is the keys'
        while heap:
            next_bound, rank, count, b = heapq.heappop(heap)
            if next_bound > self.cutoff * (1 + SLACK):
                break
            block = blocks[b]
            if block.bound is None:  # level-0 bounds, computed when the block's floor surfaces
                state = self.states[block.family]
                block.bound = self.bounds.bound0(state, block.variant, block.p, block.d, block.m, block.grid)
                # the key the block would have entered with: the heap pops as if it had
                heapq.heappush(heap, (float(block.bound.min()), rank, count, b))
                continue
            if not block.refined:
                self._refine(block)
            else:
                i = block.next
                cand = Candidate(block.family, block.variant, int(block.p[i]), int(block.d[i]),
                                 int(block.m[i]))
                scored = self.scorer.score(cand, self.cutoff * (1 + SLACK))
                if scored is not None:
                    self._record(cand, *scored)
                block.next = i + 1
            if block.next < len(block.p):
                heapq.heappush(heap, (float(block.bound[block.next]), rank, next(counter), b))
        limit = self.cutoff * (1 + SLACK)
        return [found for found in self.found if found.value <= limit]

    def _refine(self, block: CandidateBlock) -> None:
        """Level-1 bounds of a whole block: drop the candidates no split of which can fit (loose
        memory screen) and bound the rest by K * (the larger of the exact min-max time ignoring
        memory and p2p over v, and the transfer floor of :meth:`BlockBounds.transfer_floor`) + the tail
        bound; sort by the new bound."""
        state = self.states[block.family]
        tab = self.tables.of(state)
        variant = block.variant
        v = variant.chunks
        s = block.p * v
        keep = tab.loose_memory_bound(self.max_zero_stage)[s] <= self.setup.hbm_bytes * (1 + 1e-12)
        p, d, m = block.p[keep], block.d[keep], block.m[keep]
        params = np.maximum(state.layer_params_max, state.params_sum / p)
        # a device's pace is the mean of its v segments, one of them at least the min-max
        t_low = np.maximum(tab.time_bound()[p * v] / v, self.bounds.transfer_floor(state, variant, p, d))
        bound = ((v * m + p - 1) * t_low + self.bounds.tail_bound(state, variant, p, d, params)
                 + self.bounds.overlap_floor(state, variant, p, d, params, t_low))
        order = np.lexsort((p, p * d, bound))
        block.p, block.d, block.m, block.bound = p[order], d[order], m[order], bound[order]
        block.refined = True
        block.next = 0

    @staticmethod
    def _variant_rank(variant: Variant) -> int:
        # memory-frugal options first at equal bounds: higher ZeRO stages, overlap, then 1F1B
        return ((3 - variant.zero_stage) * 2 + (0 if variant.overlap else 1)) * 3 \
            + SCHEDULE_ORDER.index(variant.schedule)

    def _record(self, cand: Candidate, best: float, points: list[tuple[float, float]]) -> None:
        fam, variant, p = self.states[cand.family].family, cand.variant, cand.p
        rank = (fam.tp * fam.cp * p * cand.d, p, fam.tp, fam.cp, fam.ep, fam.etp, variant.chunks,
                fam.micro_batch, RECOMPUTE_ORDER.index(fam.recompute), SCHEDULE_ORDER.index(variant.schedule),
                fam.sp, variant.zero_stage, variant.overlap)
        self.found.append(Found(best, rank, cand, points))
        self._update_cutoff()

    def _update_cutoff(self) -> None:
        if len(self.found) < self.top_k:
            return
        values = sorted(found.value for found in self.found)
        self.cutoff = values[self.top_k - 1]
        limit = self.cutoff * (1 + SLACK)
        self.found = [found for found in self.found if found.value <= limit]

    def tables_of(self, family: int) -> SegmentTables:
        """The segment tables of family ``family`` (built on first use)."""
        return self.tables.of(self.states[family])
