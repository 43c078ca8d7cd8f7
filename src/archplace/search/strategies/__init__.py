"""Search strategies (the :class:`~archplace.search.strategy.Strategy` protocol).

* ``exhaustive``: every design, best bound first, with pruning that cannot lose the optimum;
* ``exhaustive-all``: every design, no pruning (the reference);
* ``phaze``: PHAZE's area-descending exploration with its stopping rule;
* ``wham``: WHAM's critical-path heuristic, growing one resource at a time;
* ``optuna``: Optuna's TPE sampler (NSGA-II for the pareto objective).
"""

from __future__ import annotations

from archplace.errors import ConfigError
from archplace.search.strategy import Strategy

STRATEGIES = ("exhaustive", "exhaustive-all", "phaze", "wham", "optuna")


def make_strategy(name: str) -> Strategy:
    """The strategy called ``name`` with its default settings.

    Raises:
        ConfigError: an unknown name.
    """
    if name in ("exhaustive", "exhaustive-all"):
        from archplace.search.strategies.exhaustive import ExhaustiveStrategy

        return ExhaustiveStrategy(prune=name == "exhaustive", name=name)
    if name == "phaze":
        from archplace.search.strategies.phaze import PhazeStrategy

        return PhazeStrategy()
    if name == "wham":
        from archplace.search.strategies.wham import WhamStrategy

        return WhamStrategy()
    if name == "optuna":
        from archplace.search.strategies.optuna_search import OptunaStrategy

        return OptunaStrategy()
    raise ConfigError(f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES)}")
