"""The pluggable part of a search: which designs to evaluate, in what order, and when to stop.

A :class:`Strategy` gets a :class:`StrategyContext` -- the candidate designs (already within
the area and power budgets), the objective, and an ``evaluate`` callable that runs designs
through the executor and the result store -- and returns the designs it evaluated.  Strategies
never evaluate designs themselves, so every strategy gets parallel execution, resumable
storage and shared layer schedules for free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective
from archplace.hw.accelerator import Accelerator

Evaluate = Callable[[Sequence[Accelerator]], list[DesignResult]]
"""Evaluate designs (in parallel when the executor allows); results in input order.

Designs evaluated before (in this search, or in the store of an interrupted one) come back
at once without being evaluated again."""


@dataclass(frozen=True)
class StrategyContext:
    """What a strategy works with.

    Attributes:
        designs: the candidate designs (the space, filtered by the area and power budgets);
            a strategy evaluates only designs from this tuple.
        objective: what is maximised (``score`` gives the scalar; ``pareto`` strategies use
            :func:`archplace.dse.objective.pareto_key`).
        evaluate: runs designs (see :data:`Evaluate`).
        score: the scalar objective of a result (0 when infeasible; higher is better).
        seed: random seed for stochastic strategies.
        budget: the most designs to evaluate (None: the strategy's own default / no limit).
        bounds: upper bounds of ``score`` for a batch of designs (computed in parallel), or
            None when no bound is known; ``bounds([acc])[0] >= score(evaluate([acc])[0])``
            always (pruning strategies use them; :mod:`archplace.dse.bounds`).
        parallelism: evaluations that can run at once (size batches to a multiple of it).
        pace: for (design, result) pairs, the pace of the result's best plan if run on the design:
            its slowest pipeline segment per micro-batch in seconds (geometric mean over the
            models; cheap, no plan search), None for an infeasible result; or None when not
            available.  WHAM uses it to measure how much a move shortens the bottleneck stage.
        keep: how many of the best designs the caller shows (>= 1): a pruning strategy prunes only
            designs that provably rank below the ``keep``-th best, so those are exact.
    """

    designs: tuple[Accelerator, ...]
    objective: Objective
    evaluate: Evaluate
    score: Callable[[DesignResult], float]
    seed: int = 0
    budget: int | None = None
    bounds: Callable[[Sequence[Accelerator]], list[float]] | None = None
    parallelism: int = 1
    pace: Callable[[Sequence[tuple[Accelerator, DesignResult]]], list[float | None]] | None = None
    keep: int = 1


@dataclass(frozen=True)
class StrategyOutcome:
    """What a strategy did.

    Attributes:
        evaluated: every design it evaluated (any order).
        pruned: designs skipped because a bound proved they cannot win.
        note: one line on how it stopped (e.g. "stopped after 40 designs without improvement").
    """

    evaluated: tuple[DesignResult, ...]
    pruned: int = 0
    note: str = ""


class Strategy(Protocol):
    """A way of exploring the design space (exhaustive, phaze, wham, optuna)."""

    @property
    def name(self) -> str:
        """Short name (``exhaustive``, ``phaze``, ...)."""
        ...

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        """Explore ``ctx.designs`` with ``ctx.evaluate`` and return what was evaluated."""
        ...
