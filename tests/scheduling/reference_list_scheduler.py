"""The list scheduler as it was before the speed-ups of issue 15 (early stop at the path floor,
plain-list passes, makespan-only replays), kept verbatim as the reference that
``test_list_scheduler_equal.py`` compares the current one with: same schedules, same makespans.
"""

from __future__ import annotations

import bisect
import heapq

from archplace.scheduling.bounds import bottom_levels_s, lower_bound_s
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.scheduling.timeline import (
    Mode,
    Schedule,
    ScheduledOp,
    Timeline,
    serial_schedule,
    topological_by,
)
from archplace.workload.graph import CoreType

__all__ = ["Mode", "Schedule", "ScheduledOp", "Timeline", "bottom_levels_s", "list_schedule",
           "lower_bound_s", "quick_lower_bound_s", "serial_schedule"]

TARGET_STEP = 1.05  # ratio of successive targets
MAX_TARGETS = 12


def quick_lower_bound_s(problem: ScheduleProblem) -> float:
    """The larger of the critical path (ops at their shorter latency) and the work bound
    of all ops (:mod:`archplace.scheduling.bounds`), seconds; O(n + e)."""
    if not problem.ops:
        return 0.0
    work = 0.0
    for core_type in (CoreType.TENSOR, CoreType.VECTOR):
        cores = problem.cores(core_type)
        work = max(work, sum(min(op.single_s / cores, op.all_s)
                             for op in problem.ops if op.uses(core_type)))
    return max(max(bottom_levels_s(problem)), work)


class _Profile:
    """Core usage over time, as segments ``[times[k], times[k+1])`` (the last one open):
    tensor and vector cores in use by single ops, and whether an "all" op runs."""

    def __init__(self, problem: ScheduleProblem) -> None:
        self.capacity = (problem.tensor_cores, problem.vector_cores)
        self.times = [0.0]
        self.tensor = [0]
        self.vector = [0]
        self.exclusive = [False]

    def _blocked(self, k: int, tensor: bool, vector: bool, exclusive: bool) -> bool:
        if self.exclusive[k]:
            return True
        if exclusive:
            return self.tensor[k] > 0 or self.vector[k] > 0
        return ((tensor and self.tensor[k] >= self.capacity[0])
                or (vector and self.vector[k] >= self.capacity[1]))

    def earliest(self, ready_s: float, duration_s: float, tensor: bool, vector: bool,
                 exclusive: bool) -> float:
        """Earliest start ≥ ``ready_s`` with the cores free for ``duration_s`` (> 0)."""
        times = self.times
        k = bisect.bisect_right(times, ready_s) - 1
        start = ready_s
        j = k
        while j < len(times) and times[j] < start + duration_s:
            if self._blocked(j, tensor, vector, exclusive):
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


def _greedy(problem: ScheduleProblem, succs: list[list[int]]) -> Schedule:
    ops = problem.ops
    priority = bottom_levels_s(problem)
    waiting = [len(op.preds) for op in ops]
    ready = [(-priority[i], i) for i in range(len(ops)) if waiting[i] == 0]
    heapq.heapify(ready)
    timeline = Timeline(problem)
    while ready:
        _, i = heapq.heappop(ready)
        op = ops[i]
        mode: Mode = "all" if timeline.end_if(op, "all") < timeline.end_if(op, "single") \
            else "single"
        timeline.append(op, mode)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (-priority[s], s))
    return timeline.schedule()


def _flexible(op: SchedOp) -> bool:
    """Both modes worth considering: "all" is shorter, and takes time."""
    return 0 < op.all_s < op.single_s


def _plan(problem: ScheduleProblem, succs: list[list[int]], target_s: float | None,
          forward: bool) -> tuple[list[bool], list[float], list[float]]:
    """Planned modes (True = single), durations and tails (longest path after each op).

    ``target_s=None``: every op in its shorter mode.
    """
    ops = problem.ops
    n = len(ops)
    duration = [op.min_s for op in ops]
    single = [op.single_s <= op.all_s for op in ops]
    if target_s is not None:
        before = [0.0] * n  # longest path into each op, with the modes planned so far
        after = [0.0] * n
        if forward:
            for op in reversed(ops):
                after[op.id] = max((after[s] + duration[s] for s in succs[op.id]), default=0.0)
        else:
            for op in ops:
                before[op.id] = max((before[p] + duration[p] for p in op.preds), default=0.0)
        for i in (range(n) if forward else range(n - 1, -1, -1)):
            op = ops[i]
            if forward:
                before[i] = max((before[p] + duration[p] for p in op.preds), default=0.0)
            else:
                after[i] = max((after[s] + duration[s] for s in succs[i]), default=0.0)
            if _flexible(op) and before[i] + op.single_s + after[i] <= target_s:
                single[i], duration[i] = True, op.single_s
    tails = [0.0] * n
    for op in reversed(ops):
        tails[op.id] = max((tails[s] + duration[s] for s in succs[op.id]), default=0.0)
    return single, duration, tails


def _profile_pass(problem: ScheduleProblem, succs: list[list[int]], target_s: float | None,
                  forward: bool = True) -> Schedule:
    """One backfilling pass (module docstring); ``target_s=None`` is the greedy rule."""
    ops = problem.ops
    n = len(ops)
    single, duration, tails = _plan(problem, succs, target_s, forward)
    if target_s is None:
        key = [(-(tails[i] + duration[i]), i) for i in range(n)]
    else:
        key = [(target_s - tails[i] - duration[i], i) for i in range(n)]
    profile = _Profile(problem)
    start = [0.0] * n
    end = [0.0] * n
    modes: list[Mode] = ["single"] * n
    waiting = [len(op.preds) for op in ops]
    ready = [key[i] for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    while ready:
        _, i = heapq.heappop(ready)
        op = ops[i]
        ready_s = max((end[p] for p in op.preds), default=0.0)
        tensor = op.uses(CoreType.TENSOR)
        vector = op.uses(CoreType.VECTOR)
        mode: Mode = "single" if op.single_s <= op.all_s else "all"
        begin = ready_s
        if op.min_s > 0:
            one = profile.earliest(ready_s, op.single_s, tensor, vector, False)
            begin = one
            if _flexible(op):
                every = profile.earliest(ready_s, op.all_s, True, True, True)
                one_end, every_end = one + op.single_s, every + op.all_s
                if target_s is not None and single[i]:
                    keep = one_end + tails[i] <= target_s or one_end <= every_end
                else:
                    keep = one_end <= every_end
                mode = "single" if keep else "all"
                begin = one if keep else every
            length = op.single_s if mode == "single" else op.all_s
            profile.add(begin, begin + length, tensor, vector, mode == "all")
        modes[i] = mode
        start[i] = begin
        end[i] = begin + (op.single_s if mode == "single" else op.all_s)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, key[s])
    return serial_schedule(problem, topological_by(problem, start), modes)


def list_schedule(problem: ScheduleProblem, *, max_targets: int = MAX_TARGETS) -> Schedule:
    """The shortest schedule of the passes in the module docstring.

    Args:
        problem: the layer.
        max_targets: at most this many targets (two passes each); 0 = only the two
            greedy passes (several times faster, up to ~27 % longer on backward graphs).

    Returns:
        A valid :class:`Schedule`; makespan 0 for an empty problem.  Deterministic.
    """
    if not problem.ops:
        return Schedule(0.0, ())
    succs = problem.successors()
    best = _greedy(problem, succs)
    candidate = _profile_pass(problem, succs, None)
    if candidate.makespan_s < best.makespan_s:
        best = candidate
    target = quick_lower_bound_s(problem)
    for _ in range(max_targets):
        if target >= best.makespan_s:
            break
        for forward in (True, False):
            candidate = _profile_pass(problem, succs, target, forward)
            if candidate.makespan_s < best.makespan_s:
                best = candidate
        target *= TARGET_STEP
    return best
