"""Per-layer scheduling: problem construction, list scheduler, lower bound.

Schedules are checked by a validator written here, independently of the
scheduler, and on small DAGs against the exact optimum found by brute force.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.cost.model import SystolicCostModel
from archplace.errors import ConfigError
from archplace.hardware.presets import load_accelerator
from archplace.schedule.list_scheduler import (
    Schedule,
    bottom_levels_s,
    list_schedule,
    lower_bound_s,
)
from archplace.schedule.problem import SchedOp, ScheduleProblem
from archplace.workload.graph import CoreType, Operator, OpGraph, OpKind, Phase

T, V = CoreType.TENSOR, CoreType.VECTOR
TOL = 1e-9


# ----------------------------------------------------------------------------- validator


def validate(problem: ScheduleProblem, schedule: Schedule) -> None:
    """Fail unless ``schedule`` is a valid schedule of ``problem``.

    Checks: one entry per op, in id order; durations match the mode; precedence;
    at every instant at most ``cores`` single-mode ops of each type run, and single
    ops on the same core never overlap; an "all" op overlaps no other op; the
    makespan is the latest end.
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
            assert p.core is not None and 0 <= p.core < problem.cores(op.core_type)
        else:
            assert p.core is None
        for q in op.preds:
            assert p.start_s >= placed[q].end_s - TOL, f"op {op.id} starts before pred {q} ends"

    def overlap(a: int, b: int) -> bool:
        return (placed[a].start_s < placed[b].end_s - TOL
                and placed[b].start_s < placed[a].end_s - TOL)

    n = len(ops)
    for a in range(n):
        for b in range(a + 1, n):
            if not overlap(a, b):
                continue
            assert placed[a].mode == "single" and placed[b].mode == "single", \
                f"'all' op overlaps another: {placed[a]} / {placed[b]}"
            same_core = ops[a].core_type == ops[b].core_type and placed[a].core == placed[b].core
            assert not same_core, f"ops {a} and {b} overlap on one core"
    for core_type in (T, V):
        singles = [p for op, p in zip(ops, placed, strict=True)
                   if op.core_type is core_type and p.mode == "single" and p.end_s > p.start_s]
        for probe in singles:
            running = sum(1 for p in singles if p.start_s <= probe.start_s + TOL < p.end_s)
            assert running <= problem.cores(core_type)
    latest = max((p.end_s for p in placed), default=0.0)
    assert schedule.makespan_s == pytest.approx(latest, abs=TOL)


# ----------------------------------------------------------------------------- brute force


def optimum_s(problem: ScheduleProblem) -> float:
    """Exact optimal makespan by exhaustive search (small problems only).

    Any schedule, listed by start time, is reproduced no later by appending its ops
    in that order, each in its mode and on its core, at the earliest time that
    respects precedence, its core's previous op, the last "all" op, and (for an "all"
    op) every op placed so far.  So searching every order, mode and core finds the
    optimum; cores of one type with the same free time are interchangeable.
    """
    ops = problem.ops
    n = len(ops)
    best = math.inf

    def search(done: frozenset[int], end: dict[int, float], free: dict[CoreType, tuple[float,
               ...]], exclusive_end: float, chip_free: float) -> None:
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
            start_all = max(ready, chip_free)
            finish = start_all + op.all_s
            search(done | {i}, {**end, i: finish}, free, finish, max(chip_free, finish))
            cores = free[op.core_type]
            for c in range(len(cores)):
                if cores[c] in cores[:c]:
                    continue  # an identical core was already tried
                start = max(ready, cores[c], exclusive_end)
                finish = start + op.single_s
                new_cores = cores[:c] + (finish,) + cores[c + 1:]
                search(done | {i}, {**end, i: finish}, {**free, op.core_type: new_cores},
                       exclusive_end, max(chip_free, finish))

    search(frozenset(), {}, {T: (0.0,) * problem.tensor_cores, V: (0.0,) * problem.vector_cores},
           0.0, 0.0)
    return 0.0 if n == 0 else best


# ----------------------------------------------------------------------------- strategies

latencies = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


@st.composite
def problems(draw: st.DrawFn, max_ops: int = 40, max_cores: int = 4) -> ScheduleProblem:
    n = draw(st.integers(0, max_ops))
    ops = []
    for i in range(n):
        preds = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        ops.append(SchedOp(i, draw(st.sampled_from([T, V])), draw(latencies), draw(latencies),
                           tuple(sorted(preds))))
    return ScheduleProblem(tuple(ops), draw(st.integers(1, max_cores)),
                           draw(st.integers(1, max_cores)))


# ----------------------------------------------------------------------------- tests


def test_validator_rejects_bad_schedules() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 2.0, 1.0), SchedOp(1, T, 2.0, 1.0, (0,))), 2, 1)
    good = list_schedule(problem)
    validate(problem, good)
    from archplace.schedule.list_scheduler import ScheduledOp

    broken_precedence = Schedule(2.0, (ScheduledOp(0, 0.0, 1.0, "all", None),
                                       ScheduledOp(1, 0.0, 2.0, "single", 0)))
    with pytest.raises(AssertionError):
        validate(problem, broken_precedence)
    independent = ScheduleProblem((SchedOp(0, T, 2.0, 1.0), SchedOp(1, V, 2.0, 1.0)), 1, 1)
    all_overlaps = Schedule(2.0, (ScheduledOp(0, 0.0, 1.0, "all", None),
                                  ScheduledOp(1, 0.5, 2.5, "single", 0)))
    with pytest.raises(AssertionError):
        validate(independent, all_overlaps)
    same_core = Schedule(2.0, (ScheduledOp(0, 0.0, 2.0, "single", 0),
                               ScheduledOp(1, 1.0, 3.0, "single", 0)))
    two_tensor = ScheduleProblem((SchedOp(0, T, 2.0, 1.0), SchedOp(1, T, 2.0, 1.0)), 1, 1)
    with pytest.raises(AssertionError):
        validate(two_tensor, same_core)


def test_empty_problem() -> None:
    problem = ScheduleProblem((), 2, 2)
    assert list_schedule(problem) == Schedule(0.0, ())
    assert lower_bound_s(problem) == 0.0


def test_hand_example_all_mode_greed() -> None:
    # 3 independent tensor ops, 2 tensor cores; single 1, all 0.625.
    problem = ScheduleProblem(tuple(SchedOp(i, T, 1.0, 0.625) for i in range(3)), 2, 1)
    schedule = list_schedule(problem)
    validate(problem, schedule)
    # each op in turn: "all" ends 0.625 after the chip frees, before a single would
    assert [(o.start_s, o.end_s, o.mode) for o in schedule.ops] == [
        (0.0, 0.625, "all"), (0.625, 1.25, "all"), (1.25, 1.875, "all")]
    assert schedule.makespan_s == 1.875
    # optimum: two singles side by side, then one "all": 1 + 0.625
    assert optimum_s(problem) == 1.625
    # work bound: 3 x min(1 / 2, 0.625) = 1.5 > critical path 0.625
    assert lower_bound_s(problem) == 1.5


def test_hand_example_types_run_side_by_side() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 2.0, 2.0), SchedOp(1, V, 3.0, 3.0)), 1, 1)
    schedule = list_schedule(problem)
    validate(problem, schedule)
    # the vector op has the higher priority and goes first (single on ties)
    assert schedule.ops[1].start_s == 0.0 and schedule.ops[1].mode == "single"
    assert schedule.ops[0].start_s == 0.0 and schedule.ops[0].mode == "single"
    assert schedule.makespan_s == 3.0
    assert lower_bound_s(problem) == 3.0


def test_hand_example_chain_and_priority() -> None:
    # 0(T) -> 1(V) -> 2(T); 3(T) independent and short.  Cores: 2 tensor, 1 vector.
    problem = ScheduleProblem((
        SchedOp(0, T, 4.0, 3.0),
        SchedOp(1, V, 1.0, 1.0, (0,)),
        SchedOp(2, T, 2.0, 1.5, (1,)),
        SchedOp(3, T, 1.0, 0.5),
    ), 2, 1)
    assert bottom_levels_s(problem) == [5.5, 2.5, 1.5, 0.5]
    schedule = list_schedule(problem)
    validate(problem, schedule)
    placed = {o.id: (o.start_s, o.end_s, o.mode) for o in schedule.ops}
    assert placed[0] == (0.0, 3.0, "all")       # all (ends 3) beats single (ends 4)
    assert placed[1] == (3.0, 4.0, "single")    # both modes end at 4: single on ties
    assert placed[2] == (4.0, 5.5, "all")       # priority 1.5 beats op 3's 0.5
    assert placed[3] == (5.5, 6.0, "all")       # appended after the exclusive op 2
    assert schedule.makespan_s == 6.0
    # op 3 fits as a single beside op 1 in [3, 4]: the optimum is the critical path
    assert optimum_s(problem) == 5.5
    assert lower_bound_s(problem) == 5.5


@settings(max_examples=200, deadline=None)
@given(problems())
def test_list_schedule_is_valid(problem: ScheduleProblem) -> None:
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.makespan_s >= lower_bound_s(problem) - TOL


@settings(max_examples=150, deadline=None)
@given(problems(max_ops=6, max_cores=3))
def test_bound_optimum_and_list_on_small_dags(problem: ScheduleProblem) -> None:
    bound = lower_bound_s(problem)
    best = optimum_s(problem)
    listed = list_schedule(problem).makespan_s
    assert bound <= best + TOL
    assert best <= listed + TOL
    assert listed >= bound - TOL


@settings(max_examples=50, deadline=None)
@given(problems(max_ops=30))
def test_deterministic(problem: ScheduleProblem) -> None:
    assert list_schedule(problem) == list_schedule(problem)


def layer_problem(width: int = 25, blocks: int = 5) -> ScheduleProblem:
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


def test_layer_of_250_ops_schedules_in_a_few_ms() -> None:
    problem = layer_problem()
    assert len(problem.ops) == 250
    list_schedule(problem)
    runs = 20
    started = time.perf_counter()
    for _ in range(runs):
        schedule = list_schedule(problem)
    per_run_s = (time.perf_counter() - started) / runs
    validate(problem, schedule)
    assert per_run_s < 0.01, f"{per_run_s * 1e3:.2f} ms per schedule"


def test_many_cores_cost_no_more() -> None:
    small = layer_problem()
    big = ScheduleProblem(small.ops, 4096, 4096)
    started = time.perf_counter()
    schedule = list_schedule(big)
    assert time.perf_counter() - started < 0.05
    validate(big, schedule)


# ----------------------------------------------------------------------------- problem


def graph_two_ops() -> OpGraph:
    mm = Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL,
                  phase=Phase.FWD, batch=1, m=512, k=1024, n=1024, elements=512 * 1024,
                  flop=2.0 * 512 * 1024 * 1024, bytes_read=2.0 * (512 + 1024) * 1024,
                  bytes_written=2.0 * 512 * 1024)
    gelu = Operator(id=1, name="gelu", target="aten.gelu.default", kind=OpKind.ELEMENTWISE,
                    phase=Phase.FWD, batch=0, m=0, k=0, n=0, elements=512 * 1024,
                    flop=8.0 * 512 * 1024, bytes_read=2.0 * 512 * 1024,
                    bytes_written=2.0 * 512 * 1024, preds=(0,))
    return OpGraph((mm, gelu))


def test_from_graph() -> None:
    acc = load_accelerator("tpuv4")
    cost = SystolicCostModel()
    graph = graph_two_ops()
    problem = ScheduleProblem.from_graph(graph, acc, cost)
    assert (problem.tensor_cores, problem.vector_cores) == (8, 2)
    assert [op.core_type for op in problem.ops] == [T, V]
    assert problem.ops[1].preds == (0,)
    for op, sop in zip(graph.ops, problem.ops, strict=True):
        lat = cost.latency(op, acc)
        assert (sop.single_s, sop.all_s) == (lat.single_core_s, lat.all_cores_s)
    # mm (weight stationary): 64 folds issued every max(m, C) = 512 cycles, plus fill and
    # drain m + R + C - 2 = 766 and the issue cycle, plus the first weight tile (R*C bf16)
    # over HBM that double buffering cannot hide; on 8 cores 8 folds each, 8 first tiles.
    assert problem.ops[0].single_s == pytest.approx((1 + 63 * 512 + 766) / 1.05e9 + 2 * 128 * 128 / 1.2e12)
    assert problem.ops[0].all_s == pytest.approx((1 + 7 * 512 + 766) / 1.05e9 + 8 * 2 * 128 * 128 / 1.2e12)
    validate(problem, list_schedule(problem))


def test_dict_round_trip_through_json() -> None:
    problem = ScheduleProblem.from_graph(graph_two_ops(), load_accelerator("tpuv4"),
                                         SystolicCostModel())
    assert ScheduleProblem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem
    schedule = list_schedule(problem)
    assert json.loads(json.dumps(schedule.to_dict()))["makespan_s"] == schedule.makespan_s


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"tensor_cores": 1, "vector_cores": 1, "ops": [{"id": 0}]},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 0, "core_type": "quantum", "single_s": 1, "all_s": 1, "preds": []}]},
        {"tensor_cores": 0, "vector_cores": 1, "ops": []},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 0, "core_type": "tensor", "single_s": -1, "all_s": 1, "preds": []}]},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 0, "core_type": "tensor", "single_s": 1, "all_s": 1, "preds": [0]}]},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 1, "core_type": "tensor", "single_s": 1, "all_s": 1, "preds": []}]},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 0, "core_type": "fused", "single_s": 1, "all_s": 1, "preds": []}]},
    ],
)
def test_from_dict_rejects_bad_data(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ScheduleProblem.from_dict(data)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, T, math.inf, 1.0), "single_s"),
        ((0, T, 1.0, math.nan), "all_s"),
        ((2, T, 1.0, 1.0, (1, 1)), "repeated"),
        ((2, T, 1.0, 1.0, (2,)), "predecessors"),
        ((0, CoreType.FUSED, 1.0, 1.0), "not supported"),
    ],
)
def test_sched_op_rejects(args: Sequence[Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SchedOp(*args)
