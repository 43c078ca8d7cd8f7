"""Exact per-layer scheduling with OR-Tools CP-SAT.

Formulation, on the integer time scale of :mod:`archplace.scheduling.base` (latencies
in ticks, rounded up; ``U`` = the makespan of the list schedule, a valid upper bound):

* op i has a start ``S_i ∈ [0, U]`` and, if both of its modes are worth
  considering, a literal ``A_i`` ("runs on all cores").  An "all" mode that is no
  shorter than the single one is dropped (running single at the same start is
  valid and ends no later); an op with a zero-length mode runs in it, holds
  nothing and gets no interval.  The end is ``E_i = S_i + s_i + (a_i - s_i)·A_i``.
* optional interval variables ``[S_i, S_i + s_i)`` present iff ``¬A_i`` and
  ``[S_i, S_i + a_i)`` present iff ``A_i``.
* Resources -- one cumulative per core type T with capacity ``C_T`` (the number
  of T cores): every single-mode interval of an op using T (fused ops use both
  types) with demand 1, and EVERY "all" interval, of any op type, with demand
  ``C_T``.  This is exact for PHAZE's rule "while an op runs on all cores nothing
  else runs": an "all" interval fills both resources, so nothing of positive
  length -- single or "all", of either type -- can overlap it, while single ops
  of one type share up to ``C_T`` cores.  With ``C_T = 1`` the cumulative is a
  no-overlap constraint.
* Precedence ``S_j ≥ E_i`` for every edge; ``M ≥ E_i`` for every op; minimise
  the makespan ``M``, with ``lower bound ≤ M ≤ U``.

Redundant constraints and dominance rules, which do not change the optimum but
make proofs fast (measured on the transformer blocks of benchmarks/bench_schedule.py,
where without them CP-SAT needs seconds to minutes instead of ~0.1 s):

* release dates and tails: ``S_j ≥ head_j`` and ``M ≥ E_j + tail_j`` with the
  path-and-work bounds of :func:`~archplace.scheduling.bounds.heads_tails_s`;
* chains: ops of a chain of the DAG never overlap, so the single intervals of a
  chain together with all the "all" intervals form a no-overlap constraint.  The
  chains are greedy longest paths until every op is covered; their energetic
  reasoning sees that an "all" op lengthens every chain it does not lie on;
* "all" sinks last, "all" sources first: an op without successors that runs on
  all cores can be moved to the end of any schedule (close the gap it leaves,
  append it; nothing runs beside it, nothing waits for it), so WLOG every such op
  starts after every other op ends, the ones in "all" mode in a fixed order by id;
  likewise ops without predecessors at the start.  (The weight-gradient matmuls of a
  backward graph are such sinks; without this rule CP-SAT proves the same
  optimum over and over for each of their positions among small vector ops.)

CP-SAT runs with the overload checker and timetable edge finding in its
cumulative propagators (on llama2-7b's backward block this cut the worst of 20
solves from seconds to ~0.1 s) and, by default, max(4, CPU count) workers.
It stops at the wall-clock ``SolveOptions.time_limit_s``, or, when
``SolveOptions.deterministic_time`` is given, at that much of CP-SAT's
deterministic time (a count of work) with no clock at all: then, for a fixed
seed and number of workers (several workers interleaved deterministically,
``interleave_search``), the answer is the same on any load (the search's
re-evaluation of its best designs runs this way).
The list schedule is the hint (a complete feasible solution).  After the solve
the start order and modes are replayed by
:func:`~archplace.scheduling.timeline.serial_schedule` with the true latencies,
which assigns concrete core indices and never ends later.  "optimal" means proven
optimal for the problem rounded to ticks (:mod:`archplace.scheduling.base` derives
the lower bound for the true one).  On time-out the best schedule found is
returned with ``optimal=False``; never an exception.

The model has O(n + e + n·k) constraints for k "all"-capable sources and sinks,
independent of the number of cores -- against the O(n²) binaries and O(n³)
constraints of PHAZE's MILP (Wang et al., ICML 2024; :mod:`archplace.scheduling.milp`).
"""

from __future__ import annotations

import math
import os
import time

from ortools.sat.python import cp_model

from archplace.base.errors import SolverError
from archplace.base.lifetime import call_interruptibly
from archplace.scheduling.base import ScheduleResult, SolveOptions, TickScale
from archplace.scheduling.bounds import heads_tails_s
from archplace.scheduling.list_scheduler import list_schedule, lower_bound_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import Mode, Schedule, serial_schedule, topological_by
from archplace.workload.graph import CoreType

_TYPES = (CoreType.TENSOR, CoreType.VECTOR)
AUTO_WORKERS_MIN = 4  # measured: 4 portfolio workers prove layer problems faster than 2 on 2 cores


def chains(problem: ScheduleProblem, timed: set[int]) -> list[list[int]]:
    """Chains (ops pairwise ordered by the DAG) covering ``timed``: greedy longest paths,
    each op weighted by its shorter latency until it is covered, heaviest first."""
    succs = problem.successors()
    covered: set[int] = set()
    found: list[list[int]] = []
    while timed - covered:
        weight = [0.0] * len(problem.ops)
        step: list[int | None] = [None] * len(problem.ops)
        for op in reversed(problem.ops):
            own = op.min_s if op.id in timed and op.id not in covered else 0.0
            tail, after = max(((weight[s], s) for s in succs[op.id]), default=(0.0, None))
            weight[op.id], step[op.id] = own + tail, after
        node: int | None = max(range(len(weight)), key=weight.__getitem__)
        chain = []
        while node is not None:
            if node in timed:
                chain.append(node)
            node = step[node]
        if not set(chain) - covered:  # only zero-weight ops left: cover them one by one
            chain = [min(timed - covered)]
        covered.update(chain)
        found.append(chain)
    return found


class _Model:
    """The CP-SAT model of one ticked problem (module docstring)."""

    def __init__(self, ticked: ScheduleProblem, upper: int, lower: int) -> None:
        self.model = m = cp_model.CpModel()
        self.makespan = m.new_int_var(lower, upper, "makespan")
        self.starts: list[cp_model.IntVar] = []
        self.all_mode: list[cp_model.IntVar | bool] = []
        self.ends: list[cp_model.LinearExprT] = []
        singles: dict[CoreType, list[cp_model.IntervalVar]] = {t: [] for t in _TYPES}
        alls: list[cp_model.IntervalVar] = []
        self.single_of: dict[int, cp_model.IntervalVar] = {}
        for op in ticked.ops:
            s, a = int(op.single_s), int(op.all_s)
            start = m.new_int_var(0, upper, f"start{op.id}")
            self.starts.append(start)
            if min(s, a) == 0:
                self.all_mode.append(s > 0)
                self.ends.append(start)
                continue
            if a < s:
                is_all = m.new_bool_var(f"all{op.id}")
                single = m.new_optional_fixed_size_interval_var(start, s, ~is_all, f"one{op.id}")
                alls.append(m.new_optional_fixed_size_interval_var(start, a, is_all, f"every{op.id}"))
                self.all_mode.append(is_all)
                self.ends.append(start + s + (a - s) * is_all)
            else:
                single = m.new_fixed_size_interval_var(start, s, f"one{op.id}")
                self.all_mode.append(False)
                self.ends.append(start + s)
            self.single_of[op.id] = single
            for t in _TYPES:
                if op.uses(t):
                    singles[t].append(single)
        for t in _TYPES:
            cores = ticked.cores(t)
            intervals = singles[t] + alls
            if cores == 1:
                m.add_no_overlap(intervals)
            elif intervals:
                m.add_cumulative(intervals, [1] * len(singles[t]) + [cores] * len(alls), cores)
        heads, tails = heads_tails_s(ticked)
        for op in ticked.ops:
            for p in op.preds:
                m.add(self.starts[op.id] >= self.ends[p])
            m.add(self.starts[op.id] >= math.ceil(heads[op.id] - 1e-6))
            m.add(self.makespan >= self.ends[op.id] + math.ceil(tails[op.id] - 1e-6))
        timed = set(self.single_of)
        if alls:
            for chain in chains(ticked, timed):
                m.add_no_overlap(alls + [self.single_of[i] for i in chain])
        self._all_mode_at_the_ends(ticked, timed)
        m.minimize(self.makespan)

    def _all_mode_at_the_ends(self, ticked: ScheduleProblem, timed: set[int]) -> None:
        succs = ticked.successors()
        flexible = {i for i in timed if not isinstance(self.all_mode[i], bool)}
        sinks = {i for i in flexible if not succs[i]}
        sources = {i for i in flexible if not ticked.ops[i].preds} - sinks
        for group, at_end in ((sinks, True), (sources, False)):
            for x in sorted(group):
                x_all = self.all_mode[x]
                assert not isinstance(x_all, bool)
                for y in sorted(timed - {x}):
                    y_all = self.all_mode[y]
                    if y in group and y > x:  # y goes after x (at the start: before) only if single
                        assert not isinstance(y_all, bool)
                        condition = [x_all, ~y_all]
                    else:
                        condition = [x_all]
                    if at_end:
                        self.model.add(self.starts[x] >= self.ends[y]).only_enforce_if(condition)
                    else:
                        self.model.add(self.ends[x] <= self.starts[y]).only_enforce_if(condition)

    def hint(self, schedule: Schedule) -> None:
        for placed, start, mode in zip(schedule.ops, self.starts, self.all_mode, strict=True):
            self.model.add_hint(start, round(placed.start_s))
            if not isinstance(mode, bool):
                self.model.add_hint(mode, placed.mode == "all")
        self.model.add_hint(self.makespan, round(schedule.makespan_s))


def auto_workers(workers: int) -> int:
    """``workers``, or for 0 the automatic count ``max(4, CPU count)``."""
    return workers if workers > 0 else max(AUTO_WORKERS_MIN, os.cpu_count() or 1)


class CpSatScheduler:
    """Exact scheduler on OR-Tools CP-SAT (formulation in the module docstring)."""

    name = "cpsat"

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """Schedule ``problem`` optimally, or as well as ``options.time_limit_s`` (or
        ``options.deterministic_time``, a reproducible work limit) allows.  An interrupt
        while CP-SAT runs stops it at once (:func:`archplace.base.lifetime.call_interruptibly`).

        Raises:
            SolverError: CP-SAT reports the model invalid or infeasible (a bug: the hint
                is a feasible solution).
        """
        started = time.perf_counter()
        if not problem.ops:
            return ScheduleResult(self.name, 0.0, 0.0, True, Schedule(0.0, ()), 0.0)
        scale = TickScale.for_problem(problem, options.resolution)
        upper = round(scale.upper.makespan_s)
        built = _Model(scale.problem, upper, min(scale.lower_bound_ticks(), upper))
        built.hint(scale.upper)
        solver = cp_model.CpSolver()
        workers = auto_workers(options.workers)
        if options.deterministic_time is None:
            solver.parameters.max_time_in_seconds = max(
                1e-3, options.time_limit_s - (time.perf_counter() - started))
        else:  # a reproducible run: a work limit, no clock, workers interleaved deterministically
            solver.parameters.max_deterministic_time = options.deterministic_time
            solver.parameters.interleave_search = workers > 1
        solver.parameters.random_seed = options.seed
        solver.parameters.num_workers = workers
        solver.parameters.use_overload_checker_in_cumulative = True
        solver.parameters.use_timetable_edge_finding_in_cumulative = True
        # CP-SAT would take SIGINT itself, end the solve as if out of time and leave SIGINT at
        # SIG_DFL (a second Ctrl-C then kills Python outright); the CLI's handler stays in charge
        # instead, and an interrupt stops the search at once.
        solver.parameters.catch_sigint_signal = False
        status = call_interruptibly(lambda: solver.solve(built.model), solver.stop_search)
        if status == cp_model.INFEASIBLE:
            # The hint is a feasible schedule, so INFEASIBLE is a solver fault: OR-Tools 9.15's
            # presolve proves some models with optional intervals under the end-of-schedule
            # rule infeasible (a 13-op case is in tests/scheduling/test_cpsat.py); solve again
            # without presolve, which finds their optimum.
            solver.parameters.cp_model_presolve = False
            if options.deterministic_time is None:
                solver.parameters.max_time_in_seconds = max(
                    1e-3, options.time_limit_s - (time.perf_counter() - started))
            status = call_interruptibly(lambda: solver.solve(built.model), solver.stop_search)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            starts = [solver.value(s) for s in built.starts]
            modes: list[Mode] = [
                "all" if (m if isinstance(m, bool) else solver.boolean_value(m)) else "single"
                for m in built.all_mode]
            schedule = serial_schedule(problem, topological_by(problem, starts), modes)
            bound = scale.lower_bound_s(problem, solver.best_objective_bound)
            optimal = status == cp_model.OPTIMAL
        elif status == cp_model.UNKNOWN:  # out of time before the hint was even loaded
            schedule = list_schedule(problem)
            bound = lower_bound_s(problem)
            optimal = False
        else:
            raise SolverError(f"CP-SAT returned {solver.status_name(status)} on a feasible "
                              "schedule problem")
        bound = min(bound, schedule.makespan_s)
        return ScheduleResult(self.name, schedule.makespan_s, bound,
                              optimal or schedule.makespan_s <= bound, schedule,
                              time.perf_counter() - started)
