"""One candidate of the plan search scored exactly (:mod:`archplace.placement.search` decides
which candidates to score, in which order, and when to stop).

A candidate (:class:`~archplace.placement.candidates.Candidate`) fixes everything but the stage
split. Its best iteration time is the least ``K * max_c T_c + max_c Y_c`` (K = v m + p - 1) over
the splits that fit, attained at a point of the Pareto front of (max T, max Y)
(:meth:`CandidateScorer.front`); with the interleaved schedule the one or two splits Megatron-LM
allows are scored directly, each device's memory exact (:meth:`CandidateScorer.interleaved_peaks`).
The search's module docstring gives the whole method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from archplace.placement.block_bounds import BlockBounds
from archplace.placement.budget import WorkMeter, dp_cells
from archplace.placement.candidates import (
    TIE_RTOL,
    Candidate,
    FamilyState,
    Found,
    Variant,
    in_flight_per_position,
    interleaved_splits,
    per_candidate,
)
from archplace.placement.kernels import first_split, fits_greedily, min_max
from archplace.placement.layout import RankLayout
from archplace.placement.memory import interleaved_device_memory, sequential_sum
from archplace.placement.plan import Plan, TrainingSetup
from archplace.placement.resident import ResidentTables
from archplace.placement.tables import ALL_SHARDS, NO_SHARDS, FloatArray, SegmentTables, Shards
from archplace.placement.timing import micro_batch_group_size, optimizer_step_time_s
from archplace.placement.zero import dp_tail_comm_s

Scored = tuple[float, list[tuple[float, float]]]
"""A candidate's best objective (seconds per iteration) and the front points attaining it."""


class CandidateScorer:
    """Exact objectives, splits and plans of single candidates, with the per-family caches
    (fronts, infeasible depths, interleaved splits) they share.

    Args:
        states: the search's families and their caches.
        setup: the training setup.
        tables: the families' segment tables (:class:`~archplace.placement.resident.ResidentTables`).
        bounds: the search's block bounds (their all-reduce costs are shared).
        meter: the search's work meter.
    """

    def __init__(self, states: Sequence[FamilyState], setup: TrainingSetup, tables: ResidentTables,
                 bounds: BlockBounds, meter: WorkMeter) -> None:
        self.states = states
        self.setup = setup
        self.tables = tables
        self.bounds = bounds
        self.meter = meter

    def score(self, cand: Candidate, limit: float) -> Scored | None:
        """The best objective of ``cand`` and its tying front points; None when no split fits
        or (``limit``: the search's cutoff with its slack) it cannot reach ``limit``."""
        state = self.states[cand.family]
        variant, p, d, m = cand.variant, cand.p, cand.d, cand.m
        # A candidate that does not fit rules out every smaller d of its group (more micro-batches
        # in flight, less sharding). Under interleaving the in-flight count grows with m only for
        # one micro-batch group size N, which is not monotone in m (pp 4: m 7 runs N = 7, m 8
        # N = 4: timing.micro_batch_group_size), so N is part of the group.
        group = (variant.schedule, variant.chunks, p, variant.zero_stage,
                 micro_batch_group_size(int(m), int(p)) if variant.chunks > 1 else 0)
        if state.infeasible_at.get(group, 0) >= d:
            return None
        tab = self.tables.of(state)
        v = variant.chunks
        k_factor = v * m + p - 1
        zs = variant.zero_stage
        if v > 1:
            found = self._interleaved(cand)
            if found is None:
                state.infeasible_at[group] = max(d, state.infeasible_at.get(group, 0))
                return None
            return found if found[0] <= limit else None
        in_flight = in_flight_per_position(variant.schedule, p, m, v)
        shards = self._canonical_shards(state, tab, zs, tab.shards(zs, d), max(in_flight))
        links = tuple(tab.position_links(p, v, d))
        mem_key = (variant.schedule, v, p, tuple(in_flight), zs, shards, links)
        front = state.fronts.get(mem_key)
        if front is None:
            if not _fits(tab.capacity(zs, shards), in_flight):
                front = []
            else:
                front = self.front(tab, tab.position_times(p, v, dp=d), in_flight, zs, shards,
                                   tab.params, None)
            state.fronts[mem_key] = front
        if not front:
            state.infeasible_at[group] = max(d, state.infeasible_at.get(group, 0))
            return None
        if not per_candidate(state, variant):
            values = [k_factor * tau + self.tail_of(state, variant, p, d, v * pmax) for tau, pmax in front]
            best = min(values)
            points = [(tau, pmax) for (tau, pmax), value in zip(front, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]
        else:
            # the front without the per-micro-batch DP traffic bounds the objective from below
            step = optimizer_step_time_s(1.0, self.setup.step_bandwidth_bytes_per_s,
                                         self.setup.optimizer) / self._max_shards(state, zs, d)
            if min(k_factor * tau + step * v * pmax for tau, pmax in front) > limit:
                return None
            tail = tab.tail(pp=p, dp=d, zero_stage=zs, overlap=variant.overlap)
            floor = float(tail[tab.upper].min())

            def stop(tau: float) -> bool:
                return k_factor * tau + floor > limit
            exact = self.front(tab, tab.position_times(p, v, zs, d, variant.overlap), in_flight, zs, shards,
                               tail, stop)
            if not exact:
                return None
            values = [k_factor * tau + y for tau, y in exact]
            best = min(values)
            points = [pt for pt, value in zip(exact, values, strict=True) if value <= best * (1 + TIE_RTOL)]
        return (best, points) if best <= limit else None

    def _max_shards(self, state: FamilyState, zero_stage: int, d: int) -> int:
        """The larger ZeRO shard count of a candidate's dense and expert parameters (1 at stage 0)."""
        if zero_stage == 0:
            return 1
        fam = state.family
        r = self.setup.dp_replicate
        dense = d * fam.cp // r
        return max(dense, fam.expert_group(d) // r) if state.experts else dense

    def tail_of(self, state: FamilyState, variant: Variant, p: int, d: int, params: float) -> float:
        """The tail of a device with ``params`` (charged) parameters without overlap, as
        ``SegmentTables.tail`` computes it (ZeRO stages 0 and 1 reducing once per iteration,
        chains without experts: the candidates that are not scored per candidate)."""
        setup = self.setup
        cost = self.bounds.costs(state, p, d)[0]
        dense = d * state.family.cp // setup.dp_replicate
        exposed = dp_tail_comm_s(cost, zero_stage=variant.zero_stage, grad_bytes=setup.grad_bytes,
                                 dp=dense, params=float(params), backward_s=0.0, overlap=False,
                                 replicas=setup.dp_replicate,
                                 replica_costs=self.bounds.costs(state, p, d, replicas=True),
                                 grad_sync=setup.grad_sync)[0]
        return float(exposed + optimizer_step_time_s(params, setup.step_bandwidth_bytes_per_s,
                                                     setup.optimizer, dense if variant.zero_stage else 1))

    @staticmethod
    def _canonical_shards(state: FamilyState, tab: SegmentTables, zero_stage: int,
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

    def front(self, tab: SegmentTables, times: Sequence[FloatArray], in_flight: Sequence[int],
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

    # ------------------------------------------------------------------ interleaved candidates

    def interleaved_fitting(self, cand: Candidate) -> list[tuple[tuple[int, int], ...]]:
        """The splits of :func:`interleaved_splits` with which every device fits in HBM (exact
        device memory, as ``evaluate_plan`` computes it), ascending."""
        state = self.states[cand.family]
        variant, zs = cand.variant, cand.variant.zero_stage
        key = (cand.p, variant.chunks, cand.m, zs, cand.d if zs else 1)  # cp, ep and etp are the family's
        fitting = state.interleaved.get(key)
        if fitting is None:
            splits = interleaved_splits(len(state.family.layers), cand.p * variant.chunks)
            fitting = [stages for stages in splits
                       if max(self.interleaved_peaks(cand, stages)) <= self.setup.hbm_bytes]
            state.interleaved[key] = fitting
        return fitting

    def interleaved_peaks(self, cand: Candidate, stages: tuple[tuple[int, int], ...]) -> list[float]:
        """``StageMemory.total`` of every device of an interleaved plan with ``stages``."""
        fam = self.states[cand.family].family
        p, layers = cand.p, fam.layers
        self.meter.charge(4 * len(layers) * cand.variant.chunks * p)
        layout = RankLayout.for_setup(fam, p, cand.d, self.setup)
        return [interleaved_device_memory(
            [layers[a:e + 1] for a, e in stages[j::p]], device=j, pp=p, micro_batches=cand.m,
            recompute=fam.recompute, optimizer=self.setup.optimizer,
            zero_stage=cand.variant.zero_stage, dp=layout.dense_shards, grad_bytes=self.setup.grad_bytes,
            expert_dp=layout.expert_shards, grad_sync=self.setup.grad_sync).total
            for j in range(p)]

    def _interleaved_points(self, cand: Candidate
                            ) -> list[tuple[tuple[float, float], tuple[tuple[int, int], ...]]]:
        """(pace, second figure) of every fitting interleaved split: the pace max_j T_j, T_j the
        mean time of device j's segments (``pipeline.device_paces``), and the largest device's
        tail (per candidate) or parameter count, each device's segments summed (as
        ``pipeline.device_tails``)."""
        state = self.states[cand.family]
        tab = self.tables.of(state)
        variant, p, d = cand.variant, cand.p, cand.d
        v, zs = variant.chunks, variant.zero_stage
        times = tab.position_times(p, v, zs, d, variant.overlap)
        exact_tail = per_candidate(state, variant)
        out = []
        for stages in self.interleaved_fitting(cand):
            devices = [stages[j::p] for j in range(p)]
            tau = max(sequential_sum(float(times[j + k * p][a, e]) for k, (a, e) in enumerate(own)) / v
                      for j, own in enumerate(devices))

            def summed(table: FloatArray, devices: list[tuple[tuple[int, int], ...]] = devices) -> FloatArray:
                return np.array([sequential_sum(float(table[a, e]) for a, e in own) for own in devices])
            if exact_tail:
                y = float(np.max(tab.device_tail(
                    pp=p, dp=d, zero_stage=zs, overlap=variant.overlap, dense=summed(tab.dense_params),
                    experts=None if tab.expert_params is None else summed(tab.expert_params),
                    backward=summed(tab.backward))))
            else:
                y = float(np.max(summed(tab.params)))
            out.append(((tau, y), stages))
        return out

    def _interleaved(self, cand: Candidate) -> Scored | None:
        """The best objective of an interleaved candidate and its tying points, or None when no
        split fits."""
        scored = self._interleaved_points(cand)
        if not scored:
            return None
        state = self.states[cand.family]
        variant = cand.variant
        k_factor = variant.chunks * cand.m + cand.p - 1
        exact_tail = per_candidate(state, variant)
        values = [k_factor * tau + (y if exact_tail else self.tail_of(state, variant, cand.p, cand.d, y))
                  for (tau, y), _ in scored]
        best = min(values)
        return best, [point for (point, _), value in zip(scored, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]

    # ------------------------------------------------------------------ the plan of a found optimum

    def split(self, found: Found, point: tuple[float, float]) -> tuple[tuple[int, int], ...]:
        """The lexicographically smallest split attaining ``point`` of a found candidate, up to
        rounding: within :data:`~archplace.placement.candidates.TIE_RTOL` of it in both figures
        (two splits whose segment sums differ by an ulp, the tables' cumulative sums taken in
        another order, are one tie, as the iteration times they evaluate to are)."""
        cand = found.candidate
        state = self.states[cand.family]
        tab = self.tables.of(state)
        variant, p, d = cand.variant, cand.p, cand.d
        v = variant.chunks
        cap_tau, cap_y = (x * (1.0 + TIE_RTOL) for x in point)
        if v > 1:
            return min(stages for (tau, y), stages in self._interleaved_points(cand)
                       if tau <= cap_tau and y <= cap_y)
        in_flight = in_flight_per_position(variant.schedule, p, cand.m, v)
        zs = variant.zero_stage
        capacity = tab.capacity(zs, tab.shards(zs, d))
        second = (tab.tail(pp=p, dp=d, zero_stage=zs, overlap=variant.overlap)
                  if per_candidate(state, variant) else tab.params)
        times = tab.position_times(p, v, zs, d, variant.overlap)

        def block(c: int, rows: slice, cols: slice) -> FloatArray:
            ok = (capacity[rows, cols] >= in_flight[c]) & (times[c][rows, cols] <= cap_tau)
            return np.where(ok, second[rows, cols], np.inf)
        self.meter.charge(dp_cells(tab.n, p * v) + p * v * tab.n)
        return first_split(block, tab.n, p * v, cap_y)

    def plan(self, found: Found, stages: tuple[tuple[int, int], ...]) -> Plan:
        """The Plan of a found candidate with the given stages (the setup's options on it:
        :meth:`~archplace.placement.plan.TrainingSetup.plan_options`)."""
        cand = found.candidate
        fam = self.states[cand.family].family
        variant = cand.variant
        return Plan(tp=fam.tp, pp=cand.p, dp=cand.d, micro_batch=fam.micro_batch,
                    recompute=fam.recompute, stages=stages, schedule=variant.schedule,
                    chunks=variant.chunks, sp=fam.sp, zero_stage=variant.zero_stage,
                    dp_overlap=variant.overlap, cp=fam.cp, ep=fam.ep, etp=fam.etp,
                    **self.setup.plan_options())


def _fits(capacity: npt.NDArray[np.int64], in_flight: Sequence[int]) -> bool:
    """Whether some split fits (1F1B and GPipe only: see ``kernels.fits_greedily``)."""
    def column(c: int, lo: int, x: int) -> FloatArray:
        return (in_flight[c] - capacity[lo:x, x - 1]).astype(np.float64)
    return fits_greedily(column, capacity.shape[0], len(in_flight), 0.0)

