"""Per-layer scheduling: problem construction, list scheduler, lower bound.

Schedules are checked by the independent validator of ``schedule_helpers``, and on
small DAGs against the exact optimum found by brute force.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_helpers import TOL, F, T, V, optimum_s, problems, synthetic_layer, validate

from archplace.base.errors import ConfigError
from archplace.cost.model import SystolicCostModel
from archplace.hw.presets import load_accelerator
from archplace.scheduling.list_scheduler import (
    Schedule,
    ScheduledOp,
    _greedy,
    bottom_levels_s,
    list_schedule,
    lower_bound_s,
    quick_lower_bound_s,
    serial_schedule,
)
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.scheduling.timeline import Mode, topological_by
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase

# ----------------------------------------------------------------------------- tests


def test_validator_rejects_bad_schedules() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 2.0, 1.0), SchedOp(1, T, 2.0, 1.0, (0,))), 2, 1)
    good = list_schedule(problem)
    validate(problem, good)
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
    # the greedy pass: each op in turn, "all" ends 0.625 after the chip frees, before a single
    greedy = _greedy(problem, problem.successors())
    assert [(o.start_s, o.end_s, o.mode) for o in greedy.ops] == [
        (0.0, 0.625, "all"), (0.625, 1.25, "all"), (1.25, 1.875, "all")]
    # optimum: two singles side by side, then one "all": 1 + 0.625; a target pass finds it
    assert optimum_s(problem) == 1.625
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.makespan_s == 1.625
    assert sorted(o.mode for o in schedule.ops) == ["all", "single", "single"]
    # work bound: 3 x min(1 / 2, 0.625) = 1.5 > critical path 0.625
    assert lower_bound_s(problem) == 1.5 == quick_lower_bound_s(problem)


def test_hand_example_types_run_side_by_side() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 2.0, 2.0), SchedOp(1, V, 3.0, 3.0)), 1, 1)
    schedule = list_schedule(problem)
    validate(problem, schedule)
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
    greedy = {o.id: (o.start_s, o.end_s, o.mode) for o in _greedy(problem, problem.successors()).ops}
    assert greedy[0] == (0.0, 3.0, "all")       # all (ends 3) beats single (ends 4)
    assert greedy[1] == (3.0, 4.0, "single")    # both modes end at 4: single on ties
    assert greedy[2] == (4.0, 5.5, "all")       # priority 1.5 beats op 3's 0.5
    assert greedy[3] == (5.5, 6.0, "all")       # appended after the exclusive op 2
    # backfilling puts op 3 on the free tensor core beside op 1 in [3, 4]: the optimum
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.makespan_s == optimum_s(problem) == lower_bound_s(problem) == 5.5


def test_hand_example_weight_gradient_beside_a_vector_chain() -> None:
    # The backward-graph pattern: a critical chain T -> V(long) -> T, and a weight-gradient
    # matmul (sink) that should run on one core beside the long vector op, not on all cores.
    problem = ScheduleProblem((
        SchedOp(0, T, 8.0, 1.0),
        SchedOp(1, V, 6.0, 6.0, (0,)),
        SchedOp(2, T, 8.0, 1.0, (1,)),
        SchedOp(3, T, 4.0, 0.5, (0,)),  # weight gradient: single fits in op 1's 6 s
    ), 8, 1)
    greedy = _greedy(problem, problem.successors())
    assert greedy.makespan_s == 8.5  # op 3 on all cores after op 1 ... or before op 2
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.makespan_s == optimum_s(problem) == 8.0
    assert schedule.ops[3].mode == "single"


def test_fused_op_holds_a_tensor_and_a_vector_core() -> None:
    problem = ScheduleProblem((SchedOp(0, F, 2.0, 1.5), SchedOp(1, V, 2.0, 2.0),
                               SchedOp(2, T, 2.0, 2.0)), 1, 1)
    schedule = list_schedule(problem)
    validate(problem, schedule)
    # the fused op excludes both the vector and the tensor op while it runs single
    assert schedule.makespan_s == optimum_s(problem) == 3.5
    assert lower_bound_s(problem) == 3.5


def test_zero_duration_ops_hold_nothing() -> None:
    # a zero-length "all" op between two long singles does not wait for the chip
    problem = ScheduleProblem((SchedOp(0, T, 4.0, 4.0), SchedOp(1, V, 1.0, 1.0),
                               SchedOp(2, T, 5.0, 0.0, (1,)), SchedOp(3, V, 1.0, 1.0, (2,))), 1, 1)
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.ops[2] == ScheduledOp(2, 1.0, 1.0, "all", None)
    assert schedule.makespan_s == 4.0 == optimum_s(problem)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_list_schedule_is_valid(problem: ScheduleProblem) -> None:
    schedule = list_schedule(problem)
    validate(problem, schedule)
    assert schedule.makespan_s >= lower_bound_s(problem) - TOL


@settings(max_examples=150, deadline=None)
@given(problems(max_ops=6, max_cores=3))
def test_bound_optimum_and_list_on_small_dags(problem: ScheduleProblem) -> None:
    quick = quick_lower_bound_s(problem)
    bound = lower_bound_s(problem)
    best = optimum_s(problem)
    listed = list_schedule(problem).makespan_s
    assert quick <= bound + TOL
    assert bound <= best + TOL
    assert best <= listed + TOL


@settings(max_examples=100, deadline=None)
@given(problems(max_ops=25), st.randoms(use_true_random=False))
def test_replaying_a_schedule_in_start_order_never_ends_later(problem: ScheduleProblem,
                                                               rng: random.Random) -> None:
    # any topological order and modes give a valid schedule; replaying it in its start order
    # (the way solver answers are turned into schedules) ends every op no later
    modes: list[Mode] = [rng.choice(["single", "all"]) for _ in problem.ops]
    order = topological_by(problem, [rng.random() for _ in problem.ops])
    first = serial_schedule(problem, order, modes)
    validate(problem, first)
    again = serial_schedule(problem, topological_by(problem, [o.start_s for o in first.ops]), modes)
    validate(problem, again)
    for before, after in zip(first.ops, again.ops, strict=True):
        assert after.end_s <= before.end_s + TOL


def test_serial_schedule_rejects_bad_orders() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 1.0, 1.0), SchedOp(1, V, 1.0, 1.0, (0,))), 1, 1)
    with pytest.raises(ValueError, match="every op"):
        serial_schedule(problem, [0], ["single", "single"])
    with pytest.raises(ValueError, match="predecessors"):
        serial_schedule(problem, [1, 0], ["single", "single"])


@settings(max_examples=50, deadline=None)
@given(problems(max_ops=30))
def test_deterministic(problem: ScheduleProblem) -> None:
    assert list_schedule(problem) == list_schedule(problem)


def test_layer_of_250_ops_and_many_cores_schedule_validly() -> None:
    # The time this takes (and that 4096 cores cost no more than 8) is measured by
    # benchmarks/bench_schedule.py, not asserted here.
    problem = synthetic_layer()
    assert len(problem.ops) == 250
    validate(problem, list_schedule(problem))
    validate(problem, list_schedule(problem, max_targets=0))
    big = ScheduleProblem(problem.ops, 4096, 4096)
    validate(big, list_schedule(big))


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
         "ops": [{"id": 0.5, "core_type": "tensor", "single_s": 1, "all_s": 1, "preds": []}]},
        {"tensor_cores": 1, "vector_cores": 1, "ops": [[0, "tensor", 1, 1, []]]},
        {"tensor_cores": 1, "vector_cores": 1,
         "ops": [{"id": 0, "core_type": "tensor", "single_s": "x", "all_s": 1, "preds": []}]},
        [],
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
        ((0, "tensor", 1.0, 1.0), "not supported"),
    ],
)
def test_sched_op_rejects(args: Sequence[Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SchedOp(*args)
