"""Shared by the scheduling tests: an independent validator, a brute-force optimum, and
hypothesis strategies for random DAGs.

Written from the problem statement (docs/commands/schedule.md, Semantics), not from the
schedulers: nothing here imports archplace.scheduling beyond the data classes.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st

from archplace.scheduling.list_scheduler import Schedule, ScheduledOp
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.workload.graph import CoreType

T, V, F = CoreType.TENSOR, CoreType.VECTOR, CoreType.FUSED
TOL = 1e-9


def _holds(op: SchedOp, placed: ScheduledOp) -> set[tuple[CoreType, int | None]]:
    """The (type, index) cores a positive-duration single op holds."""
    if op.core_type is F:
        return {(T, placed.core), (V, placed.vector_core)}
    return {(op.core_type, placed.core)}


def validate(problem: ScheduleProblem, schedule: Schedule) -> None:
    """Fail unless ``schedule`` is a valid schedule of ``problem``.

    Checks: one entry per op, in id order; durations match the mode; precedence;
    core indices in range (a fused single op names a tensor and a vector core); ops
    of positive duration: an "all" op overlaps no other op, single ops holding the
    same core never overlap, and at every instant at most ``cores`` single ops use
    each type; the makespan is the latest end.  An op of zero duration occupies no
    instant and conflicts with nothing.
    """
    ops = problem.ops
    placed = schedule.ops
    assert [p.id for p in placed] == [op.id for op in ops]
    for op, p in zip(ops, placed, strict=True):
        assert p.start_s >= -TOL
        assert p.mode in ("single", "all")
        duration = op.single_s if p.mode == "single" else op.all_s
        assert p.end_s - p.start_s == pytest.approx(duration, abs=TOL)
        if p.mode == "single":
            limit = problem.cores(V if op.core_type is V else T)
            assert p.core is not None and 0 <= p.core < limit
            if op.core_type is F:
                assert p.vector_core is not None and 0 <= p.vector_core < problem.vector_cores
            else:
                assert p.vector_core is None
        else:
            assert p.core is None and p.vector_core is None
        for q in op.preds:
            assert p.start_s >= placed[q].end_s - TOL, f"op {op.id} starts before pred {q} ends"

    timed = [i for i, p in enumerate(placed) if p.end_s - p.start_s > TOL]

    def overlap(a: int, b: int) -> bool:
        return (placed[a].start_s < placed[b].end_s - TOL
                and placed[b].start_s < placed[a].end_s - TOL)

    for x, a in enumerate(timed):
        for b in timed[x + 1:]:
            if not overlap(a, b):
                continue
            assert placed[a].mode == "single" and placed[b].mode == "single", \
                f"'all' op overlaps another: {placed[a]} / {placed[b]}"
            shared = _holds(ops[a], placed[a]) & _holds(ops[b], placed[b])
            assert not shared, f"ops {a} and {b} overlap on core {shared}"
    for core_type in (T, V):
        singles = [placed[i] for i in timed
                   if placed[i].mode == "single" and ops[i].core_type in (core_type, F)]
        for probe in singles:
            running = sum(1 for p in singles if p.start_s <= probe.start_s + TOL < p.end_s)
            assert running <= problem.cores(core_type)
    latest = max((p.end_s for p in placed), default=0.0)
    assert schedule.makespan_s == pytest.approx(latest, abs=TOL)


def optimum_s(problem: ScheduleProblem) -> float:
    """Exact optimal makespan by exhaustive search (small problems only).

    Any schedule, listed by start time, is reproduced no later by appending its ops
    in that order, each in its mode and on its core(s), at the earliest time that
    respects precedence, its cores' previous ops, the last "all" op, and (for an "all"
    op) every op placed so far.  So searching every order, mode and core finds the
    optimum; cores of one type with the same free time are interchangeable.  An op
    with a zero-duration mode runs in it at its predecessors' end, holding nothing.
    """
    ops = problem.ops
    n = len(ops)
    best = math.inf
    Free = dict[CoreType, tuple[float, ...]]

    def choices(cores: tuple[float, ...]) -> list[int]:
        return [c for c in range(len(cores)) if cores[c] not in cores[:c]]

    def search(done: frozenset[int], end: dict[int, float], free: Free, exclusive_end: float,
               chip_free: float) -> None:
        nonlocal best
        if chip_free >= best:
            return
        if len(done) == n:
            best = chip_free
            return
        for i in range(n):
            if i in done or any(p not in done for p in ops[i].preds):
                continue
            op = ops[i]
            ready = max((end[p] for p in op.preds), default=0.0)
            if op.min_s == 0:
                search(done | {i}, {**end, i: ready}, free, exclusive_end, chip_free)
                continue
            finish = max(ready, chip_free) + op.all_s
            search(done | {i}, {**end, i: finish}, free, finish, max(chip_free, finish))
            types = (T, V) if op.core_type is F else (op.core_type,)
            picks: list[list[int]] = [[]]
            for t in types:
                picks = [p + [c] for p in picks for c in choices(free[t])]
            for pick in picks:
                start = max(ready, exclusive_end, *(free[t][c] for t, c in zip(types, pick, strict=True)))
                finish = start + op.single_s
                new_free = dict(free)
                for t, c in zip(types, pick, strict=True):
                    new_free[t] = free[t][:c] + (finish,) + free[t][c + 1:]
                search(done | {i}, {**end, i: finish}, new_free, exclusive_end,
                       max(chip_free, finish))

    search(frozenset(), {}, {T: (0.0,) * problem.tensor_cores, V: (0.0,) * problem.vector_cores},
           0.0, 0.0)
    return 0.0 if n == 0 else best


latencies = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


@st.composite
def problems(draw: st.DrawFn, max_ops: int = 40, max_cores: int = 4,
             fused: bool = True) -> ScheduleProblem:
    """Random DAGs: up to ``max_ops`` ops with up to 3 predecessors each, dyadic latencies."""
    n = draw(st.integers(0, max_ops))
    types = [T, T, V, V, F] if fused else [T, V]
    ops = []
    for i in range(n):
        preds = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        ops.append(SchedOp(i, draw(st.sampled_from(types)), draw(latencies), draw(latencies),
                           tuple(sorted(preds))))
    return ScheduleProblem(tuple(ops), draw(st.integers(1, max_cores)),
                           draw(st.integers(1, max_cores)))


def synthetic_layer(width: int = 25, blocks: int = 5) -> ScheduleProblem:
    """A transformer-like layer of ``blocks * width * 2`` ops: chains with fan-in and fan-out."""
    ops: list[SchedOp] = []
    previous: list[int] = []
    for b in range(blocks):
        current: list[int] = []
        for w in range(width):
            i = len(ops)
            preds = tuple(sorted({previous[(w + d) % len(previous)] for d in (0, 1, 3)})) \
                if previous else ()
            ops.append(SchedOp(i, T, 1.0 + (i % 7), 0.3 + (i % 5) * 0.1, preds))
            ops.append(SchedOp(i + 1, V, 0.5 + (i % 3), 0.4 + (b % 2) * 0.2, (i,)))
            current.append(i + 1)
        previous = current
    return ScheduleProblem(tuple(ops), 8, 2)
