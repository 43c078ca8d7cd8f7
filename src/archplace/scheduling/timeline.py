"""Schedules and the append-only :class:`Timeline` that builds them.

Semantics (PHAZE: Wang et al., ICML 2024; docs/commands/schedule.md, Semantics):
each op runs either on ONE core of its type (``single_s``; a fused op holds one
tensor and one vector core) or on ALL cores of its type (``all_s``); while an
"all" op runs nothing else runs on the chip.  An op of zero duration holds
nothing (see :mod:`archplace.scheduling.problem`).

A :class:`Timeline` appends ops one at a time:

* single: on the core(s) of its type that free earliest, starting at
  ``max(predecessors' ends, those cores' free times, end of the last "all" op)``;
* all: starting at ``max(predecessors' ends, the latest end of any op placed)``;
* zero duration: at its predecessors' end, holding nothing.

Ops are only ever appended after everything they could conflict with, so the
result is always a valid schedule -- with a finite makespan: latencies whose sum
overflows a float are refused when the schedule is finished, so that neither the
list scheduler nor the exact backends (which retime their answers here) ever
report an infinite makespan, let alone call it optimal.  Appending the ops of ANY valid schedule in
the order of its start times, each in its mode, reproduces it no later (an op
finds a free core by its old start time, because the ops still running then in
the new schedule were running then in the old one); :func:`serial_schedule`
uses this to turn a solver's answer into a concrete schedule with core indices.
Only the cores used so far are tracked, so an append costs O(log n) whatever the
number of cores.
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from archplace.base.errors import ConfigError, SolverError
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.workload.graph import CoreType

Mode = Literal["single", "all"]
_TYPES = (CoreType.TENSOR, CoreType.VECTOR)


@dataclass(frozen=True, slots=True)
class ScheduledOp:
    """Placement of one op.

    Attributes:
        id: the op's id in the problem.
        start_s, end_s: start and end time, seconds from the start of the layer.
        mode: ``"single"`` (one core) or ``"all"`` (every core of its type; exclusive).
        core: for a "single" op, the index (0-based, among the cores of the op's type;
            for a fused op, among the tensor cores) of the core it runs on; ``None`` for "all".
        vector_core: for a "single" fused op, the index of the vector core it also holds;
            ``None`` otherwise.  (Ops of zero duration hold nothing; they report core 0.)
    """

    id: int
    start_s: float
    end_s: float
    mode: Mode
    core: int | None
    vector_core: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "start_s", "end_s", "mode", "core"}``, plus ``"vector_core"`` for fused ops."""
        entry: dict[str, Any] = {"id": self.id, "start_s": self.start_s, "end_s": self.end_s,
                                 "mode": self.mode, "core": self.core}
        if self.vector_core is not None:
            entry["vector_core"] = self.vector_core
        return entry

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduledOp:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            mode = data["mode"]
            if mode not in ("single", "all"):
                raise ValueError(f"mode must be 'single' or 'all', got {mode!r}")
            core, vector = data["core"], data.get("vector_core")
            return cls(int(data["id"]), float(data["start_s"]), float(data["end_s"]), mode,
                       None if core is None else int(core), None if vector is None else int(vector))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid scheduled op: {exc}") from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule of one layer: makespan (seconds) and one :class:`ScheduledOp` per op, by id."""

    makespan_s: float
    ops: tuple[ScheduledOp, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``{"makespan_s", "ops": [ScheduledOp.to_dict(), ...]}``."""
        return {"makespan_s": self.makespan_s, "ops": [o.to_dict() for o in self.ops]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            return cls(float(data["makespan_s"]), tuple(ScheduledOp.from_dict(o) for o in data["ops"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid schedule: {exc}") from None


class Timeline:
    """Append-only placement of ops on the cores of one chip (rules in the module docstring).

    Only the cores used so far are tracked (a heap of free times per type), so the
    cost of a placement does not depend on the number of cores.
    """

    def __init__(self, problem: ScheduleProblem) -> None:
        self._ops = problem.ops
        self._counts = {t: problem.cores(t) for t in _TYPES}
        self._busy: dict[CoreType, list[tuple[float, int]]] = {t: [] for t in _TYPES}
        self._unused = dict.fromkeys(_TYPES, 0)
        self.end_s: list[float | None] = [None] * len(problem.ops)
        self.placed: list[ScheduledOp | None] = [None] * len(problem.ops)
        self.chip_free_s = 0.0  # latest end of any op placed so far
        self.exclusive_end_s = 0.0  # end of the last "all" op

    def ready_s(self, op: SchedOp) -> float:
        """Latest end of ``op``'s predecessors (all must be placed)."""
        ends = [self.end_s[p] for p in op.preds]
        if any(e is None for e in ends):
            raise ValueError(f"op {op.id} appended before its predecessors")
        return max((e for e in ends if e is not None), default=0.0)

    def _earliest_core(self, core_type: CoreType) -> tuple[float, int]:
        if self._unused[core_type] < self._counts[core_type]:
            return 0.0, self._unused[core_type]
        return self._busy[core_type][0]

    def _types(self, op: SchedOp) -> tuple[CoreType, ...]:
        return _TYPES if op.core_type is CoreType.FUSED else (op.core_type,)

    def end_if(self, op: SchedOp, mode: Mode) -> float:
        """End time of ``op`` if it were appended now in ``mode``, seconds."""
        ready = self.ready_s(op)
        if mode == "all":
            return ready if op.all_s == 0 else max(ready, self.chip_free_s) + op.all_s
        if op.single_s == 0:
            return ready
        start = max(ready, self.exclusive_end_s,
                    *(self._earliest_core(t)[0] for t in self._types(op)))
        return start + op.single_s

    def append(self, op: SchedOp, mode: Mode) -> ScheduledOp:
        """Place ``op`` in ``mode`` at the earliest time the rules allow; returns its placement."""
        ready = self.ready_s(op)
        duration = op.single_s if mode == "single" else op.all_s
        if duration == 0:
            placed = ScheduledOp(op.id, ready, ready, mode, *self._zero_cores(op, mode))
        elif mode == "all":
            start = max(ready, self.chip_free_s)
            placed = ScheduledOp(op.id, start, start + duration, "all", None)
            self.exclusive_end_s = placed.end_s
        else:
            types = self._types(op)
            start = max(ready, self.exclusive_end_s,
                        *(self._earliest_core(t)[0] for t in types))
            cores = [self._take_core(t, start + duration) for t in types]
            placed = ScheduledOp(op.id, start, start + duration, "single", cores[0],
                                 cores[1] if len(cores) == 2 else None)
        self.end_s[op.id] = placed.end_s
        self.placed[op.id] = placed
        self.chip_free_s = max(self.chip_free_s, placed.end_s)
        return placed

    @staticmethod
    def _zero_cores(op: SchedOp, mode: Mode) -> tuple[int | None, int | None]:
        if mode == "all":
            return None, None
        return 0, (0 if op.core_type is CoreType.FUSED else None)

    def _take_core(self, core_type: CoreType, busy_until_s: float) -> int:
        if self._unused[core_type] < self._counts[core_type]:
            core = self._unused[core_type]
            self._unused[core_type] += 1
            heapq.heappush(self._busy[core_type], (busy_until_s, core))
        else:
            _, core = self._busy[core_type][0]
            heapq.heapreplace(self._busy[core_type], (busy_until_s, core))
        return core

    def schedule(self) -> Schedule:
        """The finished schedule (every op must be placed).

        Raises:
            SolverError: the makespan is not finite (latencies whose sum overflows a float).
        """
        placed = [p for p in self.placed if p is not None]
        if len(placed) != len(self.placed):
            raise ValueError("schedule requested before every op was placed")
        if not math.isfinite(self.chip_free_s):
            longest = max(max(op.single_s, op.all_s) for op in self._ops)
            raise SolverError(f"the schedule's makespan overflows: {len(self._ops)} ops with latencies up "
                              f"to {longest:.3g} s add up beyond {sys.float_info.max:.3g} s")
        return Schedule(self.chip_free_s, tuple(placed))


def topological_by(problem: ScheduleProblem, key: Sequence[float]) -> list[int]:
    """The ops in increasing ``key`` (ties by id), except that no op comes before its
    predecessors -- the start order of a schedule, robust to solver tolerances."""
    return ordered_by(problem.successors(), [len(op.preds) for op in problem.ops], key)


def ordered_by(succs: Sequence[Sequence[int]], indegree: Sequence[int], key: Sequence[float]) -> list[int]:
    """Kahn's topological order of a DAG given by its successor lists and in-degrees, taking the
    ready op of least ``(key, id)`` first (:func:`topological_by` for any graph form)."""
    waiting = list(indegree)
    ready = [(key[i], i) for i in range(len(waiting)) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (key[s], s))
    return order


def serial_schedule(problem: ScheduleProblem, order: Sequence[int],
                    modes: Sequence[Mode]) -> Schedule:
    """Append the ops in ``order`` (a topological order), op ``i`` in ``modes[i]``.

    Given the order of start times of a valid schedule (ties by id) and its modes,
    the result is valid and ends no later (module docstring).

    Raises:
        ValueError: ``order`` is not a permutation of the ops that respects precedence.
    """
    if sorted(order) != list(range(len(problem.ops))):
        raise ValueError("order must list every op once")
    timeline = Timeline(problem)
    for i in order:
        timeline.append(problem.ops[i], modes[i])
    return timeline.schedule()


