"""Entry points of per-layer scheduling: the backends by name, and the Python API
(``solve_problem``) behind ``archplace schedule`` (``archplace.app.layer_problem`` builds a
layer's problem).

Backends (all behind :class:`~archplace.schedule.base.Scheduler`):

* ``list`` -- the critical-path list scheduler (:mod:`archplace.schedule.list_scheduler`);
  ``optimal`` only when it meets the lower bound;
* ``cpsat`` -- exact, OR-Tools CP-SAT (:mod:`archplace.schedule.cpsat`);
* ``highs`` -- PHAZE's MILP on HiGHS (:mod:`archplace.schedule.milp`);
* ``gurobi`` -- PHAZE's MILP on Gurobi, when ``gurobipy`` is installed.
"""

from __future__ import annotations

import time

from archplace.errors import ConfigError
from archplace.schedule.base import Scheduler, ScheduleResult, SolveOptions
from archplace.schedule.list_scheduler import list_schedule, lower_bound_s
from archplace.schedule.problem import ScheduleProblem

BACKENDS = ("list", "cpsat", "highs", "gurobi")
LAYERS = ("embedding", "block", "head")
PHASES = ("fwd", "bwd")


class ListScheduler:
    """The list scheduler as a :class:`~archplace.schedule.base.Scheduler` (ignores options)."""

    name = "list"

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """List-schedule ``problem``; ``optimal`` iff the makespan meets the lower bound."""
        started = time.perf_counter()
        schedule = list_schedule(problem)
        bound = min(lower_bound_s(problem), schedule.makespan_s)
        return ScheduleResult(self.name, schedule.makespan_s, bound,
                              schedule.makespan_s <= bound, schedule,
                              time.perf_counter() - started)


def get_scheduler(backend: str) -> Scheduler:
    """The scheduler called ``backend`` (one of :data:`BACKENDS`).

    Raises:
        ConfigError: an unknown name.
    """
    if backend == "list":
        return ListScheduler()
    if backend == "cpsat":
        from archplace.schedule.cpsat import CpSatScheduler

        return CpSatScheduler()
    if backend in ("highs", "gurobi"):
        from archplace.schedule.milp import GurobiScheduler, HighsScheduler

        return HighsScheduler() if backend == "highs" else GurobiScheduler()
    raise ConfigError(f"unknown schedule backend {backend!r}; choose from {', '.join(BACKENDS)}")


def solve_problem(problem: ScheduleProblem, backend: str = "cpsat",
                  options: SolveOptions | None = None) -> ScheduleResult:
    """Schedule ``problem`` with ``backend`` (default CP-SAT; ``options`` default
    :class:`SolveOptions()`, a 10 s limit).  Never raises on a time-out.

    Raises:
        ConfigError: an unknown backend, or ``gurobi`` without gurobipy.
        SolverError: a solver failed (not a time-out).
    """
    return get_scheduler(backend).solve(problem, options or SolveOptions())
