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
and 1, whose segment times do not depend on d) the front of (max T, max params) is computed once
per memory configuration and serves every d, ZeRO setting and the no-overlap objective; with
overlap Y also depends on the segment's backward time, and with ZeRO-2/3 T depends on d (the
per-layer collectives), so the front of (max T, max Y) is enumerated per candidate. Chains with
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
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from archplace.placement.block_bounds import BlockBounds
from archplace.placement.budget import TABLE_BYTES, WorkMeter, check_chain_length, dp_cells
from archplace.placement.candidates import (
    SLACK,
    TIE_RTOL,
    CandidateBlock,
    CostFamily,
    FamilyState,
    Found,
    Variant,
    in_flight_per_position,
    interleaved_splits,
)
from archplace.placement.kernels import first_split, fits_greedily, min_max
from archplace.placement.layout import RankLayout
from archplace.placement.memory import interleaved_device_memory, sequential_sum
from archplace.placement.plan import (
    RECOMPUTE_ORDER,
    SCHEDULE_ORDER,
    PipelineSchedule,
    Plan,
    TrainingSetup,
)
from archplace.placement.tables import ALL_SHARDS, NO_SHARDS, FloatArray, SegmentTables, Shards
from archplace.placement.timing import dp_degrees, optimizer_step_time_s, smallest_boundary_bytes
from archplace.placement.zero import dp_tail_comm_s


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
        self._resident: list[FamilyState] = []  # families holding tables, least recently used first
        self._held = 0  # bytes of their tables
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
            if interleaved:
                valid &= m % p == 0
            if fam.ep * fam.etp > 1 or r > 1:  # the expert ranks are folded into each replica's ranks
                valid &= (d % r == 0) & fam.expert_degree_fits(d // r)
            return p[valid], d[valid], m[valid]
        widths = devices // (width * depths)  # padded batches: every d up to the devices
        p = np.repeat(depths, widths).astype(np.int64)
        d = (np.arange(len(p)) - np.repeat(np.cumsum(widths) - widths, widths) + 1).astype(np.int64)
        m = -(-g // (fam.micro_batch * d))
        if interleaved:
            m = p * -(-m // p)
        if fam.ep * fam.etp > 1 or r > 1:
            keep = (d % r == 0) & fam.expert_degree_fits(d // r)
            p, d, m = p[keep], d[keep], m[keep]
        return p, d, m

    def _max_shards(self, state: FamilyState, zero_stage: int, d: int) -> int:
        """The larger ZeRO shard count of a candidate's dense and expert parameters (1 at stage 0)."""
        if zero_stage == 0:
            return 1
        fam = state.family
        r = self.setup.dp_replicate
        dense = d * fam.cp // r
        return max(dense, fam.expert_group(d) // r) if state.experts else dense

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
                self._visit(block.family, block.variant, int(block.p[i]), int(block.d[i]),
                            int(block.m[i]))
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
        tab = self._tables(state)
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

    # ------------------------------------------------------------------ one candidate

    def tables_of(self, family: int) -> SegmentTables:
        """The segment tables of family ``family`` (built on first use)."""
        return self._tables(self.states[family])

    def _tables(self, state: FamilyState) -> SegmentTables:
        """The family's tables, built on first use; the tables of all families together are kept
        within :data:`~archplace.placement.budget.TABLE_BYTES` by evicting the least recently
        used (and, if one family's alone exceed it, its caches)."""
        resident = self._resident
        if resident:  # the family used last may have grown its caches since
            self._account(resident[-1])
        if state.tables is None:
            fam = state.family
            state.tables = SegmentTables(fam.layers, self.setup, fam.tp, fam.recompute, fam.sp, self.meter,
                                         cp=fam.cp, ep=fam.ep, etp=fam.etp)
        if not resident or resident[-1] is not state:
            at = next((i for i, other in enumerate(resident) if other is state), None)
            if at is not None:
                del resident[at]
            resident.append(state)
        self._account(state)
        while self._held > TABLE_BYTES and len(resident) > 1:
            evicted = resident.pop(0)
            self._held -= evicted.table_bytes
            evicted.tables, evicted.table_bytes = None, 0
        if self._held > TABLE_BYTES:
            state.tables.drop_caches()
            self._account(state)
        return state.tables

    def _account(self, state: FamilyState) -> None:
        """Bring the count of table bytes held up to date for ``state``."""
        now = state.tables.nbytes() if state.tables is not None else 0
        self._held += now - state.table_bytes
        state.table_bytes = now

    def _visit(self, f: int, variant: Variant, p: int, d: int, m: int) -> None:
        state = self.states[f]
        group = (variant.schedule, variant.chunks, p, variant.zero_stage)
        if state.infeasible_at.get(group, 0) >= d:
            return
        tab = self._tables(state)
        v = variant.chunks
        k_factor = v * m + p - 1
        limit = self.cutoff * (1 + SLACK)
        zs = variant.zero_stage
        if v > 1:
            found = self._interleaved(f, variant, p, d, m)
            if found is None:
                state.infeasible_at[group] = max(d, state.infeasible_at.get(group, 0))
                return
            best, points = found
            if best <= limit:
                self._record(f, variant, p, d, m, best, points)
            return
        in_flight = in_flight_per_position(variant.schedule, p, m, v)
        shards = self._canonical_shards(state, tab, zs, tab.shards(zs, d), max(in_flight))
        links = tuple(tab.position_links(p, v, d))
        mem_key = (variant.schedule, v, p, tuple(in_flight), zs, shards, links)
        front = state.fronts.get(mem_key)
        if front is None:
            if not _fits(tab.capacity(zs, shards), in_flight):
                front = []
            else:
                front = self._front(tab, tab.position_times(p, v, dp=d), in_flight, zs, shards,
                                    tab.params, None)
            state.fronts[mem_key] = front
        if not front:
            state.infeasible_at[group] = max(d, state.infeasible_at.get(group, 0))
            return
        if not self._per_candidate(state, variant):
            values = [k_factor * tau + self._tail_of(state, variant, p, d, v * pmax)
                      for tau, pmax in front]
            best = min(values)
            points = [(tau, pmax) for (tau, pmax), value in zip(front, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]
        else:
            # the front without the ZeRO-2/3 collectives bounds the objective from below
            step = optimizer_step_time_s(1.0, self.setup.step_bandwidth_bytes_per_s,
                                         self.setup.optimizer) / self._max_shards(state, zs, d)
            if min(k_factor * tau + step * v * pmax for tau, pmax in front) > limit:
                return
            tail = tab.tail(pp=p, dp=d, zero_stage=zs, overlap=variant.overlap)
            floor = float(tail[tab.upper].min())

            def stop(tau: float) -> bool:
                return k_factor * tau + floor > self.cutoff * (1 + SLACK)
            exact = self._front(tab, tab.position_times(p, v, zs, d), in_flight, zs, shards, tail, stop)
            if not exact:
                return
            values = [k_factor * tau + y for tau, y in exact]
            best = min(values)
            points = [pt for pt, value in zip(exact, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]
        if best > limit:
            return
        self._record(f, variant, p, d, m, best, points)

    def _record(self, f: int, variant: Variant, p: int, d: int, m: int, best: float,
                points: list[tuple[float, float]]) -> None:
        fam = self.states[f].family
        rank = (fam.tp * fam.cp * p * d, p, fam.tp, fam.cp, fam.ep, fam.etp, variant.chunks, fam.micro_batch,
                RECOMPUTE_ORDER.index(fam.recompute), SCHEDULE_ORDER.index(variant.schedule), fam.sp,
                variant.zero_stage, variant.overlap)
        self.found.append(Found(best, rank, f, variant, p, d, m, points))
        self._update_cutoff()

    def interleaved_fitting(self, f: int, variant: Variant, p: int, d: int, m: int
                            ) -> list[tuple[tuple[int, int], ...]]:
        """The splits of :func:`interleaved_splits` with which every device fits in HBM (exact
        device memory, as ``evaluate_plan`` computes it), ascending."""
        state = self.states[f]
        fam = state.family
        zs = variant.zero_stage
        key = (p, variant.chunks, m, zs, d if zs else 1)  # cp, ep and etp are the family's
        fitting = state.interleaved.get(key)
        if fitting is None:
            fitting = [stages for stages in interleaved_splits(len(fam.layers), p * variant.chunks)
                       if max(self.interleaved_peaks(f, variant, p, d, m, stages)) <= self.setup.hbm_bytes]
            state.interleaved[key] = fitting
        return fitting

    def interleaved_peaks(self, f: int, variant: Variant, p: int, d: int, m: int,
                          stages: tuple[tuple[int, int], ...]) -> list[float]:
        """``StageMemory.total`` of every device of an interleaved plan with ``stages``."""
        fam = self.states[f].family
        layers = fam.layers
        self.meter.charge(4 * len(layers) * variant.chunks * p)
        layout = RankLayout(fam.tp, fam.cp, fam.ep, p, d, self.setup.rank_order, fam.etp,
                            self.setup.dp_replicate)
        return [interleaved_device_memory(
            [layers[a:e + 1] for a, e in stages[j::p]], device=j, pp=p, micro_batches=m,
            recompute=fam.recompute, optimizer=self.setup.optimizer,
            zero_stage=variant.zero_stage, dp=layout.dense_shards, grad_bytes=self.setup.grad_bytes,
            expert_dp=layout.expert_shards).total
            for j in range(p)]

    def _interleaved_points(self, f: int, variant: Variant, p: int, d: int, m: int
                            ) -> list[tuple[tuple[float, float], tuple[tuple[int, int], ...]]]:
        """(pace, second figure) of every fitting interleaved split: the pace max_j T_j, T_j the
        mean time of device j's segments (``pipeline.device_paces``), and the largest device's
        tail (per candidate) or parameter count, each device's segments summed (as
        ``pipeline.device_tails``)."""
        state = self.states[f]
        tab = self._tables(state)
        v, zs = variant.chunks, variant.zero_stage
        times = tab.position_times(p, v, zs, d)
        per_candidate = self._per_candidate(state, variant)
        out = []
        for stages in self.interleaved_fitting(f, variant, p, d, m):
            devices = [stages[j::p] for j in range(p)]
            tau = max(sequential_sum(float(times[j + k * p][a, e]) for k, (a, e) in enumerate(own)) / v
                      for j, own in enumerate(devices))

            def summed(table: FloatArray, devices: list[tuple[tuple[int, int], ...]] = devices) -> FloatArray:
                return np.array([sequential_sum(float(table[a, e]) for a, e in own) for own in devices])
            if per_candidate:
                y = float(np.max(tab.device_tail(
                    pp=p, dp=d, zero_stage=zs, overlap=variant.overlap, dense=summed(tab.dense_params),
                    experts=None if tab.expert_params is None else summed(tab.expert_params),
                    backward=summed(tab.backward))))
            else:
                y = float(np.max(summed(tab.params)))
            out.append(((tau, y), stages))
        return out

    def _interleaved(self, f: int, variant: Variant, p: int, d: int, m: int
                     ) -> tuple[float, list[tuple[float, float]]] | None:
        """The best objective of an interleaved candidate and its tying points, or None when no
        split fits."""
        scored = self._interleaved_points(f, variant, p, d, m)
        if not scored:
            return None
        state = self.states[f]
        k_factor = variant.chunks * m + p - 1
        per_candidate = self._per_candidate(state, variant)
        values = [k_factor * tau + (y if per_candidate else self._tail_of(state, variant, p, d, y))
                  for (tau, y), _ in scored]
        best = min(values)
        return best, [point for (point, _), value in zip(scored, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]

    def _update_cutoff(self) -> None:
        if len(self.found) < self.top_k:
            return
        values = sorted(found.value for found in self.found)
        self.cutoff = values[self.top_k - 1]
        limit = self.cutoff * (1 + SLACK)
        self.found = [found for found in self.found if found.value <= limit]

    @staticmethod
    def _per_candidate(state: FamilyState, variant: Variant) -> bool:
        """Whether the front of (max T, max Y) must be enumerated per (p, d): the variant's
        rule, and always for chains with routed experts, whose tail is a function of two
        parameter counts (dense and expert), not of their sum."""
        return variant.per_candidate or state.experts

    def _tail_of(self, state: FamilyState, variant: Variant, p: int, d: int, params: float) -> float:
        """The tail of a device with ``params`` (charged) parameters without overlap, as
        ``SegmentTables.tail`` computes it (ZeRO stages 0 and 1, chains without experts)."""
        setup = self.setup
        cost = self.bounds.costs(state, p, d)[0]
        dense = d * state.family.cp // setup.dp_replicate
        exposed = dp_tail_comm_s(cost, zero_stage=variant.zero_stage, grad_bytes=setup.grad_bytes,
                                 dp=dense, params=float(params), backward_s=0.0, overlap=False,
                                 replicas=setup.dp_replicate,
                                 replica_costs=self.bounds.costs(state, p, d, replicas=True))[0]
        return float(exposed + optimizer_step_time_s(params, setup.step_bandwidth_bytes_per_s,
                                                     setup.optimizer, dense if variant.zero_stage else 1))

    def _canonical_shards(self, state: FamilyState, tab: SegmentTables, zero_stage: int,
                          shards: Shards, k_top: int) -> Shards:
        """``shards``, or (1, 1) when the stage's capacity table at ``shards`` replicas equals the
        one at 1 replica for every in-flight count up to k_top (then they share fronts), decided
        through the sandwich 1 replica <= shards <= infinitely many (memory never grows with
        either shard count)."""
        if shards == NO_SHARDS:
            return NO_SHARDS
        key = (k_top, zero_stage)
        verdict = state.canonical.get(key)
        if verdict is None:
            low = np.minimum(tab.capacity(zero_stage, NO_SHARDS), k_top)
            high = np.minimum(tab.capacity(zero_stage, ALL_SHARDS), k_top)
            verdict = 1 if np.array_equal(low, high) else 0
            state.canonical[key] = verdict
        return NO_SHARDS if verdict == 1 else shards

    def _front(self, tab: SegmentTables, times: Sequence[FloatArray], in_flight: Sequence[int],
               zero_stage: int, shards: Shards, second: FloatArray,
               stop: Callable[[float], bool] | None) -> list[tuple[float, float]]:
        """The Pareto front of (max segment time, max ``second``) over fitting splits, as
        (tau, y) points with increasing tau, ``times`` the time table of every position;
        enumeration stops early when ``stop(tau)``."""
        n, s = tab.n, len(times)
        capacity = tab.capacity(zero_stage, shards)
        points: list[tuple[float, float]] = []
        y_cap = np.inf
        while True:
            def t_block(c: int, rows: slice, cols: slice, y_cap: float = y_cap) -> FloatArray:
                ok = (capacity[rows, cols] >= in_flight[c]) & (second[rows, cols] < y_cap)
                return np.where(ok, times[c][rows, cols], np.inf)
            self.meter.charge(dp_cells(n, s))
            tau = min_max(t_block, n, s)
            if not np.isfinite(tau) or (stop is not None and stop(tau)):
                break

            def y_block(c: int, rows: slice, cols: slice, tau: float = tau) -> FloatArray:
                ok = (capacity[rows, cols] >= in_flight[c]) & (times[c][rows, cols] <= tau)
                return np.where(ok, second[rows, cols], np.inf)
            self.meter.charge(dp_cells(n, s))
            y = min_max(y_block, n, s)
            points.append((tau, y))
            y_cap = y
        return points

    def split(self, found: Found, point: tuple[float, float]) -> tuple[tuple[int, int], ...]:
        """The lexicographically smallest split attaining ``point`` of a found candidate, up to
        rounding: within :data:`~archplace.placement.candidates.TIE_RTOL` of it in both figures
        (two splits whose segment sums differ by an ulp, the tables' cumulative sums taken in
        another order, are one tie, as the iteration times they evaluate to are)."""
        tab = self._tables(self.states[found.family])
        variant = found.variant
        v = variant.chunks
        cap_tau, cap_y = (x * (1.0 + TIE_RTOL) for x in point)
        if v > 1:
            return min(stages for (tau, y), stages in self._interleaved_points(
                found.family, variant, found.p, found.d, found.m) if tau <= cap_tau and y <= cap_y)
        in_flight = in_flight_per_position(variant.schedule, found.p, found.m, v)
        zs = variant.zero_stage
        capacity = tab.capacity(zs, tab.shards(zs, found.d))
        second = (tab.tail(pp=found.p, dp=found.d, zero_stage=zs, overlap=variant.overlap)
                  if self._per_candidate(self.states[found.family], variant) else tab.params)
        times = tab.position_times(found.p, v, zs, found.d)

        def block(c: int, rows: slice, cols: slice) -> FloatArray:
            ok = (capacity[rows, cols] >= in_flight[c]) & (times[c][rows, cols] <= cap_tau)
            return np.where(ok, second[rows, cols], np.inf)
        self.meter.charge(dp_cells(tab.n, found.p * v) + found.p * v * tab.n)
        return first_split(block, tab.n, found.p * v, cap_y)

    def plan(self, found: Found, stages: tuple[tuple[int, int], ...]) -> Plan:
        """The Plan of a found candidate with the given stages."""
        fam = self.states[found.family].family
        variant = found.variant
        return Plan(tp=fam.tp, pp=found.p, dp=found.d, micro_batch=fam.micro_batch,
                    recompute=fam.recompute, stages=stages, schedule=variant.schedule,
                    chunks=variant.chunks, sp=fam.sp, zero_stage=variant.zero_stage,
                    dp_overlap=variant.overlap, cp=fam.cp, ep=fam.ep, etp=fam.etp,
                    **self.setup.plan_options())


def _fits(capacity: npt.NDArray[np.int64], in_flight: Sequence[int]) -> bool:
    """Whether some split fits (1F1B and GPipe only: see ``kernels.fits_greedily``)."""
    def column(c: int, lo: int, x: int) -> FloatArray:
        return (in_flight[c] - capacity[lo:x, x - 1]).astype(np.float64)
    return fits_greedily(column, capacity.shape[0], len(in_flight), 0.0)
