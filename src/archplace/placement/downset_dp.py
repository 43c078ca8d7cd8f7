"""Exact placement of a layer DAG: Piper's dynamic program over downsets.

Source: J. Tarnawski et al., Piper: Multidimensional Planner for DNN Parallelization, NeurIPS
2021 (section 4: the stages of a pipeline over a DAG of layers are the differences of a chain
of *downsets* D_1 c D_2 c ... c D_p = all layers, a downset being a set of layers closed under
predecessors, and a dynamic program over (downset, stages used) finds the best such chain).

Model. A layer graph (:class:`~archplace.placement.layer_graph.LayerGraph`) is a tuple of
:class:`~archplace.placement.plan.LayerCost` and data-flow edges between them. A plan's stage j
is D_j minus D_{j-1}; it sends to the later stages the cut of D_j: the outputs of the layers of
D_j that have a successor outside D_j, each output sent once, i.e. sum(boundary_bytes) of those
layers (:func:`~archplace.placement.layer_graph.cut_bytes`; for a chain this is the last layer's
``boundary_bytes``, the chain model). Time and memory are exactly those of
:func:`~archplace.placement.pipeline.evaluate_plan` on the *linearized* plan
(:func:`~archplace.placement.layer_graph.linearize`): the layers ordered stage by stage, inside
a stage in the order of the graph's lexicographically smallest topological order pi (which is a
topological order of the whole graph, because an edge never goes from a later stage to an
earlier one), with the last layer of every stage but the last carrying its downset's cut bytes
as ``boundary_bytes``.

Dynamic program (:func:`dag_plan`). The stage figures that decide the iteration time and the
fit are those of ``evaluate_plan``: the stage's time per micro-batch T (``stage_times`` of the
linearized stage: its compute, recompute and the p2p of its input cut (none for the first
stage) and of its output cut (none for the last)), its
memory at its position's in-flight count (``stage_memory``), and its DP + optimizer tail (the
timing module's all-reduce, exposure and optimizer step of its parameters). They are computed
by calling those functions on the stage's linearized layers, so they equal the figures of the
final plan bit for bit. The DP runs backwards over states (downset D already placed, r stages
left): with 1F1B the stage r positions from the end holds min(r, m) micro-batches whatever p is
(GPipe: m), so one DP serves every pipeline depth. It keeps, per state, the Pareto front of
(max T, max second figure) over the ways of splitting the complement of D into r stages that
fit, where the second figure is the parameter count without DP overlap (the tail grows with it,
so the front serves every DP degree) and the stage's tail itself with overlap (then per
all-reduce cost: the (p, d) whose DP groups span the same kind of link share one DP). Both
maxima combine by max, so dominated partial plans can be dropped and the front of (empty set, p)
is exact. Every candidate (p, d) takes the best point of its front for
(m + p - 1) * T + tail, exactly as :mod:`archplace.placement.search` does for chains.

Ties: points of one candidate within a relative 1e-12 are ties and go to the smallest stage
order (stages compared one after the other as sorted tuples of layer indices; for a chain this
is the lexicographically smallest ``(first, last)`` stages of ``optimal_plan``); between
candidates the exact iteration time of ``evaluate_plan`` decides, then fewer devices, then
smaller p. The cost is O(R * pairs * front) with pairs the number of nested downset pairs
(n^2 / 2 for a chain, far more for wide graphs), so the number of downsets and of pairs is
limited (:data:`~archplace.placement.layer_graph.MAX_DOWNSETS`, :data:`MAX_STAGE_PAIRS`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from archplace.base.errors import ConfigError, InfeasibleError, OutOfMemoryError
from archplace.base.units import format_bytes
from archplace.placement.dag_tails import Groups, dp_groups, overlapped_tails, stage_tail
from archplace.placement.layer_graph import (
    MAX_DOWNSETS,
    LayerGraph,
    check_flop_rates,
    downset_masks,
    linearize,
    predecessor_masks,
)
from archplace.placement.memory import in_flight_micro_batches, stage_memory
from archplace.placement.pipeline import check_finite_times, evaluate_plan, stage_times
from archplace.placement.plan import (
    GradSync,
    LayerCost,
    PipelineSchedule,
    Plan,
    RankOrder,
    Recompute,
    TrainingSetup,
    check_sp,
    check_zero_stage,
)
from archplace.placement.result import PlanResult
from archplace.placement.solver import check_tp_and_micro_batch
from archplace.placement.timing import (
    dp_degrees,
    micro_batch_count,
)

logger = logging.getLogger(__name__)

MAX_STAGE_PAIRS = 2_000_000
"""Most nested downset pairs (candidate stages) :func:`dag_plan` considers (ConfigError)."""

TIE_RTOL = 1e-12
"""Front points of one candidate within this relative distance are ties (split by stage order)."""


# ---------------------------------------------------------------------------- the structure

@dataclass(slots=True)
class _Structure:
    """Downsets (bitmasks over topological positions, sorted by size: 0 first, full last) and
    every nested pair (i, j), D_i strict subset of D_j, as a candidate stage D_j minus D_i."""

    order: tuple[int, ...]
    masks: list[int]
    cut: list[float]
    pairs_from: list[list[int]]  # pair ids by first downset, second downset ascending
    pair_to: list[int]
    pair_stage: list[int]  # stage mask


@lru_cache(maxsize=8)
def _structure(graph: LayerGraph, max_downsets: int, max_pairs: int) -> _Structure:
    order = graph.topological_order()
    masks = downset_masks(graph, order, max_downsets)
    n, count = graph.n, len(masks)
    _, succs = predecessor_masks(graph, order)
    boundary = [graph.layers[k].boundary_bytes for k in order]
    cut = []
    for mask in masks:
        total = 0.0
        for k in range(n):  # left to right in topological order, as cut_bytes
            if mask >> k & 1 and succs[k] & ~mask:
                total += boundary[k]
        cut.append(total)
    words = (n + 63) // 64
    table = np.zeros((count, words), dtype=np.uint64)
    for i, mask in enumerate(masks):
        for w in range(words):
            table[i, w] = (mask >> (64 * w)) & 0xFFFF_FFFF_FFFF_FFFF
    pairs_from: list[list[int]] = []
    pair_to: list[int] = []
    pair_stage: list[int] = []
    for i, mask in enumerate(masks):
        row = table[i]
        above = np.flatnonzero(np.all((table[i + 1:] & row) == row, axis=1)) + (i + 1)
        if len(pair_to) + len(above) > max_pairs:
            raise ConfigError(f"layer graph: more than {max_pairs:,} candidate stages (nested "
                              f"pairs of its {count:,} downsets); too many parallel branches for "
                              f"an exact plan")
        ids = list(range(len(pair_to), len(pair_to) + len(above)))
        pairs_from.append(ids)
        for j in above.tolist():
            pair_to.append(j)
            pair_stage.append(masks[j] & ~mask)
    logger.debug("layer graph: %d layers, %d downsets, %d candidate stages", n, count, len(pair_to))
    return _Structure(order, masks, cut, pairs_from, pair_to, pair_stage)


# ---------------------------------------------------------------------------- stage figures

@dataclass(slots=True)
class _Figures:
    """Stage figures of every candidate stage for one (graph, setup, tp, micro-batch, recompute)."""

    graph: LayerGraph
    setup: TrainingSetup
    tp: int
    micro_batch: int
    recompute: Recompute
    structure: _Structure
    options: dict[str, Any]  # every plan option but the split (schedule, sp, ZeRO, overlap, ranks)
    time: list[float] = field(default_factory=list)      # seconds per micro-batch (T)
    params: list[int] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)  # backward + recompute, seconds
    capacities: dict[tuple[int, int], int] = field(default_factory=dict)
    kcap: int = 1

    def members(self, stage: int) -> list[LayerCost]:
        """The stage's layers in topological order."""
        order, layers = self.structure.order, self.graph.layers
        out = []
        while stage:
            low = stage & -stage
            out.append(layers[order[low.bit_length() - 1]])
            stage ^= low
        return out

    def build(self) -> None:
        st = self.structure
        full = len(st.masks) - 1
        source = [0] * len(st.pair_to)
        for i, pids in enumerate(st.pairs_from):
            for pid in pids:
                source[pid] = i
        plans: dict[tuple[int, bool, bool], Plan] = {}
        cache: dict[tuple[int, float | None, float | None], tuple[float, float]] = {}
        for pid, (to, stage) in enumerate(zip(st.pair_to, st.pair_stage, strict=True)):
            cut_in = None if source[pid] == 0 else st.cut[source[pid]]
            cut_out = None if to == full else st.cut[to]
            key = (stage, cut_in, cut_out)
            figures = cache.get(key)
            layers = self.members(stage)
            if figures is None:
                # the stage scored as the middle segment of up to three: a one-layer segment
                # before it carries the input cut, one after it receives the output cut
                size = len(layers)
                first = cut_in is not None
                last = cut_out is None
                plan = plans.get((size, first, last))
                if plan is None:
                    ranges = ([(0, 0)] if first else []) + [(int(first), int(first) + size - 1)]
                    if not last:
                        ranges.append((int(first) + size, int(first) + size))
                    plan = Plan(tp=self.tp, pp=len(ranges), dp=1, micro_batch=self.micro_batch,  # times only:
                                recompute=self.recompute, stages=tuple(ranges),  # one replica
                                **{**self.options, "dp_replicate": 1})
                    plans[(size, first, last)] = plan
                chain = list(layers)
                if cut_out is not None:
                    chain[-1] = replace(chain[-1], boundary_bytes=cut_out)
                    chain.append(chain[-1])
                if cut_in is not None:
                    chain.insert(0, replace(chain[0], boundary_bytes=cut_in))
                time = stage_times(chain, plan, self.setup.cluster,
                                   grad_bytes=self.setup.grad_bytes)[int(first)]
                figures = (time.total_s, time.backward_s)
                cache[key] = figures
            self.time.append(figures[0])
            self.backward.append(figures[1])
            params = 0
            for layer in layers:
                params += layer.params
            self.params.append(params)

    def capacity(self, pid: int, shards: int) -> int:
        """Largest in-flight count (at most ``kcap``) with which the stage fits in HBM, 0: none."""
        stage = self.structure.pair_stage[pid]
        key = (stage, shards)
        known = self.capacities.get(key)
        if known is not None:
            return known
        layers = self.members(stage)
        hbm = self.setup.hbm_bytes

        def fits(k: int) -> bool:
            return stage_memory(layers, stage=0, in_flight=k, recompute=self.recompute,
                                optimizer=self.setup.optimizer, zero_stage=self.options["zero_stage"],
                                dp=shards, grad_bytes=self.setup.grad_bytes).total <= hbm
        if not fits(1):
            value = 0
        elif fits(self.kcap):
            value = self.kcap
        else:  # fits(lo), not fits(hi); memory grows with the in-flight count
            lo, hi = 1, self.kcap
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
            value = lo
        self.capacities[key] = value
        return value

    def memory(self, pid: int, in_flight: int, shards: int) -> float:
        """``StageMemory.total`` of the stage holding ``in_flight`` micro-batches."""
        return stage_memory(self.members(self.structure.pair_stage[pid]), stage=0, in_flight=in_flight,
                            recompute=self.recompute, optimizer=self.setup.optimizer,
                            zero_stage=self.options["zero_stage"], dp=shards,
                            grad_bytes=self.setup.grad_bytes).total

    def stage_key(self, pid: int) -> tuple[int, ...]:
        """Sorted layer indices of the stage (the tie-break order)."""
        order = self.structure.order
        stage = self.structure.pair_stage[pid]
        return tuple(sorted(order[k] for k in range(self.graph.n) if stage >> k & 1))


Front = list[tuple[float, float]]


def _pareto(points: list[tuple[float, float]]) -> Front:
    """Points not dominated in (first, second), first ascending and second descending."""
    points.sort()
    out: Front = []
    best = np.inf
    for first, second in points:
        if second < best:
            out.append((first, second))
            best = second
    return out


@dataclass(slots=True)
class _Candidate:
    p: int
    d: int
    m: int
    profile: tuple[int, ...]  # in-flight count of the stage r positions from the end, r = 1..p


def _fronts(fig: _Figures, profile: Sequence[int], shards: int, second: Sequence[float]) -> list[list[Front]]:
    """V[r][i] (r = 1..len(profile)): Pareto front of (max T, max second) over the splits of the
    complement of downset i into r stages that fit, the stage r' positions from the end holding
    ``profile[r' - 1]`` micro-batches. V[0] is unused."""
    st = fig.structure
    count = len(st.masks)
    full = count - 1
    sizes = [mask.bit_count() for mask in st.masks]
    n = fig.graph.n
    capacity = [fig.capacity(pid, shards) for pid in range(len(st.pair_to))]
    time, pair_to = fig.time, st.pair_to
    fronts: list[list[Front]] = [[]]
    last: list[Front] = []
    for i in range(count):
        front: Front = []
        if i != full:
            pid = st.pairs_from[i][-1]  # the pair (i, full)
            if capacity[pid] >= profile[0]:
                front = [(time[pid], second[pid])]
        last.append(front)
    fronts.append(last)
    for r in range(2, len(profile) + 1):
        need = profile[r - 1]
        previous = fronts[r - 1]
        current: list[Front] = []
        for i in range(count):
            if n - sizes[i] < r:
                current.append([])
                continue
            points: list[tuple[float, float]] = []
            for pid in st.pairs_from[i][:-1]:
                later = previous[pair_to[pid]]
                if not later or capacity[pid] < need:
                    continue
                t, s = time[pid], second[pid]
                points.extend((t if t > t2 else t2, s if s > s2 else s2) for t2, s2 in later)
            current.append(_pareto(points))
        fronts.append(current)
    return fronts


def _first_stages(fig: _Figures, fronts: list[list[Front]], profile: Sequence[int], shards: int,
                  second: Sequence[float], p: int, point: tuple[float, float]) -> list[int]:
    """Pair ids of the smallest stage order (see the module docstring) among the p-stage splits
    that fit with max T <= tau and max second <= y, point = (tau, y)."""
    st = fig.structure
    full = len(st.masks) - 1
    tau, y = point
    i = 0
    chosen: list[int] = []
    for r in range(p, 0, -1):
        best: tuple[tuple[int, ...], int] | None = None
        for pid in st.pairs_from[i]:
            j = st.pair_to[pid]
            if (j == full) != (r == 1):
                continue
            if fig.time[pid] > tau or second[pid] > y or fig.capacity(pid, shards) < profile[r - 1]:
                continue
            if r > 1 and not any(t2 <= tau and s2 <= y for t2, s2 in fronts[r - 1][j]):
                continue
            key = fig.stage_key(pid)
            if best is None or key < best[0]:
                best = (key, pid)
        if best is None:  # pragma: no cover - the point is on the front
            raise AssertionError("front point without a split")
        chosen.append(best[1])
        i = st.pair_to[best[1]]
    return chosen


def dag_plan(graph: LayerGraph, setup: TrainingSetup, *, micro_batch: int, recompute: Recompute | str,
             tp: int = 1, schedule: PipelineSchedule | str = PipelineSchedule.ONE_F_ONE_B,
             zero_stage: int = 0, dp_overlap: bool = False, sp: bool = False,
             max_downsets: int = MAX_DOWNSETS, max_stage_pairs: int = MAX_STAGE_PAIRS,
             cp: int = 1, ep: int = 1) -> PlanResult:
    """The fastest plan of a layer DAG for fixed TP width, micro-batch, recompute policy,
    schedule, ZeRO-1, DP overlap and SP: over every pipeline depth p, DP degree d (tp p d <=
    devices, the batch rule of ``setup``) and chain of p downsets (Piper, Tarnawski et al. 2021;
    module docstring), under the memory limit.

    Args:
        graph: the layers (costs per micro-batch of ``micro_batch`` samples and per TP rank of a
            ``tp``-wide group, SI units) and their data-flow edges.
        setup: cluster, batch, HBM, optimizer and batch-divisibility rule; its ``dp_replicate``
            r > 1 plans hybrid sharding (ZeRO-1 within each of r replicas, DP degrees that r
            divides; :mod:`archplace.placement.dag_tails`).
        micro_batch, recompute, tp, zero_stage, dp_overlap, sp: the fixed options (sp is
            recorded; ZeRO stages 0 and 1 only).
        schedule: ``gpipe`` or ``1f1b``.
        max_downsets, max_stage_pairs: size limits of the exact search.
        cp, ep: context- and expert-parallel degrees: only 1 (layer-graph plans model dense
            parameters reduced over the DP group only).

    Returns:
        ``evaluate_plan`` of the linearized best plan (:func:`linearize`); ``plan.stages`` index
        that chain and ``plan.stage_layers`` names the layers of every stage. Ties as in the
        module docstring; on a chain the plan equals ``optimal_plan``'s.

    Raises:
        ConfigError: cp or ep > 1, ``setup.dp_replicate`` > 1 without ZeRO stage 1,
            ``setup.grad_sync`` micro_batch (stage times that would depend on d), layers with routed-expert
            parameters, an unknown policy, the interleaved
            schedule, a layer whose FLOP would run faster than the chip's peak (MFU above 1),
            or a graph with more downsets or candidate stages than the limits.
        InfeasibleError: no valid (p, d) exists ("no valid plan: ..."); OutOfMemoryError (a
            subclass) when no plan fits in HBM;
            then the message names the candidate with the smallest peak memory per device and
            its need against HBM.
    """
    if cp != 1 or ep != 1:
        raise ConfigError(f"layer-graph plans support cp = ep = 1 only, got cp={cp}, ep={ep} "
                          f"(context and expert parallelism are planned for layer chains)",
                          fields=("cp", "ep"))
    if setup.rank_order is not RankOrder.TP_CP_EP_PP_DP:
        raise ConfigError(f"layer-graph plans use the rank order {RankOrder.TP_CP_EP_PP_DP.value}, "
                          f"not {setup.rank_order.value}", fields=("rank_order",))
    experts = next((layer for layer in graph.layers if layer.expert_params), None)
    if experts is not None:
        raise ConfigError(f"layer-graph plans model dense parameters only: layer {experts.name!r} has "
                          f"{experts.expert_params} routed-expert parameters (plan MoE models as chains)")
    try:
        policy = Recompute(recompute)
        kind = PipelineSchedule(schedule)
    except ValueError as exc:
        raise ConfigError(f"dag_plan: {exc}") from None
    if kind in (PipelineSchedule.INTERLEAVED, PipelineSchedule.DUALPIPE):
        raise ConfigError(f"layer-graph plans support the gpipe and 1f1b schedules, not {kind.value}")
    zero_stage = check_zero_stage(zero_stage, "dag_plan")
    if zero_stage >= 2:
        raise ConfigError(f"layer-graph plans support ZeRO stages 0 and 1, not zero_stage={zero_stage} "
                          f"(its per-layer collectives are modelled for layer chains)")
    if setup.grad_sync is GradSync.MICRO_BATCH:
        raise ConfigError("grad_sync micro_batch: layer-graph plans reduce the gradients once per "
                          "iteration (ZeRO stages 0 and 1: grad_sync auto or iteration); a reduction "
                          "every micro-batch is modelled for layer chains", fields=("grad_sync",))
    r = setup.dp_replicate
    if r > 1 and zero_stage == 0:
        raise ConfigError(f"dp_replicate {r} (hybrid sharding) needs ZeRO stage 1 in a layer-graph plan, "
                          "got 0", fields=("dp_replicate",))
    zero = zero_stage == 1
    dp_overlap, sp = bool(dp_overlap), bool(sp)
    check_sp(sp, tp)
    check_tp_and_micro_batch(setup, tp, micro_batch)
    check_flop_rates(graph, setup.peak_flop_per_s)
    check_finite_times(graph.layers)
    devices = setup.cluster.devices
    candidates: list[_Candidate] = []
    for p in range(1, min(graph.n, devices // tp) + 1):
        for d in dp_degrees(setup, micro_batch, devices // (tp * p)):
            if d % r:  # hybrid sharding: r replicas of d / r ranks each
                continue
            try:
                m = micro_batch_count(setup, micro_batch=micro_batch, dp=d, pp=p, schedule=kind)
            except ConfigError:
                continue
            profile = tuple(in_flight_micro_batches(p - r, p, m, kind) for r in range(1, p + 1))
            candidates.append(_Candidate(p, d, m, profile))
    if not candidates:
        raise InfeasibleError(f"no valid plan: no (pp, dp) suits {devices} devices, tp={tp}, "
                              f"micro-batch {micro_batch} and the global batch {setup.global_batch}"
                              + (f" with dp a multiple of dp_replicate {r}" if r > 1 else ""))
    structure = _structure(graph, max_downsets, max_stage_pairs)
    fig = _Figures(graph, setup, tp, micro_batch, policy, structure,
                   {"schedule": kind, "sp": sp, "zero_stage": zero_stage, "dp_overlap": dp_overlap,
                    **setup.plan_options()},
                   kcap=max(max(c.profile) for c in candidates))
    fig.build()

    # Groups of candidates sharing one DP: same shards and second figure, nested profiles. With
    # overlap the second figure depends on (p, d) only through the all-reduce's (constant, per
    # byte) cost, which many (p, d) share (every DP group spanning the same kind of link).
    groups: list[tuple[int, Groups | None, tuple[int, ...], list[_Candidate]]] = []
    for cand in sorted(candidates, key=lambda c: -c.p):
        shards = _shards(fig, cand, zero)
        key = None
        if dp_overlap:  # the tail depends on d through the costs and the bucket size
            key = dp_groups(setup, tp, cand.p, cand.d)
        for g_shards, g_key, g_profile, members in groups:
            if g_shards == shards and g_key == key and g_profile[:cand.p] == cand.profile:
                members.append(cand)
                break
        else:
            groups.append((shards, key, cand.profile, [cand]))

    rows: list[tuple[float, int, int, tuple[tuple[int, ...], ...], PlanResult]] = []
    for shards, key, profile, members in groups:
        if key is None:
            second: Sequence[float] = [float(x) for x in fig.params]
        else:
            second = overlapped_tails(setup, key, fig.params, fig.backward, zero_stage)
        fronts = _fronts(fig, profile, shards, second)
        for cand in members:
            front = fronts[cand.p][0]
            if not front:
                continue
            k_factor = cand.m + cand.p - 1
            if key is None:  # the DP groups once per candidate, the tail per front point
                dp = dp_groups(setup, tp, cand.p, cand.d)
                values = [k_factor * tau + stage_tail(setup, dp, y, zero_stage) for tau, y in front]
            else:
                values = [k_factor * tau + y for tau, y in front]
            best = min(values)
            splits = [_first_stages(fig, fronts, profile, shards, second, cand.p, point)
                      for point, value in zip(front, values, strict=True)
                      if value <= best * (1 + TIE_RTOL)]
            keyed = min((tuple(fig.stage_key(pid) for pid in split), split) for split in splits)
            result = _evaluate(graph, setup, fig, cand, keyed[0])
            rows.append((result.iteration_time_s, tp * cand.p * cand.d, cand.p, keyed[0], result))
    if not rows:
        _raise_closest(fig, candidates, kind, zero)
    rows.sort(key=lambda row: row[:4])
    return rows[0][4]


def _evaluate(graph: LayerGraph, setup: TrainingSetup, fig: _Figures, cand: _Candidate,
              stages: tuple[tuple[int, ...], ...]) -> PlanResult:
    chain, ranges, names = linearize(graph, stages)
    plan = Plan(tp=fig.tp, pp=cand.p, dp=cand.d, micro_batch=fig.micro_batch, recompute=fig.recompute,
                stages=ranges, stage_layers=names, **fig.options)
    return evaluate_plan(chain, setup, plan)


def _shards(fig: _Figures, cand: _Candidate, zero: bool) -> int:
    """Ranks a stage's ZeRO-1 optimizer state is sharded over: d / dp_replicate, or 1 without ZeRO."""
    return cand.d // fig.setup.dp_replicate if zero else 1


def _least_peak(fig: _Figures, cand: _Candidate, zero: bool) -> tuple[float, list[int]]:
    """The smallest peak per-device memory over the splits of the graph into ``cand.p`` stages
    (min-max DP over downsets) and a split attaining it; inf and [] when there is no split."""
    st = fig.structure
    count = len(st.masks)
    full = count - 1
    p, shards = cand.p, _shards(fig, cand, zero)
    # least[r][i]: smallest peak over splits of the complement of downset i into r stages
    least: list[list[float]] = [[np.inf] * count for _ in range(p + 1)]
    choice: list[list[int]] = [[-1] * count for _ in range(p + 1)]
    for r in range(1, p + 1):
        need = cand.profile[r - 1]
        for i in range(count - 1):
            for pid in st.pairs_from[i]:
                j = st.pair_to[pid]
                if (j == full) != (r == 1) or (r > 1 and least[r - 1][j] == np.inf):
                    continue
                peak = max(fig.memory(pid, need, shards), least[r - 1][j] if r > 1 else 0.0)
                if peak < least[r][i]:
                    least[r][i], choice[r][i] = peak, pid
    if least[p][0] == np.inf:
        return np.inf, []
    split, i = [], 0
    for r in range(p, 0, -1):
        split.append(choice[r][i])
        i = st.pair_to[choice[r][i]]
    return least[p][0], split


def _raise_closest(fig: _Figures, candidates: Sequence[_Candidate], kind: PipelineSchedule,
                   zero: bool) -> None:
    """Raise InfeasibleError naming the candidate with the smallest peak per-device memory, then
    the fewest devices, then the smallest p. Memory never grows with d, so the largest valid d
    of every p gives the least peak of that p; the smallest d reaching it is then looked for."""
    by_p: dict[int, list[_Candidate]] = {}
    for cand in candidates:
        by_p.setdefault(cand.p, []).append(cand)
    peaks = {p: _least_peak(fig, max(group, key=lambda c: c.d), zero)[0] for p, group in by_p.items()}
    least = min(peaks.values())
    hbm = format_bytes(fig.setup.hbm_bytes)
    if least == np.inf:  # pragma: no cover - every graph has a split for p = 1
        raise OutOfMemoryError(f"no plan fits in {hbm} HBM")
    best: tuple[int, int, _Candidate, list[int]] | None = None
    for p, group in sorted(by_p.items()):
        if peaks[p] != least:
            continue
        for cand in sorted(group, key=lambda c: c.d):
            peak, split = _least_peak(fig, cand, zero)
            if peak <= least:
                if best is None or (fig.tp * p * cand.d, p) < best[:2]:
                    best = (fig.tp * p * cand.d, p, cand, split)
                break
    assert best is not None
    _, p, cand, split = best
    st = fig.structure
    shards = _shards(fig, cand, zero)
    needs = [fig.memory(pid, cand.profile[p - 1 - j], shards) for j, pid in enumerate(split)]
    worst = needs.index(max(needs))
    names = ", ".join(layer.name for layer in fig.members(st.pair_stage[split[worst]]))
    raise OutOfMemoryError(
        f"no plan fits in {hbm} HBM: best candidate pp={p} dp={cand.d} needs {format_bytes(least)} on "
        f"stage {worst} (layers {names}; tp={fig.tp}, micro_batch={fig.micro_batch}, "
        f"recompute={fig.recompute.value}, schedule={kind.value}"
        f"{', zero_stage=1' if zero and cand.d > 1 else ''}"
        f"{f', dp_replicate={fig.setup.dp_replicate}' if fig.setup.dp_replicate > 1 else ''})")
