"""PHAZE's MILP backends: HiGHS equals brute force on small DAGs (each solve in a worker
process), the lazily added core constraints, the model size, and the Gurobi adapter
(against a stand-in gurobipy, since Gurobi is not installed here)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from schedule_helpers import TOL, F, T, V, optimum_s, problems, validate

from archplace.base.errors import ConfigError, SolverError
from archplace.scheduling.base import SolveOptions, TickScale
from archplace.scheduling.list_scheduler import list_schedule
from archplace.scheduling.milp import GurobiScheduler, HighsScheduler, _Formulation, describe
from archplace.scheduling.problem import SchedOp, ScheduleProblem

OPTIONS = SolveOptions(time_limit_s=20.0, workers=1)


def _highs_equals_brute_force(problem: ScheduleProblem) -> None:
    result = HighsScheduler().solve(problem, OPTIONS)
    validate(problem, result.schedule)
    assert result.optimal
    assert result.makespan_s == pytest.approx(optimum_s(problem), abs=TOL)


# 10 examples in the default run, 40 in the slow one (CI runs both)
test_highs_equals_brute_force = settings(max_examples=10, deadline=None)(
    given(problems(max_ops=8, max_cores=3))(_highs_equals_brute_force))
test_highs_equals_brute_force_more = pytest.mark.slow(settings(max_examples=40, deadline=None)(
    given(problems(max_ops=8, max_cores=3))(_highs_equals_brute_force)))


def test_core_constraints_are_added_when_the_relaxation_overloads_the_cores() -> None:
    # four independent singles of 3 s (all mode 2.5 s) on 2 tensor cores: without core
    # constraints all four run at once (3 s); with them the optimum is 6 s
    problem = ScheduleProblem(tuple(SchedOp(i, T, 3.0, 2.5) for i in range(4))
                              + (SchedOp(4, V, 1.0, 1.0, (0,)),), 2, 1)
    result = HighsScheduler().solve(problem, OPTIONS)
    validate(problem, result.schedule)
    assert result.optimal and result.makespan_s == optimum_s(problem) == 6.0


def test_fused_ops_and_zero_length_ops() -> None:
    problem = ScheduleProblem((SchedOp(0, F, 2.0, 1.5), SchedOp(1, V, 0.0, 0.0, (0,)),
                               SchedOp(2, V, 2.0, 2.0, (1,)), SchedOp(3, T, 2.0, 0.0),
                               SchedOp(4, T, 2.0, 2.0, (3,))), 1, 1)
    result = HighsScheduler().solve(problem, OPTIONS)
    validate(problem, result.schedule)
    assert result.makespan_s == optimum_s(problem)


def test_model_grows_as_n_cubed() -> None:
    sizes = []
    for n in (6, 12):
        problem = ScheduleProblem(tuple(SchedOp(i, (T, V)[i % 2], 2.0, 1.0) for i in range(n)), 2, 2)
        scale = TickScale.for_problem(problem, 1 << 16)
        model = _Formulation(scale.problem, 0.0, scale.upper.makespan_s).build((), scale.upper)
        sizes.append(describe(model))
        # T, starts, modes, and one x per ordered pair
        assert sizes[-1]["columns"] == 1 + 2 * n + n * (n - 1)
    assert sizes[1]["rows"] > 7 * sizes[0]["rows"]  # the n(n-1)(n-2) transitivity rows


def test_gurobi_without_gurobipy_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gurobipy", None)
    problem = ScheduleProblem((SchedOp(0, T, 1.0, 1.0),), 1, 1)
    with pytest.raises(ConfigError, match="gurobi backend needs gurobipy"):
        GurobiScheduler().solve(problem, OPTIONS)


class _Var:
    def __init__(self) -> None:
        self.Start = 0.0

    @property
    def X(self) -> float:  # noqa: N802 (gurobipy's name)
        return self.Start


class _Model:
    """Stand-in for gurobipy.Model: records the model, 'solves' by returning the MIP start."""

    def __init__(self) -> None:
        self.Params = types.SimpleNamespace()
        self.vars: list[_Var] = []
        self.rows = 0
        self.SolCount = 0
        self.Status = 0
        self.ObjBound = 0.0

    def addVar(self, **kwargs: Any) -> _Var:  # noqa: N802
        self.vars.append(_Var())
        return self.vars[-1]

    def addLConstr(self, expr: Any, sense: str, rhs: float) -> None:  # noqa: N802
        self.rows += 1

    def optimize(self) -> None:
        self.SolCount, self.Status = 1, 9  # time limit, with the start as incumbent


def test_gurobi_adapter_builds_and_reads_back(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("gurobipy")
    fake.GRB = types.SimpleNamespace(INTEGER="I", CONTINUOUS="C", GREATER_EQUAL=">",  # type: ignore[attr-defined]
                                     LESS_EQUAL="<", OPTIMAL=2)
    fake.Model = _Model  # type: ignore[attr-defined]
    fake.LinExpr = lambda values, variables: (values, variables)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gurobipy", fake)
    problem = ScheduleProblem((SchedOp(0, T, 2.0, 1.0), SchedOp(1, V, 1.0, 1.0, (0,)),
                               SchedOp(2, T, 2.0, 1.0)), 2, 1)
    result = GurobiScheduler().solve(problem, OPTIONS)
    validate(problem, result.schedule)
    assert result.backend == "gurobi" and not result.optimal
    assert result.makespan_s == list_schedule(problem).makespan_s


# A worker that prints on both streams, from Python and straight to the file descriptors
# (as HiGHS's C code does), before and after it solves: the result must come through intact.
_NOISY = ("import os, sys; print('Running HiGHS 1.16 banner'); os.write(1, b'\\x80binary noise\\n'); "
          "os.write(2, b'log line\\n'); from archplace.scheduling._highs_worker import main; "
          "main(sys.argv[1:]); print('trailing chatter')")


def test_highs_result_is_not_corrupted_by_worker_output() -> None:
    problem = ScheduleProblem((SchedOp(0, T, 3.0, 1.0), SchedOp(1, V, 1.0, 1.0, (0,)),
                               SchedOp(2, T, 2.0, 1.5)), 2, 1)
    result = HighsScheduler((sys.executable, "-c", _NOISY)).solve(problem, OPTIONS)
    validate(problem, result.schedule)
    assert result.optimal and result.makespan_s == pytest.approx(optimum_s(problem), abs=TOL)


def test_highs_worker_failure_names_its_last_output_line() -> None:
    failing = (sys.executable, "-c", "import sys; print('about to fail'); sys.exit('solver crashed: 42')")
    problem = ScheduleProblem((SchedOp(0, T, 1.0, 1.0),), 1, 1)
    with pytest.raises(SolverError, match=r"highs worker failed \(exit status 1\): solver crashed: 42"):
        HighsScheduler(failing).solve(problem, OPTIONS)


def test_highs_worker_that_writes_no_result_is_an_error() -> None:
    silent = (sys.executable, "-c", "print('done, nothing written')")
    problem = ScheduleProblem((SchedOp(0, T, 1.0, 1.0),), 1, 1)
    with pytest.raises(SolverError, match="exit status 0.*done, nothing written"):
        HighsScheduler(silent).solve(problem, OPTIONS)
