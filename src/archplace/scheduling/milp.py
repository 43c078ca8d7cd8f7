"""PHAZE's mixed-integer formulation of the per-layer problem, on HiGHS or Gurobi.

For cross-checks of the CP-SAT backend and for benchmarks/bench_schedule.py.  The
formulation is PHAZE's (Wang et al., ICML 2024, and its public code), rewritten
here on the integer time scale of :mod:`archplace.scheduling.base`.  Over the ops
of positive duration (PHAZE's "Nop"s -- here ops with a zero-length mode -- only
pass precedence on):

* variables: start ``t_i ≥ 0``; ``y_i ∈ {0, 1}`` (1 = on all cores), latency
  ``p_i = s_i + (a_i - s_i)·y_i``; for every ordered pair ``x_ij ∈ {0, 1}``
  (1 = i ends before j starts); makespan ``T``; minimise T;
* ``T ≥ t_i + p_i``;  ``x_ij + x_ji ≤ 1``;  transitivity ``x_ik ≥ x_ij + x_jk - 1``
  for every triple;
* j a descendant of i: ``x_ij = 1``, ``x_ji = 0``, ``t_i + p_i ≤ t_j``;
* i, j incomparable: big-M ``t_i + p_i - H·(1 - x_ij) ≤ t_j`` with
  ``H = min(Σ a_i, Σ s_i)``, and ``x_ij + x_ji ≥ y_i`` (an op on all cores is
  ordered against every other op);
* cores, added lazily as PHAZE does (solve without them, and add them for a core
  type only when the solution runs more single ops of that type at once than
  there are cores): ``z_ic ∈ {0, 1}`` for each op i using type T and core c of T,
  ``Σ_c z_ic + y_i = 1``, and ``x_ij + x_ji ≥ z_ic + z_jc - 1`` for incomparable
  i, j using T.  A fused op picks its tensor and its vector core independently
  (PHAZE paired tensor core c with vector core c; see :mod:`archplace.scheduling.problem`).

Beyond PHAZE, and as the CP-SAT backend gets them: the list schedule as MIP start
and upper bound of T, and the lower bound of :mod:`archplace.scheduling.bounds` as
lower bound of T.  The model has O(n²) binaries and O(n³) rows (O(n²·C) with the
core rows) -- the reason CP-SAT replaces it.

HiGHS runs in a separate process (:mod:`archplace.scheduling._highs_worker`): the
highspy and OR-Tools wheels each ship a ``libhighs.so.1`` of a different HiGHS
version (1.15 and 1.12), and whichever loads second in a process fails with
undefined symbols.
"""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError, SolverError
from archplace.scheduling.base import ScheduleResult, SolveOptions, TickScale
from archplace.scheduling.list_scheduler import list_schedule, lower_bound_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import Mode, Schedule, serial_schedule, topological_by
from archplace.workload.graph import CoreType

_TYPES = (CoreType.TENSOR, CoreType.VECTOR)

PARENT_ENV = "ARCHPLACE_HIGHS_PARENT"
"""Environment variable naming the process id the HiGHS worker must not outlive."""


@dataclass
class MilpArrays:
    """A MILP ``min c·x  s.t.  row_lower ≤ A x ≤ row_upper, col_lower ≤ x ≤ col_upper``,
    A row-wise sparse; ``integer`` marks integer columns; ``start`` a feasible point."""

    cost: NDArray[np.float64]
    col_lower: NDArray[np.float64]
    col_upper: NDArray[np.float64]
    integer: NDArray[np.bool_]
    row_start: NDArray[np.int32]
    row_index: NDArray[np.int32]
    row_value: NDArray[np.float64]
    row_lower: NDArray[np.float64]
    row_upper: NDArray[np.float64]
    start: NDArray[np.float64]


@dataclass(frozen=True)
class _Outcome:
    values: NDArray[np.float64] | None
    optimal: bool
    bound: float
    runtime_s: float


class _Rows:
    """Rows collected in blocks of equal length: ``index``/``value`` of shape (m, L)."""

    def __init__(self) -> None:
        self.blocks: list[tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
                                NDArray[np.float64]]] = []

    def add(self, index: Any, value: Any, lower: Any, upper: Any = math.inf) -> None:
        index = np.asarray(index, dtype=np.int64)
        if index.ndim == 1:
            index = index[None, :]
        m = index.shape[0]
        if m == 0:
            return
        self.blocks.append((index, np.broadcast_to(np.asarray(value, float), index.shape),
                            np.broadcast_to(np.asarray(lower, float), (m,)),
                            np.broadcast_to(np.asarray(upper, float), (m,))))

    def csr(self) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float64],
                           NDArray[np.float64], NDArray[np.float64]]:
        lengths = np.concatenate([np.full(b[0].shape[0], b[0].shape[1]) for b in self.blocks])
        start = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        index = np.concatenate([b[0].ravel() for b in self.blocks]).astype(np.int32)
        value = np.concatenate([b[1].ravel() for b in self.blocks])
        lower = np.concatenate([b[2] for b in self.blocks])
        upper = np.concatenate([b[3] for b in self.blocks])
        return start, index, value, lower, upper


class _Formulation:
    """Column layout and rows of the formulation (module docstring) for one ticked problem.

    Columns: T, then ``t_i`` and ``y_i`` for every op, then ``x`` for every ordered pair
    of distinct timed ops, then the ``z`` of the core types with core constraints.
    """

    def __init__(self, ticked: ScheduleProblem, lower: float, upper: float) -> None:
        self.p = ticked
        n = len(ticked.ops)
        self.timed = np.array([op.id for op in ticked.ops if op.min_s > 0], dtype=np.int64)
        k = len(self.timed)
        self.col_y = 1 + n
        self.col_x = 1 + 2 * n
        self.n_base = self.col_x + k * (k - 1)
        self.lower, self.upper = lower, upper
        self.single = np.array([op.single_s for op in ticked.ops])
        self.all = np.array([op.all_s for op in ticked.ops])
        self.big_m = float(min(self.all[self.timed].sum(), self.single[self.timed].sum()))
        succs = ticked.successors()
        desc = np.zeros((n, n), dtype=bool)  # desc[i, j]: j is a descendant of i
        for op in reversed(ticked.ops):
            for s in succs[op.id]:
                desc[op.id] |= desc[s]
                desc[op.id, s] = True
        sub = desc[np.ix_(self.timed, self.timed)]
        self.after = sub  # after[a, b]: timed op b descends from timed op a
        self.free = ~(sub | sub.T) & ~np.eye(k, dtype=bool)  # incomparable pairs

    def x(self, a: Any, b: Any) -> Any:
        """Column of ``x`` for timed positions ``a`` -> ``b`` (arrays welcome)."""
        k = len(self.timed)
        return self.col_x + np.asarray(a) * (k - 1) + np.asarray(b) - (np.asarray(b) > a)

    def z_columns(self, cores_for: tuple[CoreType, ...]) -> dict[tuple[int, CoreType], int]:
        columns = {}
        next_col = self.n_base
        for t in cores_for:
            for i in self.timed:
                if self.p.ops[i].uses(t):
                    columns[(int(i), t)] = next_col
                    next_col += self.p.cores(t)
        return columns

    def build(self, cores_for: tuple[CoreType, ...], start: Schedule) -> MilpArrays:
        ops, n, k = self.p.ops, len(self.p.ops), len(self.timed)
        z = self.z_columns(cores_for)
        n_cols = self.n_base + sum(self.p.cores(t) for (_, t) in z)
        lo, hi = np.zeros(n_cols), np.ones(n_cols)
        lo[0], hi[0] = self.lower, self.upper
        hi[1:1 + n] = self.upper
        integer = np.ones(n_cols, dtype=bool)
        integer[:1 + n] = False
        s, a = self.single.copy(), self.all.copy()
        nop = np.array([op.min_s == 0 for op in ops], dtype=bool)
        lo[self.col_y:self.col_y + n][nop] = hi[self.col_y:self.col_y + n][nop] = (s[nop] > 0)
        s[nop] = a[nop] = 0.0  # a Nop is fixed in its zero-length mode
        ids = np.arange(n)
        rows = _Rows()
        rows.add(np.stack([np.zeros(n, int), 1 + ids, self.col_y + ids], 1),
                 np.stack([np.ones(n), -np.ones(n), -(a - s)], 1), s)  # T >= t_i + p_i
        edges = np.array([(q, op.id) for op in ops for q in op.preds], dtype=np.int64).reshape(-1, 2)
        q, j = edges[:, 0], edges[:, 1]  # edges: the only precedence through Nops
        rows.add(np.stack([1 + j, 1 + q, self.col_y + q], 1),
                 np.stack([np.ones(len(q)), -np.ones(len(q)), -(a[q] - s[q])], 1), s[q])
        pa, pb = np.nonzero(self.after)  # descendants: x fixed, t_i + p_i <= t_j
        lo[self.x(pa, pb)] = hi[self.x(pa, pb)] = 1.0
        lo[self.x(pb, pa)] = hi[self.x(pb, pa)] = 0.0
        i, j = self.timed[pa], self.timed[pb]
        rows.add(np.stack([1 + j, 1 + i, self.col_y + i], 1),
                 np.stack([np.ones(len(i)), -np.ones(len(i)), -(a[i] - s[i])], 1), s[i])
        fa, fb = np.nonzero(self.free)  # incomparable, ordered: big-M and "all" ordering
        i, j = self.timed[fa], self.timed[fb]
        ones = np.ones(len(i))
        rows.add(np.stack([1 + j, 1 + i, self.col_y + i, self.x(fa, fb)], 1),
                 np.stack([ones, -ones, -(a[i] - s[i]), -self.big_m * ones], 1), s[i] - self.big_m)
        rows.add(np.stack([self.x(fa, fb), self.x(fb, fa), self.col_y + i], 1), [1.0, 1.0, -1.0], 0.0)
        ua, ub = np.triu_indices(k, 1)
        rows.add(np.stack([self.x(ua, ub), self.x(ub, ua)], 1), [1.0, 1.0], -math.inf, 1.0)
        ti, tj, tk = (g.ravel() for g in np.meshgrid(np.arange(k), np.arange(k), np.arange(k),
                                                     indexing="ij"))
        distinct = (ti != tj) & (tj != tk) & (ti != tk)  # transitivity over every triple
        ti, tj, tk = ti[distinct], tj[distinct], tk[distinct]
        rows.add(np.stack([self.x(ti, tk), self.x(ti, tj), self.x(tj, tk)], 1), [1.0, -1.0, -1.0],
                 -1.0)
        for t in cores_for:
            cores = self.p.cores(t)
            users = [pos for pos, op_id in enumerate(self.timed) if ops[op_id].uses(t)]
            for pos in users:
                i0 = int(self.timed[pos])
                rows.add(list(range(z[(i0, t)], z[(i0, t)] + cores)) + [self.col_y + i0], 1.0,
                         1.0, 1.0)
            for x_pos, pa_ in enumerate(users):
                for pb_ in users[x_pos + 1:]:
                    if self.free[pa_, pb_]:
                        za, zb = z[(int(self.timed[pa_]), t)], z[(int(self.timed[pb_]), t)]
                        c = np.arange(cores)
                        rows.add(np.stack([np.full(cores, self.x(pa_, pb_)),
                                           np.full(cores, self.x(pb_, pa_)), za + c, zb + c], 1),
                                 [1.0, 1.0, -1.0, -1.0], -1.0)
        start_idx, index, value, row_lo, row_hi = rows.csr()
        return MilpArrays(cost=np.eye(1, n_cols).ravel(), col_lower=lo, col_upper=hi,
                          integer=integer, row_start=start_idx, row_index=index, row_value=value,
                          row_lower=row_lo, row_upper=row_hi, start=self._start(start, z, n_cols))

    def _start(self, schedule: Schedule, z: dict[tuple[int, CoreType], int],
               n_cols: int) -> NDArray[np.float64]:
        values = np.zeros(n_cols)
        values[0] = schedule.makespan_s
        placed = schedule.ops
        starts = np.array([p.start_s for p in placed])
        ends = np.array([p.end_s for p in placed])
        values[1:1 + len(placed)] = starts
        values[self.col_y:self.col_y + len(placed)] = [float(p.mode == "all") for p in placed]
        k = len(self.timed)
        pa, pb = np.nonzero(~np.eye(k, dtype=bool))
        values[self.x(pa, pb)] = ends[self.timed[pa]] <= starts[self.timed[pb]]
        for (i, t), col in z.items():
            if placed[i].mode == "single":
                fused_vector = t is CoreType.VECTOR and self.p.ops[i].core_type is CoreType.FUSED
                core = placed[i].vector_core if fused_vector else placed[i].core
                values[col + (core or 0)] = 1.0
        return values

    def overloaded(self, values: NDArray[np.float64]) -> tuple[CoreType, ...]:
        """Core types on which the solution runs more single ops at once than there are cores
        (each interval shrunk by half a tick against solver tolerances)."""
        over = []
        for t in _TYPES:
            events = []
            for i in self.timed:
                op = self.p.ops[i]
                if op.uses(t) and values[self.col_y + i] < 0.5:
                    events += [(values[1 + i] + op.single_s - 0.5, -1), (values[1 + i], 1)]
            running = peak = 0
            for _, step in sorted(events):
                running += step
                peak = max(peak, running)
            if peak > self.p.cores(t):
                over.append(t)
        return tuple(over)

    def schedule(self, problem: ScheduleProblem, values: NDArray[np.float64]) -> Schedule:
        """The schedule of a solution: its start order and modes, replayed on ``problem``."""
        n = len(problem.ops)
        modes: list[Mode] = ["all" if values[self.col_y + i] > 0.5 else "single" for i in range(n)]
        return serial_schedule(problem, topological_by(problem, values[1:1 + n].tolist()), modes)


def _solve_highs(model: MilpArrays, options: SolveOptions, time_limit_s: float) -> _Outcome:
    import highspy  # only ever imported in the worker process (module docstring)

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("random_seed", int(options.seed))
    if options.workers:
        h.setOptionValue("threads", int(options.workers))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 1.0 - 1e-6)  # integral makespans: a gap < 1 tick is closed
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(model.cost), len(model.row_lower)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = model.cost, model.col_lower, model.col_upper
    lp.row_lower_ = np.where(np.isinf(model.row_lower), -highspy.kHighsInf, model.row_lower)
    lp.row_upper_ = np.where(np.isinf(model.row_upper), highspy.kHighsInf, model.row_upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_, lp.a_matrix_.index_ = model.row_start, model.row_index
    lp.a_matrix_.value_ = model.row_value
    lp.integrality_ = [highspy.HighsVarType.kInteger if flag else highspy.HighsVarType.kContinuous
                       for flag in model.integer]
    h.passModel(lp)
    h.setSolution(len(model.start), np.arange(len(model.start), dtype=np.int32), model.start)
    h.run()
    info = h.getInfo()
    has_solution = info.primal_solution_status == highspy.kSolutionStatusFeasible
    values = np.array(h.getSolution().col_value) if has_solution else None
    optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return _Outcome(values, optimal and has_solution, float(info.mip_dual_bound), h.getRunTime())


def _solve_gurobi(model: MilpArrays, options: SolveOptions, time_limit_s: float) -> _Outcome:
    import gurobipy as gp

    started = time.perf_counter()
    m = gp.Model()
    m.Params.OutputFlag = 0
    m.Params.TimeLimit = float(time_limit_s)
    m.Params.Seed = int(options.seed)
    if options.workers:
        m.Params.Threads = int(options.workers)
    m.Params.MIPGap = 0.0
    m.Params.MIPGapAbs = 1.0 - 1e-6
    kinds = [gp.GRB.INTEGER if flag else gp.GRB.CONTINUOUS for flag in model.integer]
    cols = [m.addVar(lb=lo, ub=hi, obj=c, vtype=kind) for lo, hi, c, kind in
            zip(model.col_lower, model.col_upper, model.cost, kinds, strict=True)]
    for r in range(len(model.row_lower)):
        a, b = model.row_start[r], model.row_start[r + 1]
        expr = gp.LinExpr(model.row_value[a:b].tolist(), [cols[j] for j in model.row_index[a:b]])
        if math.isfinite(model.row_lower[r]):
            m.addLConstr(expr, gp.GRB.GREATER_EQUAL, float(model.row_lower[r]))
        if math.isfinite(model.row_upper[r]):
            m.addLConstr(expr, gp.GRB.LESS_EQUAL, float(model.row_upper[r]))
    for var, value in zip(cols, model.start, strict=True):
        var.Start = float(value)
    m.optimize()
    values = np.array([v.X for v in cols]) if m.SolCount > 0 else None
    return _Outcome(values, m.Status == gp.GRB.OPTIMAL and values is not None, float(m.ObjBound),
                    time.perf_counter() - started)


def phaze_solve(problem: ScheduleProblem, options: SolveOptions, engine: str) -> ScheduleResult:
    """Solve with PHAZE's formulation on ``engine`` (``highs`` | ``gurobi``), in this process,
    adding core constraints lazily; returns the best schedule found, never raises on time-out."""
    started = time.perf_counter()
    name = engine
    if not problem.ops:
        return ScheduleResult(name, 0.0, 0.0, True, Schedule(0.0, ()), 0.0)
    scale = TickScale.for_problem(problem, options.resolution)
    upper = scale.upper.makespan_s
    formulation = _Formulation(scale.problem, min(scale.lower_bound_ticks(), upper), upper)
    solve = _solve_highs if engine == "highs" else _solve_gurobi
    cores_for: tuple[CoreType, ...] = ()
    best, bound, optimal = scale.upper, -math.inf, False
    while True:
        remaining = options.time_limit_s - (time.perf_counter() - started)
        if remaining <= 0:
            break
        outcome = solve(formulation.build(cores_for, best), options, remaining)
        if outcome.values is None:
            break
        over = formulation.overloaded(outcome.values)
        if not over:  # a solution of the full problem
            found = formulation.schedule(scale.problem, outcome.values)
            if found.makespan_s <= best.makespan_s:
                best = found
            bound, optimal = outcome.bound, outcome.optimal
            break
        bound = max(bound, outcome.bound)  # a relaxation's bound is still a bound
        new = tuple(t for t in _TYPES if t in cores_for or t in over)
        if new == cores_for:  # only solver tolerances could do this: keep the list schedule
            break
        cores_for = new
    schedule = serial_schedule(problem, topological_by(problem, [o.start_s for o in best.ops]),
                               [o.mode for o in best.ops])
    low = min(max(lower_bound_s(problem), scale.lower_bound_s(problem, bound) if math.isfinite(
        bound) else 0.0), schedule.makespan_s)
    return ScheduleResult(name, schedule.makespan_s, low, optimal or schedule.makespan_s <= low,
                          schedule, time.perf_counter() - started)


class HighsScheduler:
    """PHAZE's MILP on HiGHS (highspy), solved in a worker process
    (``python -m archplace.scheduling._highs_worker``; module docstring).

    The problem goes to the worker and the result comes back through files in a private
    temporary directory; the worker's stdout and stderr (HiGHS prints a banner and its
    log there) are captured and only used to explain a failure.

    Args:
        worker: the command that starts the worker, before its two file arguments
            (default: this interpreter running :mod:`archplace.scheduling._highs_worker`).
    """

    name = "highs"
    GRACE_S = 60.0  # beyond the time limit, before the worker is killed

    def __init__(self, worker: tuple[str, ...] | None = None) -> None:
        self.worker = worker or (sys.executable, "-m", "archplace.scheduling._highs_worker")

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """Schedule ``problem``.  The time limit and the reported ``solve_time_s`` cover the
        solve in the worker, not the worker's start (~0.2 s).  A worker that overruns the
        limit by :attr:`GRACE_S` is killed and the list schedule is returned, not proven.  The
        worker is killed on an interrupt too, and ends by itself if this process dies
        (:func:`archplace.base.lifetime.guard_child`).

        Raises:
            SolverError: the worker process failed or wrote no result; the message ends
                with the last line the worker printed on stderr (else on stdout).
        """
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="archplace-highs-") as work:
            job, out = Path(work) / "job.pickle", Path(work) / "result.pickle"
            job.write_bytes(pickle.dumps((problem, options)))
            # The worker gets its own process group (a Ctrl-C reaches only this process, which
            # kills the worker) and this process's id (it ends when this process does).
            try:
                done = subprocess.run([*self.worker, str(job), str(out)], stdin=subprocess.DEVNULL,
                                      capture_output=True, timeout=options.time_limit_s + self.GRACE_S,
                                      check=False, process_group=0,
                                      env={**os.environ, PARENT_ENV: str(os.getpid())})
            except subprocess.TimeoutExpired:
                schedule = list_schedule(problem)
                bound = min(lower_bound_s(problem), schedule.makespan_s)
                return ScheduleResult(self.name, schedule.makespan_s, bound, False, schedule,
                                      time.perf_counter() - started)
            if done.returncode != 0 or not out.is_file():
                last = next((lines[-1].strip() for lines in (
                    stream.decode(errors="replace").strip().splitlines()
                    for stream in (done.stderr, done.stdout)) if lines), "no output")
                raise SolverError(f"highs worker failed (exit status {done.returncode}): {last}")
            result: ScheduleResult = pickle.loads(out.read_bytes())
        return result  # solve_time_s: the worker's, without its ~0.2 s start


class GurobiScheduler:
    """PHAZE's MILP on Gurobi (needs ``gurobipy`` and a licence)."""

    name = "gurobi"

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """Schedule ``problem``.

        Raises:
            ConfigError: gurobipy is not installed.
        """
        try:
            import gurobipy  # noqa: F401
        except ImportError:
            raise ConfigError("gurobi backend needs gurobipy") from None
        return phaze_solve(problem, options, "gurobi")


def describe(model: MilpArrays) -> dict[str, Any]:
    """Size of a built model: columns, integer columns, rows, non-zeros."""
    return {"columns": len(model.cost), "integer": int(model.integer.sum()),
            "rows": len(model.row_lower), "nonzeros": len(model.row_value)}
