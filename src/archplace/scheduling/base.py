"""What every layer scheduler shares: options, result, the :class:`Scheduler` protocol,
and the integer time scale of the exact backends.

Exact backends (CP-SAT, the PHAZE MILP) work in integer *ticks*: a tick is a power
of two seconds, chosen so that the list schedule's makespan spans about
``SolveOptions.resolution`` ticks (or coarser, if a coarser power of two divides
every latency: then nothing is lost), and every latency is rounded UP to whole ticks.
A schedule of the rounded problem stays valid with the true latencies (every op
ends no later), so the backends return it retimed with the true latencies.  Their
claim "optimal" is about the rounded problem; the lower bound they report is
valid for the true one: if r ops had their latency rounded, any true schedule of
makespan M maps to a rounded one of makespan at most ``M / tick + r`` (delay
everything after each rounded op by one tick), so ``OPT ≥ tick · (bound − r)``.
With latencies that are multiples of the tick nothing is rounded and the claim is
exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.scheduling.list_scheduler import Schedule, list_schedule, lower_bound_s
from archplace.scheduling.problem import ScheduleProblem


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """Options of a scheduler run.

    Attributes:
        time_limit_s: wall-clock limit of the solver, seconds (> 0).  On time-out an
            exact backend returns its best schedule with ``optimal=False``.  Not used by
            CP-SAT when ``deterministic_time`` is given.
        seed: random seed of the solver.
        workers: solver threads; 0 = automatic (CP-SAT: max(4, CPU count), see
            :mod:`archplace.scheduling.cpsat`; HiGHS and Gurobi: their default).
        resolution: ticks spanned by the upper bound of the makespan in the integer
            time scale of the exact backends (module docstring), >= 16.  With 2^20 the
            rounding costs < 0.01 % of the bound on transformer blocks, and proofs were
            as fast as with 2^16 (measured on 6 backward blocks, 12 seeds each).
        deterministic_time: CP-SAT only: a limit on the solver's work instead of the wall
            clock (its ``max_deterministic_time``, in CP-SAT's deterministic seconds: a count
            of work that is about a second of one core, whatever the machine's load), > 0, or
            None (the default) for the wall-clock ``time_limit_s``.  With it CP-SAT's answer
            depends only on the problem, the seed and ``workers`` (several workers then
            interleave their search deterministically), never on load
            (:mod:`archplace.scheduling.cpsat`).  The other backends ignore it.

    Raises:
        ConfigError: a time limit that is not a finite number in (0, 86,400] s, a non-positive
            or non-finite deterministic time, workers outside 0..256, a seed outside
            0..2**31 - 1 (CP-SAT's and HiGHS's seeds are int32), a resolution below 16
            (ranges: :mod:`archplace.base.limits`).
    """

    time_limit_s: float = 10.0
    seed: int = 0
    workers: int = 0
    resolution: int = 1 << 20
    deterministic_time: float | None = None

    def __post_init__(self) -> None:
        limits.finite("time limit (s)", self.time_limit_s, 0.0, limits.MAX_TIME_LIMIT_S, low_open=True)
        limits.whole("workers", self.workers, 0, limits.MAX_SOLVER_THREADS)
        limits.whole("seed", self.seed, 0, limits.MAX_SOLVER_SEED)
        if (isinstance(self.resolution, bool) or not isinstance(self.resolution, int)
                or self.resolution < 16):
            raise ConfigError(f"resolution must be a whole number >= 16, got {self.resolution!r}")
        work = self.deterministic_time
        if work is not None and not (isinstance(work, int | float) and not isinstance(work, bool)
                                     and math.isfinite(work) and work > 0):
            raise ConfigError(f"deterministic_time must be a positive number of CP-SAT's deterministic "
                              f"seconds or None, got {work!r}")


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """Outcome of scheduling one layer.

    Attributes:
        backend: name of the scheduler (``list``, ``cpsat``, ``highs``, ``gurobi``).
        makespan_s: makespan of ``schedule``, seconds.
        lower_bound_s: proven lower bound on the optimal makespan, seconds.
        optimal: whether ``schedule`` is proven optimal (for the exact backends: for
            the problem with latencies rounded up to ticks, see the module docstring).
        schedule: the schedule (start, end, mode and core of every op).
        solve_time_s: wall-clock time of the solve, seconds.
    """

    backend: str
    makespan_s: float
    lower_bound_s: float
    optimal: bool
    schedule: Schedule
    solve_time_s: float = 0.0

    @property
    def gap(self) -> float:
        """Relative gap ``(makespan - lower bound) / makespan`` (0 for an empty layer)."""
        if self.makespan_s <= 0:
            return 0.0
        return max(0.0, (self.makespan_s - self.lower_bound_s) / self.makespan_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``{"backend", "makespan_s", "lower_bound_s", "optimal", "gap",
        "solve_time_s", "ops": [{"id", "start_s", "end_s", "mode", "core"}, ...]}``."""
        return {"backend": self.backend, "makespan_s": self.makespan_s,
                "lower_bound_s": self.lower_bound_s, "optimal": self.optimal, "gap": self.gap,
                "solve_time_s": self.solve_time_s,
                "ops": [o.to_dict() for o in self.schedule.ops]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleResult:
        """Inverse of :meth:`to_dict` (``gap`` is derived; the schedule's makespan is
        ``makespan_s``, as every backend returns it).

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            makespan = float(data["makespan_s"])
            optimal = data["optimal"]
            if not isinstance(optimal, bool):
                raise ValueError(f"optimal must be true or false, got {optimal!r}")
            return cls(str(data["backend"]), makespan, float(data["lower_bound_s"]), optimal,
                       Schedule.from_dict({"makespan_s": makespan, "ops": data["ops"]}),
                       float(data.get("solve_time_s", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid schedule result: {exc}") from None


class Scheduler(Protocol):
    """A per-layer scheduler: ``solve`` never raises on a time-out."""

    name: str

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """Schedule ``problem``; see :class:`ScheduleResult`."""
        ...


@dataclass(frozen=True, slots=True)
class TickScale:
    """The integer time scale of an exact backend (module docstring).

    Attributes:
        tick_s: seconds per tick (a power of two).
        problem: the problem with every latency in ticks, rounded up (integral floats).
        rounded: number of ops with a positive latency that was not a whole number of ticks.
        upper: a valid schedule of ``problem`` (the list schedule), in ticks.
    """

    tick_s: float
    problem: ScheduleProblem
    rounded: int
    upper: Schedule

    @classmethod
    def for_problem(cls, problem: ScheduleProblem, resolution: int) -> TickScale:
        """Choose the tick: the power of two seconds that makes the list schedule span
        about ``resolution`` ticks -- or, if coarser, the largest power of two that divides
        every latency, so that nothing is rounded (short integers help the solvers)."""
        horizon_s = list_schedule(problem).makespan_s
        tick_s = 2.0 ** math.floor(math.log2(horizon_s / resolution)) if horizon_s > 0 else 1.0
        exact = [_power_of_two_dividing(x) for op in problem.ops for x in (op.single_s, op.all_s)
                 if x > 0]
        if exact and min(exact) > tick_s:
            tick_s = min(exact)
        latencies = []
        rounded = 0
        for op in problem.ops:
            pair = (math.ceil(op.single_s / tick_s), math.ceil(op.all_s / tick_s))
            if any(t != lat / tick_s for t, lat in zip(pair, (op.single_s, op.all_s), strict=True)
                   if lat > 0):
                rounded += 1
            latencies.append((float(pair[0]), float(pair[1])))
        ticked = problem.with_latencies(latencies)
        return cls(tick_s, ticked, rounded, list_schedule(ticked))

    def lower_bound_s(self, original: ScheduleProblem, bound_ticks: float) -> float:
        """Lower bound in seconds on the true optimum, from a bound of the ticked problem."""
        ticks = math.ceil(bound_ticks - 1e-6)
        return max(lower_bound_s(original), self.tick_s * (ticks - self.rounded))

    def lower_bound_ticks(self) -> int:
        """:func:`lower_bound_s` of the ticked problem, rounded up to whole ticks."""
        return math.ceil(lower_bound_s(self.problem) - 1e-6)


def _power_of_two_dividing(value: float) -> float:
    """The largest power of two 2^k (k may be negative) of which ``value`` > 0 is a
    whole multiple; floats are dyadic, so there is one."""
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2**exponent, 0.5 <= mantissa < 1
    whole = int(mantissa * 2.0**53)
    trailing = (whole & -whole).bit_length() - 1
    return 2.0 ** (exponent - 53 + trailing)
