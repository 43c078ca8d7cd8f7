"""Lower bounds for the per-layer scheduling problem (semantics in
:mod:`archplace.scheduling.problem`).

Two facts give every bound here:

* path: an op takes at least ``min(single_s, all_s)``, and a chain of ops runs one
  after the other;
* work: for a set S of ops and a core type T with c cores, running S takes at
  least ``Σ_{i ∈ S using T} min(single_s_i / c, all_s_i)`` -- the "all" ops of S run
  in disjoint intervals of total length E during which nothing else runs, and S's
  single ops using T fit on c cores in the rest, so the time is at least
  ``E + Σ_single single_s / c``; each op adds at least the smaller of its terms.

:func:`heads_tails_s` applies them to the ancestors and to the descendants of
every op: op j cannot start before its ancestors can all have run (its *head*),
and after it ends its descendants still need their *tail*.  ``head + own + tail``
bounds the makespan; the exact backends also use heads and tails as release
dates and tails of their models.
"""

from __future__ import annotations

from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.graph import CoreType

_TYPES = (CoreType.TENSOR, CoreType.VECTOR)


def bottom_levels_s(problem: ScheduleProblem) -> list[float]:
    """For each op, the longest path from its start to a sink, each op counted at
    ``min(single_s, all_s)`` (its own latency included), in seconds."""
    succs = problem.successors()
    levels = [0.0] * len(problem.ops)
    for op in reversed(problem.ops):
        tail = max((levels[s] for s in succs[op.id]), default=0.0)
        levels[op.id] = op.min_s + tail
    return levels


def _work_s(problem: ScheduleProblem, members: int) -> float:
    """The work bound (module docstring) of the ops whose ids are the set bits of ``members``."""
    totals = dict.fromkeys(_TYPES, 0.0)
    i = 0
    while members:
        if members & 1:
            op = problem.ops[i]
            for t in _TYPES:
                if op.uses(t):
                    totals[t] += min(op.single_s / problem.cores(t), op.all_s)
        members >>= 1
        i += 1
    return max(totals.values())


def heads_tails_s(problem: ScheduleProblem) -> tuple[list[float], list[float]]:
    """For every op j: (head, tail) in seconds, where

    * head_j: no schedule starts j earlier -- the larger of the longest path of
      predecessors ending at j and the work bound of all of j's ancestors;
    * tail_j: no schedule ends less than tail_j after j ends -- the larger of the
      longest path of successors starting after j and the work bound of all of j's
      descendants.
    """
    ops = problem.ops
    n = len(ops)
    succs = problem.successors()
    ancestors = [0] * n
    path_in = [0.0] * n
    for op in ops:
        for p in op.preds:
            ancestors[op.id] |= ancestors[p] | (1 << p)
            path_in[op.id] = max(path_in[op.id], path_in[p] + ops[p].min_s)
    descendants = [0] * n
    path_out = [0.0] * n
    for op in reversed(ops):
        for s in succs[op.id]:
            descendants[op.id] |= descendants[s] | (1 << s)
            path_out[op.id] = max(path_out[op.id], path_out[s] + ops[s].min_s)
    heads = [max(path_in[i], _work_s(problem, ancestors[i])) for i in range(n)]
    tails = [max(path_out[i], _work_s(problem, descendants[i])) for i in range(n)]
    return heads, tails


def lower_bound_s(problem: ScheduleProblem) -> float:
    """A lower bound on the optimal makespan, in seconds: the larger of

    * the work bound of all ops (module docstring), and
    * for every op j, ``head_j + min(single_s_j, all_s_j) + tail_j`` (:func:`heads_tails_s`),
      which includes the critical path.

    0 for an empty problem.
    """
    if not problem.ops:
        return 0.0
    heads, tails = heads_tails_s(problem)
    through = max(h + op.min_s + t for h, op, t in zip(heads, problem.ops, tails, strict=True))
    return max(through, _work_s(problem, (1 << len(problem.ops)) - 1))
