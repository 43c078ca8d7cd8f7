"""Exact choice of the parallel plan: TP width, pipeline depth and schedule, DP degree,
micro-batch, recomputation, sequence parallelism, ZeRO stage, DP overlap and the stage split.

:func:`plan_search` returns the k fastest distinct plan configurations (each with its best
stage split) under the time and memory model of :mod:`archplace.placement.pipeline`, and
:func:`optimal_plan` the fastest for one fixed set of options. Both are exact: the engine
(:mod:`archplace.placement.search`) enumerates, for every candidate configuration it cannot
rule out by a lower bound, the Pareto front of (bottleneck segment time, largest DP + optimizer
tail) over the splits that fit in memory, with min-max dynamic programs over the chain's
suffixes (:mod:`archplace.placement.kernels`). Figures the solver uses are computed with the
same floating-point operations as ``evaluate_plan``, and the returned results are
``evaluate_plan`` of the chosen plans. One exception: under the EP overlap
(:mod:`archplace.placement.ep_overlap`) the search ranks by the paired passes' time and leaves
out the unpaired warm-up and cool-down slots' exposed all-to-alls, which ``evaluate_plan`` adds:
a lower bound, so a plan that loses more there can be ranked above one that loses less.

Ties (iteration times compared exactly) go to fewer devices, then fewer pipeline stages, then
the smaller TP width, the smaller CP degree, the smaller EP degree, the smaller expert-TP width,
fewer chunks, the smaller
micro-batch, less recomputation (none,
selective, full), the schedule (1F1B, interleaved, GPipe), SP off, the lower ZeRO stage, overlap off, and
finally the lexicographically smallest stages.

Layer chains: the states of the DP are the chain's prefixes (suffixes). Models whose layers form
a DAG (two-tower, multi-modal, a user's profiled layer graph) are planned exactly by
:func:`archplace.placement.downset_dp.dag_plan`, Piper's DP over downsets (Tarnawski et al., NeurIPS
2021), with the same time and memory model; on a chain it gives this module's plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from archplace.base.errors import ConfigError, InfeasibleError, OutOfMemoryError
from archplace.base.units import format_bytes
from archplace.placement.budget import TableCache, dp_cells
from archplace.placement.candidates import (
    Candidate,
    CostFamily,
    Variant,
    in_flight_per_position,
    interleaved_splits,
)
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.ep_overlap import FULL_RECOMPUTE_REFUSAL, paired
from archplace.placement.kernels import Block, first_split, fits_greedily, min_max
from archplace.placement.pipeline import check_finite_times, evaluate_plan
from archplace.placement.plan import (
    RECOMPUTE_ORDER,
    SCHEDULE_ORDER,
    CostKey,
    GradSync,
    LayerCost,
    PipelineSchedule,
    Recompute,
    TrainingSetup,
    check_sp,
    check_zero_stage,
)
from archplace.placement.result import PlanResult
from archplace.placement.search import Search
from archplace.placement.tables import NO_SHARDS, FloatArray, SegmentTables
from archplace.placement.timing import check_positive_int


def _enums(kind: type, values: Iterable[object], name: str) -> tuple[Any, ...]:
    out = []
    for value in values:
        try:
            out.append(kind(value))
        except ValueError:
            choices = ", ".join(item.value for item in kind)  # type: ignore[attr-defined]
            raise ConfigError(f"unknown {name} {value!r}; choose from: {choices}") from None
    if not out:
        raise ConfigError(f"at least one {name} is needed")
    return tuple(dict.fromkeys(out))


def _bools(values: Iterable[object], name: str) -> tuple[bool, ...]:
    out = tuple(dict.fromkeys(values))
    if not out or not all(isinstance(value, bool) for value in out):
        raise ConfigError(f"{name} must be a non-empty collection of bools, got {out!r}")
    return out  # type: ignore[return-value]


def plan_search(costs: Mapping[CostKey, Sequence[LayerCost]], setup: TrainingSetup, *,
                recomputes: Iterable[Recompute | str] = tuple(Recompute),
                schedules: Iterable[PipelineSchedule | str] = SEARCHED_SCHEDULES,
                chunks: Iterable[int] = (2, 4),
                zero_stages: Iterable[int] = (0, 1),
                dp_overlap: Iterable[bool] = (False, True),
                top_k: int = 1, dp_replicates: Iterable[int] | None = None,
                grad_sync: GradSync | str | None = None) -> list[PlanResult]:
    """The ``top_k`` fastest distinct plan configurations, fastest first.

    Args:
        costs: layer chain per :class:`CostKey` (tp, micro_batch, sp, cp, ep, etp); the chains
            may differ by key. A key's cp, ep and etp are searched with it: tp * cp * pp * dp
            devices, etp * ep dividing tp * cp * dp (:mod:`archplace.placement.layout`; the
            chain's ``expert_params`` are one rank's share, already divided by ep and etp).
        setup: cluster, batch, HBM, optimizer and batch-divisibility rule.
        recomputes, schedules: policies to consider.
        chunks: model chunks per device (v >= 2) tried with the interleaved schedule.
        zero_stages: ZeRO stages (0..3) to consider.
        dp_overlap: DP-overlap settings to consider.
        top_k: how many configurations to return (each with its best stage split).
        dp_replicates: hybrid-sharding replica counts r to consider (``Plan.dp_replicate``;
            :mod:`archplace.placement.layout`): each r > 1 is searched on its own, with the ZeRO
            stages >= 1 and the DP degrees it divides, ``setup.dp_replicate`` set to it, and the
            plans of every r are ranked together (ties: the smaller r first). None (default):
            ``setup.dp_replicate`` alone.
        grad_sync: when the DP gradient reduction runs (``Plan.grad_sync``, one value for the
            whole search: ``setup.grad_sync`` set to it and on every plan returned); None
            (default): ``setup.grad_sync``.

    Returns:
        ``evaluate_plan`` results; ties as in the module docstring.

    Raises:
        ConfigError: malformed costs or options, layer times that overflow when added up.
        InfeasibleError: no valid (tp, pp, dp, micro-batch) combination exists ("no valid
            plan: ..."), or nothing fits in HBM; then the message names the closest candidate
            among the most memory-frugal options offered (most recomputation, 1F1B, each ZeRO stage,
            smallest micro-batch per TP width and SP flag) and its need in bytes.
    """
    top_k = check_positive_int("top_k", top_k)
    recompute_list = _enums(Recompute, recomputes, "recompute policy")
    schedule_list = _enums(PipelineSchedule, schedules, "pipeline schedule")
    if PipelineSchedule.DUALPIPE in schedule_list:
        raise ConfigError("the dualpipe schedule is priced for a given plan (evaluate); the plan search "
                          "does not try it yet", fields=("schedules",))
    chunk_list = tuple(dict.fromkeys(chunks))
    for v in chunk_list:
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise ConfigError(f"interleaved chunks must be integers >= 2, got {v!r}")
    if PipelineSchedule.INTERLEAVED in schedule_list and not chunk_list:
        raise ConfigError("the interleaved schedule needs at least one chunk count")
    zero_list = tuple(dict.fromkeys(check_zero_stage(z, "plan_search") for z in zero_stages))
    if not zero_list:
        raise ConfigError("at least one ZeRO stage is needed")
    overlap_list = _bools(dp_overlap, "dp_overlap")
    if grad_sync is not None:
        (sync,) = _enums(GradSync, (grad_sync,), "grad_sync")
        setup = replace(setup, grad_sync=sync)
    replicas = dp_replicates if dp_replicates is not None else (setup.dp_replicate,)
    replicate_list = tuple(dict.fromkeys(check_positive_int("dp_replicate", r) for r in replicas))
    if not replicate_list:
        raise ConfigError("at least one dp_replicate is needed")
    if zero_list == (0,) and min(replicate_list) > 1:
        raise ConfigError(f"dp_replicate {min(replicate_list)} (hybrid sharding) needs a ZeRO stage >= 1, "
                          f"but only zero_stage 0 is given")
    if not costs:
        raise ConfigError("plan_search needs the layer costs of at least one cost key "
                          "(tp, micro_batch, sp, cp, ep, etp)")
    families: list[CostFamily] = []
    for key, layers in costs.items():
        cost_key = CostKey.of(key)
        if cost_key.sp and cost_key.tp == 1:
            raise ConfigError(f"costs key {key!r}: sp needs tp > 1 (sequence parallelism splits "
                              f"activations over the TP group)")
        if not layers:
            raise ConfigError(f"costs {key!r}: placement needs at least one layer")
        check_finite_times(layers)
        overlapped = paired(layers)  # the EP overlap runs without full recomputation (ep_overlap)
        families.extend(CostFamily(cost_key, rc, tuple(layers)) for rc in recompute_list
                        if not (overlapped and rc is Recompute.FULL))
    if not families:
        raise ConfigError(FULL_RECOMPUTE_REFUSAL, fields=("recomputes",))
    variants = [Variant(schedule, v, z, o, setup.grad_sync)
                for schedule in schedule_list
                for v in (chunk_list if schedule is PipelineSchedule.INTERLEAVED else (1,))
                for z in zero_list for o in overlap_list]
    results: list[tuple[float, int, int, PlanResult]] = []
    refusal: InfeasibleError | None = None
    for order, r in enumerate(replicate_list):
        kept = [variant for variant in variants if r == 1 or variant.zero_stage >= 1]
        if not kept:
            continue
        try:
            found = _search(families, kept, replace(setup, dp_replicate=r), top_k)
        except InfeasibleError as exc:
            refusal = refusal or exc
            continue
        results.extend((result.iteration_time_s, order, rank, result) for rank, result in enumerate(found))
    if not results and refusal is not None:
        raise refusal
    results.sort(key=lambda row: row[:3])
    return [row[3] for row in results[:top_k]]


def _search(families: list[CostFamily], variants: list[Variant], setup: TrainingSetup,
            top_k: int) -> list[PlanResult]:
    """:func:`plan_search` at one ``setup.dp_replicate``."""
    search = Search(families, undominated(variants, setup.dp_replicate) if top_k == 1 else variants, setup,
                    top_k)
    found = search.run()
    if not search.any_candidate:
        limit = " (tp*cp*pp*dp must not exceed the devices and "
        if any(fam.etp > 1 or (fam.tp > 1 and fam.ep > 1) for fam in families):
            degrees, rule = "tp, cp, ep, etp, pp, dp", limit + "etp*ep must divide tp*cp*dp)"
        elif any(fam.cp > 1 or fam.ep > 1 for fam in families):
            degrees, rule = "tp, cp, ep, pp, dp", limit + "ep must divide dp*cp)"
        else:
            degrees, rule = "tp, pp, dp", ""
        raise InfeasibleError(
            f"no valid plan: no ({degrees}, micro-batch) combination of the given ones suits "
            f"{setup.cluster.devices} devices and the global batch {setup.global_batch}{rule}")
    if not found:
        _raise_closest(search, families, variants, setup)
    results = []
    for item in found:
        stages = min(search.scorer.split(item, point) for point in item.points)
        plan = search.scorer.plan(item, stages)
        result = evaluate_plan(families[item.candidate.family].layers, setup, plan)
        results.append((result.iteration_time_s, item.rank, stages, result))
    results.sort(key=lambda row: row[:3])
    return [row[3] for row in results[:top_k]]


def undominated(variants: Sequence[Variant], replicas: int = 1) -> list[Variant]:
    """``variants`` without those whose every plan has a twin, in a variant kept, of the same
    iteration time that fits whenever it does and ranks first -- so the fastest plan (top 1)
    is the same without them:

    * GPipe, when 1F1B is offered: the same time (:mod:`archplace.placement.pipeline`), never
      fewer micro-batches in flight (:func:`~archplace.placement.memory.in_flight_micro_batches`),
      and 1F1B first in :data:`~archplace.placement.plan.SCHEDULE_ORDER`;
    * DP overlap at ZeRO stages 2 and 3 reducing every micro-batch, without hybrid sharding
      (``replicas`` 1), when no overlap is offered: the once-per-iteration traffic overlap acts
      on is the parameter all-gather alone (stage 2; always exposed) or none (stage 3), and the
      per-layer collectives overlap their layers either way (:mod:`archplace.placement.zero`),
      so overlap changes neither time nor memory, and "no overlap" ranks first. (Reducing once
      per iteration, ``grad_sync`` iteration, or all-reducing across r > 1 replicas, the tail
      has a reduction that overlap buckets: both are kept.)
    """
    one_f_one_b = any(v.schedule is PipelineSchedule.ONE_F_ONE_B for v in variants)
    plain = {(v.schedule, v.chunks, v.zero_stage) for v in variants if not v.overlap}
    return [v for v in variants
            if not (one_f_one_b and v.schedule is PipelineSchedule.GPIPE)
            and not (v.overlap and v.zero_stage >= 2 and v.reduces_every_micro_batch and replicas == 1
                     and (v.schedule, v.chunks, v.zero_stage) in plain)]


def check_tp_and_micro_batch(setup: TrainingSetup, tp: int, micro_batch: int) -> None:
    """Raise InfeasibleError ("no valid plan: ...") when the TP width exceeds the cluster or the
    micro-batch does not divide the global batch (when ``setup`` requires it)."""
    devices = setup.cluster.devices
    if tp > devices:
        raise InfeasibleError(f"no valid plan: tp={tp} exceeds the cluster's {devices} devices")
    if setup.dp_must_divide_batch and setup.global_batch % micro_batch:
        raise InfeasibleError(f"no valid plan: micro-batch {micro_batch} does not divide the "
                              f"global batch {setup.global_batch}")


def optimal_plan(layers: Sequence[LayerCost], setup: TrainingSetup, *, micro_batch: int,
                 recompute: Recompute | str, tp: int = 1,
                 schedule: PipelineSchedule | str = PipelineSchedule.ONE_F_ONE_B,
                 chunks: int = 1, zero_stage: int = 0, dp_overlap: bool = False,
                 sp: bool = False) -> PlanResult:
    """The fastest plan for fixed TP width, micro-batch, recompute policy, schedule (and chunks),
    ZeRO-1, DP overlap and SP: over every pipeline depth p, DP degree d (tp p d <= devices, the
    batch rule of ``setup``) and contiguous split into p (x chunks) segments.

    Ties go to fewer devices, then smaller p, then the lexicographically smallest stages.

    Returns:
        ``evaluate_plan`` of the chosen plan.

    Raises:
        ConfigError: no layers, an unknown policy, or chunks
            that do not suit the schedule.
        InfeasibleError: no valid (p, d) exists ("no valid plan: ..."), or no plan fits in HBM;
            the message gives the candidate that came closest (smallest peak memory per device)
            and its need in bytes.
    """
    if not layers:
        raise ConfigError("placement needs at least one layer")
    check_positive_int("chunks", chunks)
    check_sp(sp, tp)
    (policy,) = _enums(Recompute, (recompute,), "recompute policy")
    (kind,) = _enums(PipelineSchedule, (schedule,), "pipeline schedule")
    interleaved = kind is PipelineSchedule.INTERLEAVED
    if interleaved != (chunks > 1):
        raise ConfigError(f"chunks={chunks} does not suit the {kind.value} schedule "
                          f"(interleaved needs chunks >= 2, the others chunks = 1)")
    check_tp_and_micro_batch(setup, tp, micro_batch)
    return plan_search({CostKey(tp, micro_batch, bool(sp)): layers}, setup, recomputes=(policy,),
                       schedules=(kind,), chunks=(chunks,) if interleaved else (),
                       zero_stages=(zero_stage,), dp_overlap=(bool(dp_overlap),), top_k=1)[0]


def _raise_closest(search: Search, families: Sequence[CostFamily], variants: Sequence[Variant],
                   setup: TrainingSetup) -> None:
    """Raise InfeasibleError naming the plan with the smallest peak per-device memory among the
    most memory-frugal options offered (see :func:`plan_search`), or, when those have no valid
    candidate, among all options; memory never grows with d, so the largest valid d of every p
    is the closest, and a min-max DP over the split finds the smallest peak for it."""
    frugal_rc = max((fam.recompute for fam in families), key=RECOMPUTE_ORDER.index)
    smallest_b: dict[tuple[int, bool, int, int, int], int] = {}
    for fam in families:
        key = (fam.tp, fam.sp, fam.cp, fam.ep, fam.etp)
        smallest_b[key] = min(smallest_b.get(key, fam.micro_batch), fam.micro_batch)
    chosen = [f for f, fam in enumerate(families) if fam.recompute is frugal_rc
              and fam.micro_batch == smallest_b[(fam.tp, fam.sp, fam.cp, fam.ep, fam.etp)]]
    schedule = min({variant.schedule for variant in variants}, key=SCHEDULE_ORDER.index)
    # per ZeRO stage offered (which one needs least depends on d: ZeRO-3's gathered window
    # costs memory at d = 1), the variant with the most chunks, no overlap
    frugal = [max((item for item in variants if item.schedule is schedule and item.zero_stage == stage),
                  key=lambda item: (item.chunks, not item.overlap))
              for stage in sorted({item.zero_stage for item in variants if item.schedule is schedule})]
    best = _closest(search, families, [(f, variant) for f in chosen for variant in frugal])
    if best is None:
        best = _closest(search, families, [(f, variant) for f in range(len(families))
                                           for variant in variants])
    if best is None:  # pragma: no cover - the search had candidates
        raise OutOfMemoryError(f"no plan fits in {format_bytes(setup.hbm_bytes)} HBM")
    peak, p, f, d, variant = best.peak_bytes, best.pp, best.family, best.dp, best.variant
    m = best.micro_batch_count
    fam = families[f]
    if variant.chunks > 1:
        cand = Candidate(f, variant, p, d, m)
        _, stages = _interleaved_peak(search, cand)
        needs = search.scorer.interleaved_peaks(cand, stages)
        where = f"on device {needs.index(max(needs))}"
    else:
        tab = search.tables_of(f)
        block = _memory_blocks(tab, variant, p, d, m)
        search.meter.charge(dp_cells(tab.n, p) + p * tab.n)
        stages = first_split(block, tab.n, p, peak)
        needs = [float(block(c, slice(a, a + 1), slice(e, e + 1))[0, 0])
                 for c, (a, e) in enumerate(stages)]
        where = f"on stage {needs.index(max(needs))}"
    label = (f"tp={fam.tp}, " + (f"cp={fam.cp}, " if fam.cp > 1 else "")
             + (f"ep={fam.ep}, " if fam.ep > 1 else "") + (f"etp={fam.etp}, " if fam.etp > 1 else "")
             + f"micro_batch={fam.micro_batch}, recompute={fam.recompute.value}, "
             f"schedule={variant.schedule.value}"
             + (f", chunks={variant.chunks}" if variant.chunks > 1 else "")
             + (f", zero_stage={variant.zero_stage}" if variant.zero_stage else "")
             + (", sp" if fam.sp else ""))
    raise OutOfMemoryError(f"no plan fits in {format_bytes(setup.hbm_bytes)} HBM: best candidate "
                          f"pp={p} dp={d} needs {format_bytes(peak)} {where} ({label})")


@dataclass(frozen=True, slots=True)
class Closest:
    """The candidate that comes closest to fitting when nothing fits in HBM.

    Attributes:
        peak_bytes: its largest per-device memory, bytes (the least over the candidates).
        devices: devices it occupies, tp * cp * pp * dp.
        pp: pipeline depth.
        family: index of its layer-cost family (tp, micro-batch, SP, cp, ep, etp, recompute) in the
            search.
        dp: data-parallel degree.
        micro_batch_count: micro-batches per iteration (per pipeline).
        variant: its schedule, chunks, ZeRO stage and DP overlap.
    """

    peak_bytes: float
    devices: int
    pp: int
    family: int
    dp: int
    micro_batch_count: int
    variant: Variant

    @property
    def order(self) -> tuple[float, int, int, int, int, int]:
        """How candidates of equal standing are ordered: least peak, then fewest devices, then
        the smallest pp, family, dp and micro-batch count."""
        return (self.peak_bytes, self.devices, self.pp, self.family, self.dp, self.micro_batch_count)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the fields, ``variant`` as ``{"schedule", "chunks", "zero_stage", "overlap"}``."""
        variant = self.variant
        return {"peak_bytes": self.peak_bytes, "devices": self.devices, "pp": self.pp,
                "family": self.family, "dp": self.dp, "micro_batch_count": self.micro_batch_count,
                "variant": {"schedule": variant.schedule.value, "chunks": variant.chunks,
                            "zero_stage": variant.zero_stage, "overlap": variant.overlap}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Closest:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            raw = data["variant"]
            variant = Variant(PipelineSchedule(raw["schedule"]), int(raw["chunks"]), int(raw["zero_stage"]),
                              bool(raw["overlap"]))
            return cls(float(data["peak_bytes"]), int(data["devices"]), int(data["pp"]), int(data["family"]),
                       int(data["dp"]), int(data["micro_batch_count"]), variant)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid closest candidate: {exc}") from None


def _interleaved_peak(search: Search, cand: Candidate) -> tuple[float, tuple[tuple[int, int], ...]]:
    """The least largest device memory over the interleaved splits (:func:`interleaved_splits`)
    and the smallest split reaching it; (inf, ()) when the chain has no such split."""
    best: tuple[float, tuple[tuple[int, int], ...]] = (np.inf, ())
    layers = search.states[cand.family].family.layers
    for stages in interleaved_splits(len(layers), cand.p * cand.variant.chunks):
        peak = max(search.scorer.interleaved_peaks(cand, stages))
        best = min(best, (peak, stages))
    return best


def _closest(search: Search, families: Sequence[CostFamily],
             options: Sequence[tuple[int, Variant]]) -> Closest | None:
    """The candidate of ``options`` (family, variant) with the smallest peak memory, then the
    fewest devices, then the smallest p; None when they have no valid candidate (interleaved:
    every (p, d), since the in-flight count need not fall with d).

    Depths are tried in the order of a balanced-chain estimate of their peak; a depth is skipped
    when its loose bound, or (1F1B, GPipe) the exact greedy test against the least peak found so
    far, shows it cannot do better; otherwise a min-max DP gives its exact peak."""
    todo: list[tuple[float, float, int, int, int, int, int]] = []
    for index, (f, variant) in enumerate(options):
        fam = families[f]
        tab = search.tables_of(f)
        p_all, d_all, m_all = search.grid(fam, len(fam.layers), variant)
        loose = tab.loose_memory_bound(search.max_zero_stage)
        n = tab.n
        mean_state = float(tab.state(variant.zero_stage, NO_SHARDS)[0, n - 1]) / n
        mean_saved = float(tab.saved[0, n - 1]) / n
        for p in np.unique(p_all).tolist():
            # the largest d of every p: the least model state and the fewest micro-batches in
            # flight -- but interleaved, a micro-batch count that p does not divide runs in larger
            # groups (timing.micro_batch_group_size) and may hold more in flight than a larger
            # one: those rows too, each
            rows = np.flatnonzero(p_all == p).tolist()
            kept = rows[-1:]
            if variant.chunks > 1:
                divided = [row for row in rows if m_all[row] % p == 0]
                kept = divided[-1:] + [row for row in rows if m_all[row] % p]
            for row in kept:
                d, m = int(d_all[row]), int(m_all[row])
                k = np.array(in_flight_per_position(variant.schedule, p, m, variant.chunks), float)
                estimate = n / float(np.sum(1.0 / (mean_state + k * mean_saved + 1.0)))
                todo.append((estimate, float(loose[p * variant.chunks]), index, f, p, d, m))
    todo.sort()
    cache = TableCache()
    meter = search.meter
    ties: list[tuple[int, int, int, int, int]] = []  # (index, f, p, d, m) reaching ``least``
    least = np.inf
    for _, bound, index, f, p, d, m in todo:
        if bound > least * (1 + 1e-9):
            continue
        variant = options[index][1]
        tab = search.tables_of(f)
        if variant.chunks > 1:
            peak = _interleaved_peak(search, Candidate(f, variant, p, d, m))[0]
            if peak < least:
                least, ties = peak, []
            if peak == least and np.isfinite(peak):
                ties.append((index, f, p, d, m))
            continue
        block = _memory_blocks(tab, variant, p, d, m, (cache, f))
        if np.isfinite(least):
            meter.charge(2 * p * tab.n)
            if not fits_greedily(_column(block), tab.n, p, least):
                continue  # every split of this depth needs more than the least peak so far
            if not fits_greedily(_column(block), tab.n, p, float(np.nextafter(least, -np.inf))):
                ties.append((index, f, p, d, m))  # exactly the least peak
                continue
        meter.charge(dp_cells(tab.n, p))
        peak = min_max(block, tab.n, p)
        if peak < least:
            least, ties = peak, []
        if peak == least:
            ties.append((index, f, p, d, m))
    best: Closest | None = None
    for index, f, p, d, _m in ties:  # the fewest devices reaching the least peak
        variant = options[index][1]
        fam = families[f]
        tab = search.tables_of(f)
        p_all, d_all, m_all = search.grid(fam, len(fam.layers), variant)
        for row in np.flatnonzero(p_all == p).tolist():
            d_row, m_row = int(d_all[row]), int(m_all[row])
            if variant.chunks > 1:
                row_cand = Candidate(f, variant, p, d_row, m_row)
                fits = d_row == d or _interleaved_peak(search, row_cand)[0] <= least
            else:
                block = _memory_blocks(tab, variant, p, d_row, m_row, (cache, f))
                meter.charge(dp_cells(tab.n, p) + p * tab.n)
                fits = d_row == d or fits_greedily(_column(block), tab.n, p, least)
            if fits:
                candidate = Closest(least, fam.tp * fam.cp * p * d_row, p, f, d_row, m_row, variant)
                if best is None or candidate.order < best.order:
                    best = candidate
                break
    return best


def _column(block: Block) -> Callable[[int, int, int], FloatArray]:
    """``kernels.fits_greedily``'s column function of a DP block function."""
    def column(c: int, lo: int, x: int) -> FloatArray:
        return block(c, slice(lo, x), slice(x - 1, x))[:, 0]
    return column


def _memory_blocks(tab: SegmentTables, variant: Variant, p: int, d: int, m: int,
                   cache: tuple[TableCache, int] | None = None) -> Block:
    """The DP block function of a GPipe or 1F1B candidate's per-stage memory need, in bytes
    (full tables per in-flight count kept in ``cache``, a table cache and the family's index,
    when given)."""
    in_flight = in_flight_per_position(variant.schedule, p, m, variant.chunks)
    zs = variant.zero_stage
    shards = tab.shards(zs, d)
    if cache is None:
        def block(c: int, rows: slice, cols: slice) -> FloatArray:
            return tab.memory(in_flight[c], zs, shards, rows, cols)
        return block

    tables, family = cache

    def cached(c: int, rows: slice, cols: slice) -> FloatArray:
        key = (in_flight[c], zs, shards)
        table: FloatArray = tables.get((family, *key), lambda: tab.memory(*key))
        return table[rows, cols]
    return cached
