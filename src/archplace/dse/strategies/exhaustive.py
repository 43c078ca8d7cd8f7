"""Exhaustive search with pruning that cannot lose the optimum.

Every design's objective is bounded from above first (:mod:`archplace.dse.bounds`; cheap: no
layer is scheduled).  Designs are then evaluated in batches in decreasing order of their bound,
and the search stops as soon as the next bound is below the incumbent's objective: no design
left can beat (or tie) it.  For the ``pareto`` objective a design is skipped when an evaluated
design dominates its best case (bound throughput, its own area and TDP), since it then
dominates the design itself.  A design whose HBM is below the memory floor is never evaluated;
when that is every design, only the one with the most HBM is, so that the result says in numbers
why the model does not fit.  With ``prune=False`` every design is evaluated (plain evaluation,
the reference the pruned search must reproduce).
"""

from __future__ import annotations

from dataclasses import dataclass

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective, dominates, pareto_key
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.power import tdp_w

BATCH = 8
"""Designs per batch: larger batches keep more workers busy, smaller ones prune sooner.  Fixed, so
that the designs evaluated are the same for any number of workers."""

_SAFETY = 1e-9
"""Relative slack: a design is pruned only when its bound is below the incumbent by more than
rounding could explain."""


@dataclass(frozen=True)
class ExhaustiveStrategy:
    """Every design of the space, best bound first, skipping designs that provably cannot be among
    the best ``ctx.keep``.

    Attributes:
        prune: use the bounds (default); False evaluates every design.
        batch: designs per batch (>= 1; module docstring).
    """

    prune: bool = True
    name: str = "exhaustive"
    batch: int = BATCH

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        """Evaluate the space; ``pruned`` counts the designs skipped by their bound."""
        designs = list(ctx.designs)
        if not self.prune or ctx.bounds is None:
            return StrategyOutcome(tuple(ctx.evaluate(designs)), 0, f"{len(designs)} designs evaluated")
        bounds = dict(zip((d.name for d in designs), ctx.bounds(designs), strict=True))
        order = sorted(designs, key=lambda d: (-bounds[d.name], d.name))
        if order and bounds[order[0].name] <= 0:
            # No design can hold the model state. Evaluate only the one with the most HBM, so the
            # result says in numbers why it does not fit.
            closest = max(order, key=lambda d: (d.hbm_bytes, bounds[d.name], d.name))
            note = (f"1 design evaluated, {len(order) - 1} pruned: no design's HBM holds the model "
                    f"state (memory floor)")
            return StrategyOutcome(tuple(ctx.evaluate([closest])), len(order) - 1, note)
        evaluated: list[DesignResult] = []
        pruned = 0
        i = 0
        while i < len(order):
            incumbent = self._incumbent(evaluated, ctx)
            chunk: list[Accelerator] = []
            while i < len(order) and len(chunk) < max(1, self.batch):
                acc = order[i]
                i += 1
                if self._beaten(acc, bounds[acc.name], incumbent, evaluated, ctx):
                    pruned += 1
                else:
                    chunk.append(acc)
            if ctx.objective is not Objective.PARETO and not chunk:
                pruned += len(order) - i  # bounds only fall from here on
                break
            evaluated.extend(ctx.evaluate(chunk))
        note = f"{len(evaluated)} designs evaluated, {pruned} pruned by their bound"
        return StrategyOutcome(tuple(evaluated), pruned, note)

    @staticmethod
    def _incumbent(evaluated: list[DesignResult], ctx: StrategyContext) -> float:
        """The ``ctx.keep``-th best score of ``evaluated`` (0 while fewer designs are feasible)."""
        scores = sorted((ctx.score(r) for r in evaluated if r.best is not None), reverse=True)
        keep = max(1, ctx.keep)
        return scores[keep - 1] if len(scores) >= keep else 0.0

    @staticmethod
    def _beaten(acc: Accelerator, bound: float, incumbent: float, evaluated: list[DesignResult],
                ctx: StrategyContext) -> bool:
        """True when ``ctx.keep`` evaluated designs (pareto: one) provably beat every outcome of ``acc``."""
        if bound <= 0:  # cannot train at all (memory floor): never the answer
            return True
        if ctx.objective is Objective.PARETO:
            best_case = (bound * (1 + _SAFETY), area_mm2(acc), tdp_w(acc))
            return any(r.best is not None and dominates(pareto_key(r), best_case) for r in evaluated)
        return bound * (1 + _SAFETY) < incumbent
