"""Critical-path list scheduling of one layer: the heuristic backend, and the upper
bound and warm start of the exact ones.

:func:`list_schedule` runs several passes and keeps the shortest schedule:

* greedy: repeatedly take the ready op (all predecessors placed) with the
  longest path to a sink -- every op counted at ``min(single_s, all_s)``, ties
  to the smaller id -- and append it to a
  :class:`~archplace.scheduling.timeline.Timeline` in whichever mode ends earlier
  (single on ties);
* the same priority and mode rule with *backfilling*: an op starts at the
  earliest time from which its mode's cores are free for its whole duration
  (for "all": the whole chip idle), even before ops placed earlier;
* target passes, for a target makespan T, also with backfilling.  First the
  modes are planned on the DAG alone: every op starts in its shorter mode, and,
  in topological order (forward) or reverse order (backward), an op is switched
  to single mode when the longest path through it, with the modes chosen so
  far, still fits in T (each path's last switched op saw that path in full, so
  every path fits).  Then ops are placed by latest start ``T - tail - duration``
  (critical ops first, so the "all" ops of the critical path are placed before
  the long single ops that fill the gaps around them); an op planned single
  runs single if it still ends in time (``end + tail ≤ T``), otherwise in the
  mode that ends earlier; an op planned "all" runs single if that ends no later.
  Targets: the quick lower bound times 1, 1.05, 1.05², ... while below the best
  makespan found, at most :data:`MAX_TARGETS`, each planned forward and backward (a
  backward plan equal to the forward one is the same pass, run once).

Every pass ends by replaying its start order and modes through
:func:`~archplace.scheduling.timeline.serial_schedule`, which assigns core indices
and never ends later, so every result is valid.  The passes replay without building
a schedule (:class:`_Cores`: the same floats, no core indices); only the winner's
schedule is built, and :func:`list_schedule_makespan_s` (what the design search
uses) builds none.  A pass replaced the best only when strictly shorter, so once the
best reaches the longest path of shortest latencies summed from the sources
(:meth:`_Graph.floor_s`, which no replay can beat even in floating point) the
remaining passes are skipped: the same schedule as running them all.

Measured against CP-SAT on the blocks of gpt2-xl, bert-large, opt-350m and
llama2-7b (sequence 1024 and 4096; TP 1 and 8) on 2+1, 8+2, 32+8 and 128+4
tensor+vector cores: the greedy pass alone is up to ~27 % above the optimum on
backward graphs -- it runs the weight-gradient matmuls in "all" mode
as soon as they are ready, where the optimum runs them on single cores beside
the long vector-core chains of attention -- and the best of all passes is
within ~6 %, mostly under 1 %.  A pass costs O(n·p + e log n) for n ops, e edges
and p distinct event times (p ≤ 2n), with no per-core work.
"""

from __future__ import annotations

import bisect
import heapq
import math

from archplace.scheduling.bounds import bottom_levels_s, lower_bound_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import (
    Mode,
    Schedule,
    ScheduledOp,
    Timeline,
    ordered_by,
    serial_schedule,
)
from archplace.workload.graph import CoreType

__all__ = ["Mode", "Schedule", "ScheduledOp", "Timeline", "bottom_levels_s", "list_schedule",
           "list_schedule_makespan_s", "lower_bound_s", "quick_lower_bound_s", "serial_schedule"]

TARGET_STEP = 1.05  # ratio of successive targets
MAX_TARGETS = 12

_Pass = tuple[list[int], list[Mode]]
"""A pass's outcome: the start order (a topological order) and each op's mode."""
_Plan = tuple[list[bool], list[float], list[float]]
"""A target's planned modes (True = single), durations and tails (:func:`_plan`)."""


class _Graph:
    """A problem as plain lists (attribute access on the ops is the scheduler's hot path):
    predecessors, successors, latencies, which core types each op holds in single mode."""

    __slots__ = ("capacity", "every", "n", "preds", "problem", "shortest", "single", "succs",
                 "tensor", "vector")

    def __init__(self, problem: ScheduleProblem) -> None:
        ops = problem.ops
        self.problem = problem
        self.n = len(ops)
        self.preds = [op.preds for op in ops]
        self.succs = problem.successors()
        self.single = [op.single_s for op in ops]
        self.every = [op.all_s for op in ops]
        self.shortest = [op.min_s for op in ops]
        self.tensor = [op.uses(CoreType.TENSOR) for op in ops]
        self.vector = [op.uses(CoreType.VECTOR) for op in ops]
        self.capacity = (problem.tensor_cores, problem.vector_cores)

    def levels(self) -> list[float]:
        """:func:`~archplace.scheduling.bounds.bottom_levels_s`, the same float operations."""
        succs, shortest = self.succs, self.shortest
        levels = [0.0] * self.n
        for i in range(self.n - 1, -1, -1):
            tail = max((levels[s] for s in succs[i]), default=0.0)
            levels[i] = shortest[i] + tail
        return levels

    def quick_bound_s(self, levels: list[float]) -> float:
        """:func:`quick_lower_bound_s` (n >= 1), the same float operations."""
        work = 0.0
        for cores, flags in ((self.capacity[0], self.tensor), (self.capacity[1], self.vector)):
            work = max(work, sum(min(single / cores, every) for single, every, used
                                 in zip(self.single, self.every, flags, strict=True) if used))
        return max(max(levels), work)

    def floor_s(self) -> float:
        """The longest path of shortest latencies, added from the sources forward.

        Every pass's makespan is at least this, in floating point too: a replayed op ends at
        ``fl(start + duration)`` with ``start`` at least its predecessors' ends and ``duration``
        at least its shortest latency, and rounding is monotone, so by induction each op ends
        no earlier than its entry here.  A pass reaching it is therefore never beaten."""
        preds, shortest = self.preds, self.shortest
        ends = [0.0] * self.n
        for i in range(self.n):
            ends[i] = max((ends[p] for p in preds[i]), default=0.0) + shortest[i]
        return max(ends)


class _Cores:
    """The state of :class:`~archplace.scheduling.timeline.Timeline` that times depend on, without
    core indices: per type the free times of the cores used so far, the last "all" op's end and
    the chip's latest end.  Appends compute the same floats as ``Timeline.append``."""

    __slots__ = ("chip_s", "end", "exclusive_s", "graph", "tensor_free", "vector_free")

    def __init__(self, graph: _Graph) -> None:
        self.graph = graph
        self.end = [0.0] * graph.n
        self.tensor_free: list[float] = []
        self.vector_free: list[float] = []
        self.exclusive_s = 0.0
        self.chip_s = 0.0

    def ready_s(self, i: int) -> float:
        return _latest(self.end, self.graph.preds[i])

    def single_start_s(self, i: int, ready: float) -> float:
        g = self.graph
        start = ready if ready >= self.exclusive_s else self.exclusive_s  # max(), exactly
        if g.tensor[i] and len(self.tensor_free) >= g.capacity[0] and self.tensor_free[0] > start:
            start = self.tensor_free[0]
        if g.vector[i] and len(self.vector_free) >= g.capacity[1] and self.vector_free[0] > start:
            start = self.vector_free[0]
        return start

    def append(self, i: int, mode: Mode, ready: float) -> None:
        g = self.graph
        if mode == "single":
            duration = g.single[i]
            if duration == 0:
                end = ready
            else:
                end = self.single_start_s(i, ready) + duration
                if g.tensor[i]:
                    _take(self.tensor_free, g.capacity[0], end)
                if g.vector[i]:
                    _take(self.vector_free, g.capacity[1], end)
        else:
            duration = g.every[i]
            if duration == 0:
                end = ready
            else:
                end = (self.chip_s if self.chip_s > ready else ready) + duration
                self.exclusive_s = end
        self.end[i] = end
        if end > self.chip_s:
            self.chip_s = end


def _latest(end: list[float], ids: tuple[int, ...]) -> float:
    """``max((end[p] for p in ids), default=0.0)``, the same value (the first largest)."""
    if not ids:
        return 0.0
    latest = end[ids[0]]
    for p in ids:
        value = end[p]
        if value > latest:
            latest = value
    return latest


def _longest(values: list[float], extra: list[float], ids: list[int] | tuple[int, ...]) -> float:
    """``max((values[j] + extra[j] for j in ids), default=0.0)``, the same value."""
    if not ids:
        return 0.0
    first = ids[0]
    longest = values[first] + extra[first]
    for j in ids:
        value = values[j] + extra[j]
        if value > longest:
            longest = value
    return longest


def _take(free: list[float], cores: int, busy_until_s: float) -> None:
    """Occupy the core of a type that frees earliest (an unused one first)."""
    if len(free) < cores:
        heapq.heappush(free, busy_until_s)
    else:
        heapq.heapreplace(free, busy_until_s)


def _replay_s(graph: _Graph, outcome: _Pass) -> float:
    """Makespan of ``serial_schedule(problem, order, modes)``, the same floats, no schedule built.

    Raises:
        SolverError: the makespan is not finite (as :func:`serial_schedule`).
    """
    order, modes = outcome
    cores = _Cores(graph)
    for i in order:
        cores.append(i, modes[i], cores.ready_s(i))
    if not math.isfinite(cores.chip_s):
        serial_schedule(graph.problem, order, modes)  # raises its SolverError
    return cores.chip_s


def quick_lower_bound_s(problem: ScheduleProblem) -> float:
    """The larger of the critical path (ops at their shorter latency) and the work bound
    of all ops (:mod:`archplace.scheduling.bounds`), seconds; O(n + e)."""
    if not problem.ops:
        return 0.0
    graph = _Graph(problem)
    return graph.quick_bound_s(graph.levels())


class _Profile:
    """Core usage over time, as segments ``[times[k], times[k+1])`` (the last one open):
    tensor and vector cores in use by single ops, and whether an "all" op runs."""

    __slots__ = ("capacity", "exclusive", "tensor", "times", "vector")

    def __init__(self, capacity: tuple[int, int]) -> None:
        self.capacity = capacity
        self.times = [0.0]
        self.tensor = [0]
        self.vector = [0]
        self.exclusive = [False]

    def earliest(self, ready_s: float, duration_s: float, tensor: bool, vector: bool,
                 exclusive: bool) -> float:
        """Earliest start ≥ ``ready_s`` with the cores free for ``duration_s`` (> 0)."""
        times, busy_t, busy_v, excl = self.times, self.tensor, self.vector, self.exclusive
        cap_t, cap_v = self.capacity
        j = bisect.bisect_right(times, ready_s) - 1
        start = ready_s
        count = len(times)
        while j < count and times[j] < start + duration_s:
            if excl[j] or (busy_t[j] > 0 or busy_v[j] > 0 if exclusive
                           else (tensor and busy_t[j] >= cap_t) or (vector and busy_v[j] >= cap_v)):
                start = times[j + 1]  # the open last segment is never blocked
            j += 1
        return start

    def _split(self, t: float) -> int:
        k = bisect.bisect_right(self.times, t) - 1
        if self.times[k] == t:
            return k
        self.tensor.insert(k + 1, self.tensor[k])
        self.vector.insert(k + 1, self.vector[k])
        self.exclusive.insert(k + 1, self.exclusive[k])
        self.times.insert(k + 1, t)
        return k + 1

    def add(self, start_s: float, end_s: float, tensor: bool, vector: bool,
            exclusive: bool) -> None:
        """Occupy ``[start_s, end_s)``."""
        first, last = self._split(start_s), self._split(end_s)
        for k in range(first, last):
            if exclusive:
                self.exclusive[k] = True
            else:
                self.tensor[k] += tensor
                self.vector[k] += vector


def _greedy_pass(graph: _Graph, levels: list[float]) -> tuple[_Pass, float]:
    """The greedy pass (module docstring) and its makespan."""
    succs, single, every = graph.succs, graph.single, graph.every
    waiting = [len(p) for p in graph.preds]
    ready = [(-levels[i], i) for i in range(graph.n) if waiting[i] == 0]
    heapq.heapify(ready)
    cores = _Cores(graph)
    order: list[int] = []
    modes: list[Mode] = ["single"] * graph.n
    while ready:
        _, i = heapq.heappop(ready)
        ready_s = cores.ready_s(i)
        all_end = ready_s if every[i] == 0 else max(ready_s, cores.chip_s) + every[i]
        single_end = ready_s if single[i] == 0 else cores.single_start_s(i, ready_s) + single[i]
        mode: Mode = "all" if all_end < single_end else "single"
        cores.append(i, mode, ready_s)
        order.append(i)
        modes[i] = mode
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (-levels[s], s))
    outcome = (order, modes)
    if not math.isfinite(cores.chip_s):
        serial_schedule(graph.problem, order, modes)  # raises its SolverError
    return outcome, cores.chip_s


def _greedy(problem: ScheduleProblem, succs: list[list[int]]) -> Schedule:
    """The greedy pass's schedule (``succs`` is ``problem.successors()``; kept for callers that
    pass it)."""
    graph = _Graph(problem)
    (order, modes), _ = _greedy_pass(graph, graph.levels())
    return serial_schedule(problem, order, modes)


def _plan(graph: _Graph, target_s: float | None, forward: bool) -> _Plan:
    """Planned modes (True = single), durations and tails (longest path after each op).

    ``target_s=None``: every op in its shorter mode.
    """
    n, preds, succs = graph.n, graph.preds, graph.succs
    singles, everys = graph.single, graph.every
    duration = list(graph.shortest)
    single = [s <= a for s, a in zip(singles, everys, strict=True)]
    if target_s is not None:
        before = [0.0] * n  # longest path into each op, with the modes planned so far
        after = [0.0] * n
        if forward:
            for i in range(n - 1, -1, -1):
                after[i] = _longest(after, duration, succs[i])
        else:
            for i in range(n):
                before[i] = _longest(before, duration, preds[i])
        for i in (range(n) if forward else range(n - 1, -1, -1)):
            if forward:
                before[i] = _longest(before, duration, preds[i])
            else:
                after[i] = _longest(after, duration, succs[i])
            if 0 < everys[i] < singles[i] and before[i] + singles[i] + after[i] <= target_s:
                single[i], duration[i] = True, singles[i]
    tails = [0.0] * n
    for i in range(n - 1, -1, -1):
        tails[i] = _longest(tails, duration, succs[i])
    return single, duration, tails


def _topological_by(graph: _Graph, key: list[float]) -> list[int]:
    """:func:`~archplace.scheduling.timeline.topological_by` with the graph's successor lists."""
    return ordered_by(graph.succs, [len(p) for p in graph.preds], key)


def _profile_pass(graph: _Graph, target_s: float | None, forward: bool = True,
                  plan: _Plan | None = None) -> _Pass:
    """One backfilling pass (module docstring); ``target_s=None`` is the greedy rule.

    ``plan``: ``_plan(graph, target_s, forward)`` when the caller has it.  The pass depends on
    nothing but ``target_s`` and the plan, whose durations and tails follow from its modes."""
    n, preds, succs = graph.n, graph.preds, graph.succs
    singles, everys, shortest = graph.single, graph.every, graph.shortest
    tensors, vectors = graph.tensor, graph.vector
    single, duration, tails = _plan(graph, target_s, forward) if plan is None else plan
    if target_s is None:
        key = [(-(tails[i] + duration[i]), i) for i in range(n)]
    else:
        key = [(target_s - tails[i] - duration[i], i) for i in range(n)]
    profile = _Profile(graph.capacity)
    start = [0.0] * n
    end = [0.0] * n
    modes: list[Mode] = ["single"] * n
    waiting = [len(p) for p in preds]
    ready = [key[i] for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    while ready:
        _, i = heapq.heappop(ready)
        one_s, all_s = singles[i], everys[i]
        ready_s = _latest(end, preds[i])
        tensor, vector = tensors[i], vectors[i]
        mode: Mode = "single" if one_s <= all_s else "all"
        begin = ready_s
        if shortest[i] > 0:
            one = profile.earliest(ready_s, one_s, tensor, vector, False)
            begin = one
            if 0 < all_s < one_s:
                every = profile.earliest(ready_s, all_s, True, True, True)
                one_end, every_end = one + one_s, every + all_s
                if target_s is not None and single[i]:
                    keep = one_end + tails[i] <= target_s or one_end <= every_end
                else:
                    keep = one_end <= every_end
                mode = "single" if keep else "all"
                begin = one if keep else every
            length = one_s if mode == "single" else all_s
            profile.add(begin, begin + length, tensor, vector, mode == "all")
        modes[i] = mode
        start[i] = begin
        end[i] = begin + (one_s if mode == "single" else all_s)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, key[s])
    return _topological_by(graph, start), modes


def _best_pass(problem: ScheduleProblem, max_targets: int) -> tuple[_Graph, _Pass, float]:
    """The passes of the module docstring; the first of the shortest, and its makespan."""
    graph = _Graph(problem)
    levels = graph.levels()
    best, best_s = _greedy_pass(graph, levels)
    floor_s = graph.floor_s()
    if best_s <= floor_s:  # no pass ends earlier (:meth:`_Graph.floor_s`)
        return graph, best, best_s
    candidate = _profile_pass(graph, None)
    candidate_s = _replay_s(graph, candidate)
    if candidate_s < best_s:
        best, best_s = candidate, candidate_s
    target = graph.quick_bound_s(levels)
    for _ in range(max_targets):
        if target >= best_s:
            break
        planned: list[bool] | None = None
        for forward in (True, False):
            if best_s <= floor_s:
                return graph, best, best_s
            plan = _plan(graph, target, forward)
            if plan[0] == planned:  # the forward pass again: it cannot be shorter than itself
                continue
            planned = plan[0]
            candidate = _profile_pass(graph, target, forward, plan)
            candidate_s = _replay_s(graph, candidate)
            if candidate_s < best_s:
                best, best_s = candidate, candidate_s
        target *= TARGET_STEP
    return graph, best, best_s


def list_schedule(problem: ScheduleProblem, *, max_targets: int = MAX_TARGETS) -> Schedule:
    """The shortest schedule of the passes in the module docstring.

    Args:
        problem: the layer.
        max_targets: at most this many targets (two passes each); 0 = only the two
            greedy passes (several times faster, up to ~27 % longer on backward graphs).

    Returns:
        A valid :class:`Schedule`; makespan 0 for an empty problem.  Deterministic.

    Raises:
        SolverError: latencies whose sum overflows a float.
    """
    if not problem.ops:
        return Schedule(0.0, ())
    _, (order, modes), _ = _best_pass(problem, max_targets)
    return serial_schedule(problem, order, modes)


def list_schedule_makespan_s(problem: ScheduleProblem, *, max_targets: int = MAX_TARGETS) -> float:
    """``list_schedule(problem, max_targets=max_targets).makespan_s`` without building the
    schedule (the same float), seconds."""
    if not problem.ops:
        return 0.0
    return _best_pass(problem, max_targets)[2]
