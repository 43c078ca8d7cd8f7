"""Entry points of per-layer scheduling: the backends by name, and the Python API
(``solve_problem``) behind ``archplace schedule`` (``archplace.front.app.layer_problem`` builds a
layer's problem).

Backends (all behind :class:`~archplace.scheduling.base.Scheduler`, chosen by name from the
registry :data:`SCHEDULER_FACTORIES`):

* ``list`` -- the critical-path list scheduler (:mod:`archplace.scheduling.list_scheduler`);
  ``optimal`` only when it meets the lower bound;
* ``cpsat`` -- exact, OR-Tools CP-SAT (:mod:`archplace.scheduling.cpsat`);
* ``highs`` -- PHAZE's MILP on HiGHS (:mod:`archplace.scheduling.milp`);
* ``gurobi`` -- PHAZE's MILP on Gurobi, when ``gurobipy`` is installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from archplace.base.registry import lookup
from archplace.scheduling.base import Scheduler, ScheduleResult, SolveOptions
from archplace.scheduling.list_scheduler import list_schedule, lower_bound_s
from archplace.scheduling.problem import ScheduleProblem

LAYERS = ("embedding", "block", "head")
PHASES = ("fwd", "bwd")


class ListScheduler:
    """The list scheduler as a :class:`~archplace.scheduling.base.Scheduler` (ignores options)."""

    name = "list"

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """List-schedule ``problem``; ``optimal`` iff the makespan meets the lower bound."""
        started = time.perf_counter()
        schedule = list_schedule(problem)
        bound = min(lower_bound_s(problem), schedule.makespan_s)
        return ScheduleResult(self.name, schedule.makespan_s, bound,
                              schedule.makespan_s <= bound, schedule,
                              time.perf_counter() - started)


def _list() -> Scheduler:
    return ListScheduler()


def _cpsat() -> Scheduler:
    from archplace.scheduling.cpsat import CpSatScheduler

    return CpSatScheduler()


def _highs() -> Scheduler:
    from archplace.scheduling.milp import HighsScheduler

    return HighsScheduler()


def _gurobi() -> Scheduler:
    from archplace.scheduling.milp import GurobiScheduler

    return GurobiScheduler()


SCHEDULER_FACTORIES: Mapping[str, Callable[[], Scheduler]] = MappingProxyType({
    "list": _list,
    "cpsat": _cpsat,
    "highs": _highs,
    "gurobi": _gurobi,
})
"""Every scheduling backend by name: a read-only mapping of name -> factory of its
:class:`~archplace.scheduling.base.Scheduler` (each factory imports its solver's module when
called)."""

BACKENDS: tuple[str, ...] = tuple(SCHEDULER_FACTORIES)
"""The backend names, in registry order."""


def get_scheduler(backend: str) -> Scheduler:
    """The scheduler called ``backend`` (a key of :data:`SCHEDULER_FACTORIES`).

    Raises:
        ConfigError: an unknown name (the message lists the registry's names).
    """
    return lookup(SCHEDULER_FACTORIES, backend, "schedule backend")()


def solve_problem(problem: ScheduleProblem, backend: str = "cpsat",
                  options: SolveOptions | None = None) -> ScheduleResult:
    """Schedule ``problem`` with ``backend`` (default CP-SAT; ``options`` default
    :class:`SolveOptions()`, a 10 s limit).  Never raises on a time-out.

    Raises:
        ConfigError: an unknown backend, or ``gurobi`` without gurobipy.
        SolverError: a solver failed (not a time-out).
    """
    return get_scheduler(backend).solve(problem, options or SolveOptions())
