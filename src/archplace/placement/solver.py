"""Exact choice of pipeline depth, data-parallel degree and stage boundaries.

Problem (for a given TP width, micro-batch size and recompute policy): over every
pipeline depth p, data-parallel degree d and contiguous split of the layer chain into p
stages, minimise the iteration time of :func:`~archplace.placement.pipeline.evaluate_plan`

    (m + p - 1) * max_j T_j + g_{p,d}(max_j P_j),   m = global_batch / (micro_batch * d),

subject to every stage fitting in HBM. Here g_{p,d} (DP all-reduce + optimizer step) is
non-decreasing in the largest stage's parameter count P.

Method: a dynamic program over suffixes of the chain that keeps, for each state, the
Pareto front of (max P, max T) -- the bi-criteria bottleneck DP, an instance of the
chain-partitioning DPs of PipeDream (Narayanan et al., SOSP 2019) and Piper (Tarnawski
et al., NeurIPS 2021). State (r, i) = the suffix of layers i..n-1 split into r stages,
which are the last r stages of the pipeline. The stage at r-th place from the end has
in-flight count k = min(r, m) and sends its output onwards iff r > 1, so its time and
whether it fits depend on (r, m) only, never on p: one sweep over r = 1, 2, ... yields the
fronts of every depth p at state (p, 0). m enters only through min(r, m), so one sweep
with k = r serves every d with m >= p, and a sweep for a smaller m restarts from the
shared fronts at r = m.

Why it is exact: the objective is non-decreasing in both max T and max P, so some optimal
plan has a Pareto-optimal (max P, max T) pair; the front of a state is the Pareto filter
of {(max(P_seg, P'), max(T_seg, T')) : first stage [i, e] that fits, (P', T') in the front
of (r - 1, e + 1)}, and a pair dominated at (r - 1, e + 1) stays dominated after the
max with the first stage, so the recursion loses no Pareto point. Every point of the
front at (p, 0) is scored with the objective, the best is kept, and a split attaining it
is rebuilt greedily (lexicographically smallest first). Stage sums are sequential sums
that ``evaluate_plan`` reproduces bit for bit, so memory feasibility is decided identically
on both sides.

Implementation: P and T are replaced by their ranks among the segments' distinct values
(max commutes with a monotone relabelling), each front point is one int64 key P_rank *
(N_T + 1) + T_rank, and a whole DP layer r is one vectorised step (candidate keys of every
(i, e, front point), a row sort, a running minimum of T_rank, and compaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from archplace.errors import ConfigError, InfeasibleError
from archplace.hardware.cluster import Cluster
from archplace.placement.memory import (
    GRADIENT_BYTES_PER_PARAM,
    OPTIMIZER_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
)
from archplace.placement.pipeline import (
    ADAM_STEP_BYTES_PER_PARAM,
    evaluate_plan,
    group_span,
    plan_memory,
)
from archplace.placement.plan import LayerCost, Plan, PlanResult, Recompute, TrainingSetup
from archplace.units import format_bytes

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

TIE_RTOL = 1e-12
"""Plans whose iteration times agree to this relative tolerance are ties; ties go to fewer
devices, then fewer stages, then the lexicographically smallest stages."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One (p, d) pair: pipeline depth, DP degree, micro-batches per pipeline."""

    p: int
    d: int
    m: int

    @property
    def sweep(self) -> int:
        """Which sweep serves it: 0 (k = r for every stage) when m >= p, else m."""
        return 0 if self.m >= self.p else self.m


def _candidates(n: int, setup: TrainingSetup, micro_batch: int, tp: int) -> list[_Candidate]:
    """Every (p, d) with p <= n, tp * p * d <= devices and micro_batch * d | global_batch."""
    devices = setup.cluster.devices
    out = []
    for p in range(1, min(n, devices // tp) + 1):
        for d in range(1, devices // (tp * p) + 1):
            if setup.global_batch % (micro_batch * d) == 0:
                out.append(_Candidate(p, d, setup.global_batch // (micro_batch * d)))
    return out


class _Tables:
    """Segment figures of the chain: entry [i, e] (e >= i) describes layers i..e as one stage.

    Every sum is sequential from layer i (``numpy.cumsum`` of a row masked before i), the
    order :func:`archplace.placement.memory.sequential_sum` uses, so the figures equal those
    of ``evaluate_plan`` bit for bit.
    """

    def __init__(self, layers: Sequence[LayerCost], cluster: Cluster, tp: int,
                 recompute: Recompute, hbm_bytes: float) -> None:
        n = len(layers)
        self.n = n
        self.hbm_bytes = hbm_bytes
        self.recompute = recompute
        idx = np.arange(n)
        upper: BoolArray = idx[None, :] >= idx[:, None]
        self.upper = upper

        def column(attr: str) -> FloatArray:
            return np.array([float(getattr(layer, attr)) for layer in layers], dtype=np.float64)

        def seg_sum(values: FloatArray) -> FloatArray:
            return np.cumsum(np.where(upper, values[None, :], 0.0), axis=1)

        def seg_max(values: FloatArray) -> FloatArray:
            return np.maximum.accumulate(np.where(upper, values[None, :], -np.inf), axis=1)

        fwd = seg_sum(column("fwd_s"))
        compute = fwd + seg_sum(column("bwd_s"))
        t_last = compute + fwd if recompute is Recompute.FULL else compute
        alpha, beta = cluster.link(group_span(2, tp))
        p2p = 2.0 * (alpha + column("boundary_bytes") / beta)
        t_mid = t_last + p2p[None, :]

        params = np.array([layer.params for layer in layers], dtype=np.int64)
        seg_params = np.cumsum(np.where(upper, params[None, :], 0), axis=1)
        p_float = seg_params.astype(np.float64)
        self.seg_params = seg_params
        self.model_state = ((WEIGHT_BYTES_PER_PARAM * p_float + GRADIENT_BYTES_PER_PARAM * p_float)
                            + OPTIMIZER_BYTES_PER_PARAM * p_float)
        if recompute is Recompute.NONE:
            self.per_micro_batch = seg_sum(column("activation_bytes"))
            self.extra_activation = None
        elif recompute is Recompute.FULL:
            self.per_micro_batch = seg_sum(column("input_bytes"))
            self.extra_activation = seg_max(column("activation_bytes"))
        else:  # pragma: no cover - a later issue adds selective recomputation
            raise ConfigError(f"recompute {recompute!r} is not supported yet")
        self.working = seg_max(column("working_bytes"))

        # Ranks of P and T among the distinct segment values.
        self.p_values: FloatArray = np.unique(p_float[upper])
        self.t_values: FloatArray = np.unique(np.concatenate([t_last[upper], t_mid[upper]]))
        self.n_p = len(self.p_values)
        self.n_t = len(self.t_values)
        self.key_base = self.n_t + 1
        self.sentinel = self.n_p * self.key_base + self.n_t
        self.p_rank: IntArray = np.where(
            upper, np.searchsorted(self.p_values, p_float), self.n_p).astype(np.int64)
        self.t_last_rank: IntArray = np.where(
            upper, np.searchsorted(self.t_values, t_last), self.n_t).astype(np.int64)
        self.t_mid_rank: IntArray = np.where(
            upper, np.searchsorted(self.t_values, t_mid), self.n_t).astype(np.int64)
        self._memory: dict[int, FloatArray] = {}
        self._fits: dict[int, BoolArray] = {}
        self._ranks: dict[int, tuple[IntArray, IntArray, IntArray]] = {}

    def memory(self, k: int) -> FloatArray:
        """Per-device bytes of every segment holding k micro-batches in flight (inf below the
        diagonal), summed in the order of ``StageMemory.total``."""
        cached = self._memory.get(k)
        if cached is None:
            activations = k * self.per_micro_batch
            if self.extra_activation is not None:
                activations = activations + self.extra_activation
            total = (self.model_state + activations) + self.working
            cached = np.where(self.upper, total, np.inf)
            self._memory[k] = cached
        return cached

    def fits(self, k: int) -> BoolArray:
        """Segments that fit in HBM with k micro-batches in flight."""
        cached = self._fits.get(k)
        if cached is None:
            cached = self.memory(k) <= self.hbm_bytes
            self._fits[k] = cached
        return cached

    def ranks(self, k: int) -> tuple[IntArray, IntArray, IntArray]:
        """(P rank, T rank as last stage, T rank as other stage), the sentinel where the segment
        is empty or does not fit with k in flight."""
        cached = self._ranks.get(k)
        if cached is None:
            ok = self.fits(k)
            cached = (np.where(ok, self.p_rank, self.n_p),
                      np.where(ok, self.t_last_rank, self.n_t),
                      np.where(ok, self.t_mid_rank, self.n_t))
            self._ranks[k] = cached
        return cached


Fronts = dict[int, IntArray]
"""r -> int64 array (n + 1, F): row i is the Pareto front of state (r, i) as sorted keys,
padded with the sentinel; row n (the empty suffix) is all sentinel."""


def _sweep(tab: _Tables, fronts: Fronts, in_flight: Callable[[int], int], r_from: int,
           r_to: int) -> None:
    """Extend ``fronts`` with the states r_from..r_to (fronts[r_from - 1] must exist if
    r_from > 1), the stage at place r from the end holding ``in_flight(r)`` micro-batches."""
    n, base, sentinel = tab.n, tab.key_base, tab.sentinel
    for r in range(r_from, r_to + 1):
        p_rank, t_last, t_mid = tab.ranks(in_flight(r))
        out = np.full((n + 1, 1), sentinel, dtype=np.int64)
        if r == 1:
            out[:n, 0] = p_rank[:, n - 1] * base + t_last[:, n - 1]
            fronts[r] = out
            continue
        width = n - r + 1  # first stage [i, e] with 0 <= i <= e < width leaves >= r - 1 layers
        prev = fronts[r - 1][1:width + 1]
        cand_p = np.maximum(p_rank[:width, :width, None], (prev // base)[None, :, :])
        cand_t = np.maximum(t_mid[:width, :width, None], (prev % base)[None, :, :])
        keys = (cand_p * base + cand_t).reshape(width, -1)
        keys.sort(axis=1)
        t = keys % base
        best_before = np.minimum.accumulate(t, axis=1)
        keep = np.empty(keys.shape, dtype=np.bool_)
        keep[:, 0] = t[:, 0] < tab.n_t
        keep[:, 1:] = t[:, 1:] < best_before[:, :-1]
        size = max(int(keep.sum(axis=1).max()), 1)
        keys = np.where(keep, keys, sentinel)
        keys.sort(axis=1)
        out = np.full((n + 1, size), sentinel, dtype=np.int64)
        out[:width] = keys[:, :size]
        fronts[r] = out


def _rebuild(tab: _Tables, fronts: Fronts, in_flight: Callable[[int], int], p: int,
             p_cap: int, t_cap: int) -> tuple[tuple[int, int], ...]:
    """Lexicographically smallest split into p stages with every stage fitting, P rank <= p_cap
    and T rank <= t_cap (such a split must exist)."""
    n, base = tab.n, tab.key_base
    stages = []
    i = 0
    for r in range(p, 0, -1):
        p_rank, t_last, t_mid = tab.ranks(in_flight(r))
        if r == 1:
            if not (p_rank[i, n - 1] <= p_cap and t_last[i, n - 1] <= t_cap):
                raise AssertionError("placement DP: reconstruction lost its way")  # pragma: no cover
            stages.append((i, n - 1))
            break
        ends = np.arange(i, n - r + 1)
        prev = fronts[r - 1][ends + 1]
        rest_ok = ((prev // base <= p_cap) & (prev % base <= t_cap)).any(axis=1)
        ok = (p_rank[i, ends] <= p_cap) & (t_mid[i, ends] <= t_cap) & rest_ok
        hits = np.flatnonzero(ok)
        if not len(hits):
            raise AssertionError("placement DP: reconstruction lost its way")  # pragma: no cover
        e = int(ends[hits[0]])
        stages.append((i, e))
        i = e + 1
    return tuple(stages)


def _in_flight_rule(m: int) -> Callable[[int], int]:
    """1F1B: the stage r-th from the end holds min(r, m) micro-batches (m = 0: no cap)."""
    if m == 0:
        return lambda r: r
    return lambda r: min(r, m)


def _run_sweeps(tab: _Tables, cands: list[_Candidate]) -> dict[int, Fronts]:
    """Fronts for every sweep the candidates need (see :class:`_Candidate.sweep`)."""
    need: dict[int, int] = {}
    for c in cands:
        need[c.sweep] = max(need.get(c.sweep, 0), c.p)
    for m in need:
        if m:  # the m-sweep restarts from the shared fronts at r = m
            need[0] = max(need.get(0, 0), m)
    shared: Fronts = {}
    _sweep(tab, shared, _in_flight_rule(0), 1, need[0])
    out = {0: shared}
    for m, depth in need.items():
        if m:
            fronts = {r: shared[r] for r in range(1, m + 1)}
            _sweep(tab, fronts, _in_flight_rule(m), m + 1, depth)
            out[m] = fronts
    return out


def _objectives(tab: _Tables, cands: list[_Candidate], sweeps: dict[int, Fronts],
                setup: TrainingSetup, tp: int) -> tuple[FloatArray, IntArray]:
    """Iteration time of every front point of every candidate: (objective, keys), both
    shaped (candidates, F), inf / sentinel where there is no point."""
    width = max(sweeps[c.sweep][c.p].shape[1] for c in cands)
    keys = np.full((len(cands), width), tab.sentinel, dtype=np.int64)
    factor = np.empty(len(cands))
    ar_coef = np.empty(len(cands))
    ar_const = np.empty(len(cands))
    for row, c in enumerate(cands):
        front = sweeps[c.sweep][c.p][0]
        keys[row, :len(front)] = front
        factor[row] = c.m + c.p - 1
        if c.d == 1:
            ar_coef[row] = ar_const[row] = 0.0
        else:
            alpha, beta = setup.cluster.link(group_span(c.d, tp * c.p))
            ar_coef[row] = 2.0 * (c.d - 1) / c.d * GRADIENT_BYTES_PER_PARAM / beta
            ar_const[row] = 2.0 * (c.d - 1) * alpha
    p_vals = np.append(tab.p_values, 0.0)[keys // tab.key_base]
    t_vals = np.append(tab.t_values, np.inf)[keys % tab.key_base]
    objective = (factor[:, None] * t_vals
                 + (ar_coef[:, None] * p_vals + ar_const[:, None])
                 + ADAM_STEP_BYTES_PER_PARAM * p_vals / setup.hbm_bandwidth_bytes_per_s)
    return objective, keys


def optimal_plan(layers: Sequence[LayerCost], setup: TrainingSetup, *, micro_batch: int,
                 recompute: Recompute, tp: int = 1) -> PlanResult:
    """The fastest 1F1B plan for a TP width, micro-batch size and recompute policy.

    Searches every pipeline depth p (1 <= p <= len(layers), tp * p <= devices), every DP
    degree d (tp * p * d <= devices, micro_batch * d divides the global batch) and every
    contiguous split of the chain into p stages, minimising ``evaluate_plan``'s iteration
    time exactly (see the module docstring); ties (relative 1e-12) go to fewer devices, then
    smaller p, then the lexicographically smallest stages.

    Returns:
        ``evaluate_plan`` of the chosen plan.

    Raises:
        ConfigError: no layers, or a non-positive micro_batch or tp.
        InfeasibleError: no valid (p, d) exists, or no plan fits in HBM; the message gives the
            candidate that came closest (smallest peak stage memory) and its need in bytes.
    """
    if not layers:
        raise ConfigError("placement needs at least one layer")
    for name, value in (("micro_batch", micro_batch), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    try:
        recompute = Recompute(recompute)
    except ValueError:
        raise ConfigError(f"unknown recompute policy {recompute!r}") from None
    devices = setup.cluster.devices
    if tp > devices:
        raise InfeasibleError(f"no valid plan: tp={tp} exceeds the cluster's {devices} devices")
    if setup.global_batch % micro_batch:
        raise InfeasibleError(f"no valid plan: micro-batch {micro_batch} does not divide the "
                              f"global batch {setup.global_batch}")
    cands = _candidates(len(layers), setup, micro_batch, tp)
    tab = _Tables(layers, setup.cluster, tp, recompute, setup.hbm_bytes)
    sweeps = _run_sweeps(tab, cands)
    objective, keys = _objectives(tab, cands, sweeps, setup, tp)
    best = float(objective.min())
    if not np.isfinite(best):
        _raise_closest(layers, setup, tab, cands, micro_batch, recompute, tp)

    tied_rows, tied_cols = np.nonzero(objective <= best + TIE_RTOL * best)
    order = sorted(set(tied_rows.tolist()), key=lambda row: (cands[row].p * cands[row].d,
                                                             cands[row].p))
    chosen = cands[order[0]]
    rule = _in_flight_rule(chosen.sweep)
    splits = []
    for col in tied_cols[tied_rows == order[0]]:
        key = int(keys[order[0], col])
        splits.append(_rebuild(tab, sweeps[chosen.sweep], rule, chosen.p,
                               key // tab.key_base, _t_slack_rank(tab, key % tab.key_base)))
    plan = Plan(tp=tp, pp=chosen.p, dp=chosen.d, micro_batch=micro_batch, recompute=recompute,
                stages=min(splits))
    return evaluate_plan(layers, setup, plan)


def _t_slack_rank(tab: _Tables, t_rank: int) -> int:
    """Largest T rank within the tie tolerance of ``t_rank`` (so that splits whose bottleneck
    differs from the optimum by rounding only compete on the lexicographic order)."""
    limit = tab.t_values[t_rank] * (1.0 + TIE_RTOL)
    return int(np.searchsorted(tab.t_values, limit, side="right")) - 1


def _raise_closest(layers: Sequence[LayerCost], setup: TrainingSetup, tab: _Tables,
                   cands: list[_Candidate], micro_batch: int, recompute: Recompute,
                   tp: int) -> NoReturn:
    """Raise InfeasibleError naming the candidate whose largest stage needs the least memory.

    A min-max DP over the same suffix states, with the per-device bytes of a stage as the
    bottleneck value (ties: fewer devices, then smaller p, then lexicographic stages).
    """
    n = tab.n
    need: dict[int, int] = {}
    for c in cands:
        need[c.sweep] = max(need.get(c.sweep, 0), c.p)
    peaks: dict[int, dict[int, FloatArray]] = {}
    for m, depth in sorted(need.items()):
        rule = _in_flight_rule(m)
        best: dict[int, FloatArray] = {}
        for r in range(1, depth + 1):
            if m and r <= m and r in peaks.get(0, {}):
                best[r] = peaks[0][r]
                continue
            mem = tab.memory(rule(r))
            out = np.full(n + 1, np.inf)
            if r == 1:
                out[:n] = mem[:, n - 1]
            else:
                width = n - r + 1
                out[:width] = np.maximum(mem[:width, :width],
                                         best[r - 1][None, 1:width + 1]).min(axis=1)
            best[r] = out
        peaks[m] = best
    closest = min(cands, key=lambda c: (peaks[c.sweep][c.p][0], c.p * c.d, c.p))
    peak = peaks[closest.sweep][closest.p][0]
    rule = _in_flight_rule(closest.sweep)
    stages = []
    i = 0
    for r in range(closest.p, 0, -1):
        mem = tab.memory(rule(r))
        if r == 1:
            stages.append((i, n - 1))
            break
        ends = np.arange(i, n - r + 1)
        ok = (mem[i, ends] <= peak) & (peaks[closest.sweep][r - 1][ends + 1] <= peak)
        e = int(ends[np.flatnonzero(ok)[0]])
        stages.append((i, e))
        i = e + 1
    plan = Plan(tp=tp, pp=closest.p, dp=closest.d, micro_batch=micro_batch,
                recompute=recompute, stages=tuple(stages))
    memory = plan_memory(layers, setup, plan)
    worst = max(memory, key=lambda s: s.total)
    raise InfeasibleError(
        f"no plan fits in {format_bytes(setup.hbm_bytes)} HBM: best candidate pp={plan.pp} "
        f"dp={plan.dp} needs {format_bytes(worst.total)} on stage {worst.stage} "
        f"(tp={tp}, micro_batch={micro_batch}, recompute={recompute.value})")
