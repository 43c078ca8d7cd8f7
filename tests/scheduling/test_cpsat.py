"""The exact CP-SAT backend: equal to brute force on small DAGs, valid schedules,
honest optimality and bounds, time-outs without exceptions."""

from __future__ import annotations

import dataclasses
import math
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from schedule_helpers import TOL, F, T, V, optimum_s, problems, validate

from archplace.base.errors import ConfigError
from archplace.scheduling.base import ScheduleResult, SolveOptions, TickScale
from archplace.scheduling.bounds import heads_tails_s, lower_bound_s
from archplace.scheduling.cpsat import CpSatScheduler, auto_workers, chains
from archplace.scheduling.list_scheduler import list_schedule
from archplace.scheduling.problem import SchedOp, ScheduleProblem

FAST = SolveOptions(time_limit_s=10.0, workers=1)


@settings(max_examples=120, deadline=None)
@given(problems(max_ops=8, max_cores=3))
def test_cpsat_equals_brute_force(problem: ScheduleProblem) -> None:
    result = CpSatScheduler().solve(problem, FAST)
    validate(problem, result.schedule)
    best = optimum_s(problem)
    # dyadic latencies are whole ticks: nothing is rounded, the optimum is exact
    assert result.optimal
    assert result.makespan_s == pytest.approx(best, abs=TOL)
    assert result.lower_bound_s == pytest.approx(best, abs=TOL)
    assert result.makespan_s == result.schedule.makespan_s


@settings(max_examples=40, deadline=None)
@given(problems(max_ops=30, max_cores=4))
def test_cpsat_on_larger_dags_is_valid_and_bounded(problem: ScheduleProblem) -> None:
    result = CpSatScheduler().solve(problem, SolveOptions(time_limit_s=2.0, workers=2))
    validate(problem, result.schedule)
    assert lower_bound_s(problem) - TOL <= result.lower_bound_s <= result.makespan_s + TOL
    assert result.makespan_s <= list_schedule(problem).makespan_s + TOL
    assert not result.optimal or result.gap < 1e-3  # dyadic latencies: exact, up to ticks


def test_a_model_presolve_wrongly_proves_infeasible_is_solved_without_presolve() -> None:
    """Found by the hypothesis test above: OR-Tools 9.15's presolve declares this model
    infeasible; by hand the optimum is 3.0 s: op 0, op 2, then ops 6, 7 and 4 in all mode
    (0.5 + 0.5 + 1.0 + 0.5 + 0.5), every op on the one tensor or vector core in turn."""
    tensor, vector = T, V
    spec = [(tensor, 0.5, 0.5, ()), (tensor, 0.0, 0.0, ()), (tensor, 0.5, 0.5, (0,)), (tensor, 0.0, 0.0, ()),
            (vector, 3.0, 0.5, (0,)), (tensor, 0.0, 0.0, ()), (tensor, 1.5, 1.0, (0,)),
            (tensor, 1.0, 0.5, (0,)), (tensor, 0.0, 0.0, ()), (tensor, 0.0, 0.0, ()), (tensor, 0.0, 0.0, ()),
            (tensor, 0.0, 0.0, (6,)), (tensor, 0.0, 0.0, (7,))]
    ops = tuple(SchedOp(id=i, core_type=kind, single_s=single, all_s=every, preds=preds)
                for i, (kind, single, every, preds) in enumerate(spec))
    problem = ScheduleProblem(ops=ops, tensor_cores=1, vector_cores=1)
    result = CpSatScheduler().solve(problem, SolveOptions(time_limit_s=5.0, workers=2))
    validate(problem, result.schedule)
    assert result.optimal
    assert result.makespan_s == pytest.approx(3.0, abs=TOL)


def test_rounded_latencies_keep_the_schedule_valid_and_the_bound_honest() -> None:
    # latencies that are not whole ticks: every op is rounded up, the bound accounts for it
    ops = tuple(SchedOp(i, (T, V, F)[i % 3], 1.0 / (3 + i), 0.7 / (3 + i),
                        tuple(p for p in (i - 1, i - 3) if p >= 0)) for i in range(12))
    problem = ScheduleProblem(ops, 3, 2)
    scale = TickScale.for_problem(problem, 64)
    assert scale.rounded == 12
    result = CpSatScheduler().solve(problem, SolveOptions(time_limit_s=10.0, resolution=64))
    validate(problem, result.schedule)
    assert result.optimal  # for the rounded problem
    assert result.lower_bound_s <= optimum_s_small(problem) + TOL <= result.makespan_s + TOL
    fine = CpSatScheduler().solve(problem, SolveOptions(time_limit_s=10.0))
    assert fine.optimal and fine.gap < 1e-3


def optimum_s_small(problem: ScheduleProblem) -> float:
    """The optimum on the default time scale (2^20 ticks), where rounding is negligible."""
    return CpSatScheduler().solve(problem, SolveOptions(time_limit_s=10.0)).makespan_s


def test_time_out_returns_the_best_schedule_not_an_exception() -> None:
    ops = []
    for i in range(60):
        preds = tuple(p for p in (i - 1, i - 5, i - 7) if p >= 0 and (i + p) % 3)
        ops.append(SchedOp(i, (T, V)[i % 2], 1.0 + (i * 7) % 5, 0.4 + (i % 4) * 0.3, preds))
    problem = ScheduleProblem(tuple(ops), 3, 1)
    result = CpSatScheduler().solve(problem, SolveOptions(time_limit_s=0.01, workers=1))
    validate(problem, result.schedule)
    assert result.makespan_s <= list_schedule(problem).makespan_s + TOL
    assert result.lower_bound_s <= result.makespan_s


def test_empty_and_instantaneous_problems() -> None:
    empty = CpSatScheduler().solve(ScheduleProblem((), 1, 1), FAST)
    assert (empty.makespan_s, empty.lower_bound_s, empty.optimal) == (0.0, 0.0, True)
    zero = ScheduleProblem((SchedOp(0, T, 0.0, 0.0), SchedOp(1, V, 0.0, 0.0, (0,))), 1, 1)
    result = CpSatScheduler().solve(zero, FAST)
    validate(zero, result.schedule)
    assert result.makespan_s == 0.0 and result.optimal


def test_all_mode_sinks_and_sources_do_not_change_the_optimum() -> None:
    # two "all"-capable sinks and sources around a chain: the dominance rules (module
    # docstring) put them at the ends, and the optimum is still the brute-force one
    problem = ScheduleProblem((
        SchedOp(0, T, 4.0, 1.0),
        SchedOp(1, T, 4.0, 1.0),
        SchedOp(2, V, 3.0, 3.0, (0,)),
        SchedOp(3, T, 4.0, 1.0, (2,)),
        SchedOp(4, T, 2.0, 0.5, (2,)),
        SchedOp(5, F, 2.0, 1.0, (1,)),
    ), 4, 1)
    result = CpSatScheduler().solve(problem, FAST)
    validate(problem, result.schedule)
    assert result.optimal and result.makespan_s == optimum_s(problem)


def test_chains_cover_every_timed_op() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 1.0, 1.0), SchedOp(1, V, 2.0, 2.0, (0,)),
                               SchedOp(2, V, 1.0, 1.0, (0,)), SchedOp(3, T, 1.0, 1.0, (1, 2))), 1, 1)
    found = chains(problem, {0, 1, 2, 3})
    assert found[0] == [0, 1, 3]  # the longest path first
    assert set().union(*found) == {0, 1, 2, 3}


def test_heads_and_tails_bound_every_op() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 8.0, 1.0), SchedOp(1, T, 8.0, 1.0),
                               SchedOp(2, V, 1.0, 1.0, (0, 1))), 8, 1)
    heads, tails = heads_tails_s(problem)
    # op 2 waits for two matmuls of 8 s on one core or 1 s on all: at least 2 s (work bound)
    assert heads == [0.0, 0.0, 2.0]
    assert tails == [1.0, 1.0, 0.0]
    assert lower_bound_s(problem) == 3.0 == optimum_s(problem)


def test_options_are_checked() -> None:
    for bad in ({"time_limit_s": 0.0}, {"time_limit_s": math.inf}, {"workers": -1},
                {"seed": 1.5}, {"resolution": 8}):
        with pytest.raises(ConfigError):
            SolveOptions(**bad)  # type: ignore[arg-type]
    assert auto_workers(3) == 3 and auto_workers(0) >= 4


def layered(seed: int, n: int = 40) -> ScheduleProblem:
    """A random layer-like DAG (matmuls 4x the vector ops, "all" mode 1.5-4x faster) that CP-SAT
    does not prove optimal in a few tenths of a second on 4 tensor and 2 vector cores."""
    rng = random.Random(seed)
    ops = []
    for i in range(n):
        kind = T if rng.random() < 0.4 else V
        single = rng.choice([1, 2, 3, 5, 8]) * (4 if kind is T else 1) + rng.random()
        all_s = single / rng.choice([1.5, 2, 4])
        preds = {p for p in (i - 1 - rng.randrange(4), i - 2 - rng.randrange(6))
                 if p >= 0 and rng.random() < 0.8}
        ops.append(SchedOp(i, kind, single, all_s, tuple(sorted(preds))))
    return ScheduleProblem(tuple(ops), 4, 2)


def fingerprint(result: ScheduleResult) -> tuple[object, ...]:
    return (result.makespan_s, result.lower_bound_s, result.optimal,
            tuple((o.start_s, o.mode, o.core) for o in result.schedule.ops))


@contextmanager
def busy_cpu() -> Iterator[None]:
    """Load the machine with a spinning thread while the body runs."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize(("workers", "seed", "work", "less"), [
    (1, 2, 0.03, 0.01),  # how the search re-evaluates its best designs
    pytest.param(2, 9, 0.06, 0.03, marks=pytest.mark.slow),  # interleaved workers
])
def test_a_deterministic_time_limit_gives_the_same_answer_under_any_load(workers: int, seed: int, work: float,
                                                                         less: float) -> None:
    problem = layered(seed)
    # a wall-clock limit of 1 ms is ignored: only the work limit stops CP-SAT
    options = SolveOptions(workers=workers, deterministic_time=work, time_limit_s=1e-3)
    quiet = CpSatScheduler().solve(problem, options)
    with busy_cpu():
        loaded = CpSatScheduler().solve(problem, options)
    validate(problem, quiet.schedule)
    assert fingerprint(quiet) == fingerprint(loaded)
    # the limit is what stops the search (not a proof of optimality any run would reach)
    shorter = CpSatScheduler().solve(problem, dataclasses.replace(options, deterministic_time=less))
    assert not quiet.optimal and fingerprint(shorter) != fingerprint(quiet)


def test_deterministic_time_is_checked() -> None:
    for bad in (0.0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(ConfigError, match="deterministic_time must be a positive number"):
            SolveOptions(deterministic_time=bad)  # type: ignore[arg-type]
    assert SolveOptions(deterministic_time=2).deterministic_time == 2
