"""Critical-path list scheduler and lower bounds for the per-layer problem.

Semantics (PHAZE, ICML 2024; DESIGN.md, Per-layer scheduling): each op runs
either on ONE core of its type (``single_s``) or on ALL cores of its type
(``all_s``); while an "all" op runs nothing else runs on the chip.

:func:`list_schedule` is a serial schedule-generation scheme.  It repeatedly
takes the ready op (all predecessors placed) with the highest priority -- the
longest path from the op to a sink, counting every op at ``min(single_s, all_s)``;
ties go to the smaller id -- and appends it in whichever mode ends earlier
(single on ties):

* single: on the core of its type that frees earliest, starting at
  ``max(predecessors' ends, that core's free time, end of the last "all" op)``;
* all: starting at ``max(predecessors' ends, the latest free time of every core)``.

Ops are only ever appended after everything they could conflict with, so the
result is always a valid schedule; it is an upper bound on the optimum.  It
runs in O((n + e) log n) for n ops and e edges: no per-core work, so designs
with thousands of cores cost the same as small ones.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Literal

from archplace.schedule.problem import ScheduleProblem
from archplace.workload.graph import CoreType

Mode = Literal["single", "all"]


@dataclass(frozen=True, slots=True)
class ScheduledOp:
    """Placement of one op.

    Attributes:
        id: the op's id in the problem.
        start_s, end_s: start and end time, seconds from the start of the layer.
        mode: ``"single"`` (one core) or ``"all"`` (every core of its type; exclusive).
        core: index (0-based, among the cores of the op's type) of the core a "single"
            op runs on; ``None`` for "all".
    """

    id: int
    start_s: float
    end_s: float
    mode: Mode
    core: int | None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule of one layer: makespan (seconds) and one :class:`ScheduledOp` per op, by id."""

    makespan_s: float
    ops: tuple[ScheduledOp, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``{"makespan_s", "ops": [{"id", "start_s", "end_s", "mode", "core"}]}``."""
        return {
            "makespan_s": self.makespan_s,
            "ops": [{"id": o.id, "start_s": o.start_s, "end_s": o.end_s, "mode": o.mode,
                     "core": o.core} for o in self.ops],
        }


def _successors(problem: ScheduleProblem) -> list[list[int]]:
    succs: list[list[int]] = [[] for _ in problem.ops]
    for op in problem.ops:
        for p in op.preds:
            succs[p].append(op.id)
    return succs


def bottom_levels_s(problem: ScheduleProblem) -> list[float]:
    """For each op, the longest path from its start to a sink, each op counted at
    ``min(single_s, all_s)`` (its own latency included), in seconds."""
    succs = _successors(problem)
    levels = [0.0] * len(problem.ops)
    for op in reversed(problem.ops):
        tail = max((levels[s] for s in succs[op.id]), default=0.0)
        levels[op.id] = op.min_s + tail
    return levels


def lower_bound_s(problem: ScheduleProblem) -> float:
    """A lower bound on the optimal makespan, in seconds: the larger of

    * the critical path, every op counted at ``min(single_s, all_s)``;
    * for each core type T with c cores, ``Σ_{ops of T} min(single_s / c, all_s)``.
      Proof: the "all" ops run in disjoint intervals of total length E during which
      nothing else runs, and the single-mode ops of T fit on c cores in the rest, so
      ``makespan ≥ E + Σ_single single_s / c``; each op of T adds at least the smaller
      of its two terms.

    0 for an empty problem.
    """
    if not problem.ops:
        return 0.0
    critical = max(bottom_levels_s(problem))
    work = 0.0
    for core_type in (CoreType.TENSOR, CoreType.VECTOR):
        cores = problem.cores(core_type)
        work = max(work, sum(min(op.single_s / cores, op.all_s)
                             for op in problem.ops if op.core_type is core_type))
    return max(critical, work)


def list_schedule(problem: ScheduleProblem) -> Schedule:
    """Critical-path list schedule of ``problem`` (rules in the module docstring).

    Returns:
        A valid :class:`Schedule`; makespan 0 for an empty problem.
    """
    ops = problem.ops
    n = len(ops)
    if n == 0:
        return Schedule(0.0, ())
    priority = bottom_levels_s(problem)
    succs = _successors(problem)
    waiting = [len(op.preds) for op in ops]
    ready = [(-priority[i], i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)

    type_index = {CoreType.TENSOR: 0, CoreType.VECTOR: 1}
    core_counts = (problem.tensor_cores, problem.vector_cores)
    # Per type: heap of (free time, core) of the cores used so far; unused cores are free at 0.
    busy: tuple[list[tuple[float, int]], list[tuple[float, int]]] = ([], [])
    unused = [0, 0]
    end = [0.0] * n
    placed: list[ScheduledOp | None] = [None] * n
    chip_free = 0.0  # latest end of any op placed so far
    exclusive_end = 0.0  # end of the last "all" op

    while ready:
        _, i = heapq.heappop(ready)
        op = ops[i]
        t = type_index[op.core_type]
        ready_s = max((end[p] for p in op.preds), default=0.0)
        if unused[t] < core_counts[t]:
            core_free, core = 0.0, unused[t]
        else:
            core_free, core = busy[t][0]
        single_start = max(ready_s, core_free, exclusive_end)
        single_end = single_start + op.single_s
        all_start = max(ready_s, chip_free)
        all_end = all_start + op.all_s
        if all_end < single_end:
            placed[i] = ScheduledOp(i, all_start, all_end, "all", None)
            end[i] = exclusive_end = chip_free = all_end
        else:
            if unused[t] < core_counts[t]:
                unused[t] += 1
                heapq.heappush(busy[t], (single_end, core))
            else:
                heapq.heapreplace(busy[t], (single_end, core))
            placed[i] = ScheduledOp(i, single_start, single_end, "single", core)
            end[i] = single_end
            chip_free = max(chip_free, single_end)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (-priority[s], s))

    scheduled = tuple(p for p in placed if p is not None)
    if len(scheduled) != n:  # impossible for a valid ScheduleProblem (preds precede ids)
        raise AssertionError("list scheduler left ops unplaced")
    return Schedule(chip_free, scheduled)
