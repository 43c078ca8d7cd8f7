"""Model-based sampling of the design space with Optuna (docs/commands/search.md, Strategies).

The space is the grid the designs come from: one integer parameter per grid dimension that
takes more than one value in ``ctx.designs`` -- tensor cores, array shape (rows, columns and
vector lanes, which the spaces tie together), vector cores, buffer, HBM (and, only if the
designs differ in anything else, one more for the rest).  A parameter is the index of the
value in the sorted list of that dimension's values, so the samplers see the order (a larger
buffer sits next to a smaller one) rather than unrelated labels.

* Scalar objectives (``throughput``, ``throughput-per-watt``): the Tree-structured Parzen
  Estimator, maximising ``ctx.score`` (Bergstra, Bardenet, Bengio and Kégl, "Algorithms for
  Hyper-Parameter Optimization", NeurIPS 2011), multivariate over the grid dimensions, with
  the constant liar so the trials of one batch spread out.
* ``pareto``: NSGA-II (Deb, Pratap, Agarwal and Meyarivan, "A Fast and Elitist Multiobjective
  Genetic Algorithm: NSGA-II", IEEE TEC 6(2), 2002) on (throughput up, area down, TDP down).
  Designs without a feasible plan are told as (0, area, TDP) with a violated constraint, so
  the constrained domination of Deb et al. (section VI) ranks them behind every feasible
  design; Optuna's ``best_trials`` drops them too.

Parameter combinations that are not in ``ctx.designs`` (the area and power rules removed
them) are never evaluated; they are told as ``PRUNED``.  TPE puts pruned trials behind every
completed one, so it learns to stay away from the excluded corner of the grid; telling
``FAIL`` instead makes TPE ignore them and ask for such combinations again and again (tiny
space, gpt2-xl on 1024 devices, global batch 4096, budget 15, seeds 0-19: 30 asks per run
with ``PRUNED``, 61 with ``FAIL``, designs about as good).  NSGA-II ignores both states alike (only completed
trials enter a generation), so ``PRUNED`` serves both.  Such combinations, suggestions of a
design evaluated before (told its known result again) and designs ruled out by a bound do
not count against the budget, but every ask counts against ``max_asks_per_design * budget``,
so the loop always ends.  When the sampler suggests nothing new ``stall_limit`` asks in a
row, one unvisited design, drawn with a generator seeded by ``ctx.seed``, is enqueued; since
``stall_limit < max_asks_per_design`` (the defaults), a budget as large as the space visits
every design.

Scalar objectives only: when ``ctx.bounds`` is given, the new designs of a batch whose bound
is below the best score so far are not evaluated (told ``PRUNED``, counted in
``StrategyOutcome.pruned``).  Such a design is provably no better than the incumbent, so
skipping it never drops a winner (later suggestions can differ, as the sampler is told
``PRUNED`` rather than a score).  A Pareto search prunes nothing: a slow design can
still be on the front by area or power.

Trials are asked in batches of ``batch_size`` distinct new designs, evaluated with one
``ctx.evaluate`` call (in parallel when the executor allows) and then told.  The default
batch is :data:`DEFAULT_BATCH` designs whatever the number of workers, so a run depends only on
the designs, their results, the bounds, ``ctx.seed``, the batch size and the strategy's
settings, never on ``--jobs``.

On the tiny space above, TPE with budget 15 finds designs within 3.4 % of the optimum on
average (the optimum itself in 11 of 20 seeds), against 5.9 % (a third of the time) for 15
designs drawn at random; with budget 25, 1.0 % (14 of 20) against 2.6 % (57 %).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from archplace.base.errors import ConfigError
from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective, pareto_key
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.hw.accelerator import Accelerator

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 100
"""Designs evaluated when ``ctx.budget`` is None (or the whole space, when smaller)."""
DEFAULT_BATCH = 4
"""Designs asked per evaluation call when no batch size is given: fixed, so that the designs
visited never depend on the number of workers (1, 2 and 4 workers kept their former batches)."""

_INFEASIBLE = "infeasible"  # name of the constraint told with Pareto trials


def _array(acc: Accelerator) -> tuple[int, int, int]:
    return (acc.array_rows, acc.array_cols, acc.vector_lanes)


def _rest(acc: Accelerator) -> tuple[Any, ...]:
    searched = {"name", "tensor_cores", "array_rows", "array_cols", "vector_lanes", "vector_cores",
                "buffer_bytes", "hbm_bytes"}
    return tuple(getattr(acc, f.name) for f in dataclasses.fields(acc) if f.name not in searched)


def _array_order(shape: tuple[int, int, int]) -> tuple[int, int, int, int]:
    rows, cols, lanes = shape
    return (rows * cols, rows, cols, lanes)


# (parameter name, the design's value, sort key of the values)
_DIMENSIONS: tuple[tuple[str, Callable[[Accelerator], Any], Callable[[Any], Any]], ...] = (
    ("tensor_cores", lambda a: a.tensor_cores, lambda v: v),
    ("array", _array, _array_order),
    ("vector_cores", lambda a: a.vector_cores, lambda v: v),
    ("buffer", lambda a: a.buffer_bytes, lambda v: v),
    ("hbm", lambda a: a.hbm_bytes, lambda v: v),
    ("other", _rest, repr),
)


@dataclass(frozen=True)
class DesignGrid:
    """The designs as points of an integer grid (one axis per dimension that varies).

    Attributes:
        names: parameter names, one per axis.
        values: the sorted distinct values of each axis.
        designs: the design at each grid point (points not listed are not designs); designs
            identical in every field but the name share a point, the first one is kept.
    """

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    designs: dict[tuple[int, ...], Accelerator]

    @classmethod
    def of(cls, designs: Sequence[Accelerator]) -> DesignGrid:
        """The grid spanned by ``designs``."""
        names, values, getters = [], [], []
        for name, get, order in _DIMENSIONS:
            distinct = sorted({get(acc) for acc in designs}, key=order)
            if len(distinct) > 1:
                names.append(name)
                values.append(tuple(distinct))
                getters.append(get)
        index = [{value: i for i, value in enumerate(axis)} for axis in values]
        points: dict[tuple[int, ...], Accelerator] = {}
        for acc in designs:
            point = tuple(ix[get(acc)] for ix, get in zip(index, getters, strict=True))
            points.setdefault(point, acc)
        return cls(tuple(names), tuple(values), points)

    @property
    def size(self) -> int:
        """Number of grid points, designs or not."""
        count = 1
        for axis in self.values:
            count *= len(axis)
        return count

    def distributions(self) -> dict[str, BaseDistribution]:
        """One ordered integer parameter (the value's index) per axis."""
        return {name: IntDistribution(0, len(axis) - 1) for name, axis in zip(self.names, self.values,
                                                                               strict=True)}

    def point(self, params: dict[str, Any]) -> tuple[int, ...]:
        """The grid point of a trial's parameters."""
        return tuple(int(params[name]) for name in self.names)

    def params(self, point: tuple[int, ...]) -> dict[str, int]:
        """The trial parameters of a grid point."""
        return dict(zip(self.names, point, strict=True))


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's INFO lines (one per trial) off for the duration; the old level is restored."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(previous)


@dataclass
class _Tally:
    asks: int = 0
    outside: int = 0  # parameter combinations that are not designs
    repeats: int = 0  # suggestions of a design already visited (or already in the batch)
    injected: int = 0  # unvisited designs enqueued after a stall
    pruned: int = 0  # designs whose bound is below the incumbent (never evaluated)
    batches: int = 0  # ctx.evaluate calls


@dataclass(frozen=True)
class OptunaStrategy:
    """TPE (scalar objectives) or NSGA-II (``pareto``) sampling of the designs.

    See the module docstring for how the space is encoded and how designs outside it,
    repeats and infeasible designs are told.

    Attributes:
        batch_size: distinct new designs asked before one ``ctx.evaluate`` call (None:
            :data:`DEFAULT_BATCH`, whatever ``ctx.parallelism`` is).
        max_asks_per_design: the loop stops after this many asks per design of the budget.
        stall_limit: asks in a row without a new design before an unvisited one is enqueued.
        startup_trials: TPE's random start (None: a quarter of the budget, 4 to 10 trials;
            outside combinations and repeats count, as they are trials too).
        population_size: NSGA-II's generation size (None: a quarter of the budget, 4 to 50).
        name: the strategy's name.

    Raises:
        ConfigError: a non-positive size or limit, or a population below 2.
    """

    batch_size: int | None = None
    max_asks_per_design: int = 20
    stall_limit: int = 10
    startup_trials: int | None = None
    population_size: int | None = None
    name: str = "optuna"

    def __post_init__(self) -> None:
        for field, least in (("batch_size", 1), ("max_asks_per_design", 1), ("stall_limit", 1),
                             ("startup_trials", 1), ("population_size", 2)):
            value = getattr(self, field)
            if value is None and field in ("batch_size", "startup_trials", "population_size"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"optuna strategy: {field} must be a whole number >= {least}, "
                                  f"got {value!r}")

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        """Sample, evaluate in batches and tell until the budget, the space or the asks run out.

        Raises:
            ConfigError: a budget below 1.
        """
        grid = DesignGrid.of(ctx.designs)
        pareto = ctx.objective is Objective.PARETO
        budget = ctx.budget if ctx.budget is not None else DEFAULT_BUDGET
        if budget < 1:
            raise ConfigError(f"optuna strategy: the budget must be at least 1, got {budget}")
        budget = min(budget, len(grid.designs))
        batch_size = self.batch_size or DEFAULT_BATCH
        with _quiet_optuna():
            study = self._study(pareto, budget, ctx.seed)
            evaluated, tally = self._search(study, grid, ctx, budget, batch_size, pareto)
        label = "NSGA-II" if pareto else "TPE"
        if len(evaluated) + tally.pruned >= len(grid.designs):
            why = "every design visited"
        elif len(evaluated) >= budget:
            why = "budget reached"
        else:
            why = f"ask limit of {self.max_asks_per_design * budget} reached"
        pruned = f", {tally.pruned} pruned by bound" if tally.pruned else ""
        note = (f"{label}: {len(evaluated)} designs in {tally.batches} batches{pruned}, {why} "
                f"({tally.asks} asks: {tally.outside} outside the space, {tally.repeats} repeats, "
                f"{tally.injected} enqueued after stalls)")
        log.info("%s", note)
        return StrategyOutcome(tuple(evaluated), tally.pruned, note)

    def _study(self, pareto: bool, budget: int, seed: int) -> optuna.Study:
        sampler: optuna.samplers.BaseSampler
        if pareto:
            population = self.population_size or max(4, min(50, budget // 4))
            sampler = optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
            return optuna.create_study(directions=["maximize", "minimize", "minimize"], sampler=sampler)
        startup = self.startup_trials or max(4, min(10, budget // 4))
        sampler = optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed, multivariate=True,
                                             constant_liar=True)
        return optuna.create_study(direction="maximize", sampler=sampler)

    def _search(self, study: optuna.Study, grid: DesignGrid, ctx: StrategyContext, budget: int,
                batch_size: int, pareto: bool) -> tuple[list[DesignResult], _Tally]:
        distributions = grid.distributions()
        rng = random.Random(ctx.seed)
        known: dict[tuple[int, ...], DesignResult] = {}
        skipped: set[tuple[int, ...]] = set()  # ruled out by the bound
        evaluated: list[DesignResult] = []
        tally = _Tally()
        max_asks = self.max_asks_per_design * budget
        best = 0.0  # incumbent score (scalar objectives)
        stall = 0

        def tell(trial: Trial, result: DesignResult) -> None:
            if pareto:
                trial.set_constraint(_INFEASIBLE, 0.0 if result.best is not None else 1.0)
                study.tell(trial, list(pareto_key(result)))
            else:
                study.tell(trial, ctx.score(result))

        def unvisited() -> int:
            return len(grid.designs) - len(known) - len(skipped)

        while len(known) < budget and unvisited() > 0 and tally.asks < max_asks:
            want = min(batch_size, budget - len(known), unvisited())
            batch: dict[tuple[int, ...], list[Trial]] = {}
            while len(batch) < want and tally.asks < max_asks:
                if stall >= self.stall_limit:
                    fresh = [p for p in grid.designs
                             if p not in known and p not in skipped and p not in batch]
                    study.enqueue_trial(grid.params(rng.choice(fresh)))
                    tally.injected += 1
                    stall = 0
                trial = study.ask(distributions)
                tally.asks += 1
                point = grid.point(trial.params)
                stall += 1
                if point not in grid.designs:
                    study.tell(trial, state=TrialState.PRUNED)
                    tally.outside += 1
                elif point in known:
                    tell(trial, known[point])
                    tally.repeats += 1
                elif point in skipped:
                    study.tell(trial, state=TrialState.PRUNED)
                    tally.repeats += 1
                elif point in batch:
                    batch[point].append(trial)
                    tally.repeats += 1
                else:
                    batch[point] = [trial]
                    stall = 0
            if ctx.bounds is not None and not pareto and best > 0.0 and batch:
                points = list(batch)
                for point, bound in zip(points, ctx.bounds([grid.designs[p] for p in points]), strict=True):
                    if bound < best:  # cannot beat the incumbent (ties are kept)
                        for trial in batch.pop(point):
                            study.tell(trial, state=TrialState.PRUNED)
                        skipped.add(point)
                        tally.pruned += 1
            if not batch:
                continue  # all pruned (or no asks left: the loop condition ends it)
            results = ctx.evaluate([grid.designs[p] for p in batch])
            tally.batches += 1
            for (point, trials), result in zip(batch.items(), results, strict=True):
                known[point] = result
                evaluated.append(result)
                best = max(best, ctx.score(result))
                for trial in trials:
                    tell(trial, result)
        return evaluated, tally
