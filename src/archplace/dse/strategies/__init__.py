"""Search strategies (the :class:`~archplace.dse.strategy.Strategy` protocol), chosen by name
from the registry :data:`STRATEGY_FACTORIES`.

* ``exhaustive``: every design, best bound first, with pruning that cannot lose the optimum;
* ``exhaustive-all``: every design, no pruning (the reference);
* ``phaze``: PHAZE's area-descending exploration with its stopping rule;
* ``wham``: WHAM's critical-path heuristic, growing one resource at a time;
* ``optuna``: Optuna's TPE sampler (NSGA-II for the pareto objective).

Each factory imports its strategy's module when called, so naming a strategy never loads the
others (Optuna in particular).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from archplace.base.registry import lookup
from archplace.dse.strategy import Strategy


def _exhaustive() -> Strategy:
    from archplace.dse.strategies.exhaustive import ExhaustiveStrategy

    return ExhaustiveStrategy(prune=True, name="exhaustive")


def _exhaustive_all() -> Strategy:
    from archplace.dse.strategies.exhaustive import ExhaustiveStrategy

    return ExhaustiveStrategy(prune=False, name="exhaustive-all")


def _phaze() -> Strategy:
    from archplace.dse.strategies.phaze import PhazeStrategy

    return PhazeStrategy()


def _wham() -> Strategy:
    from archplace.dse.strategies.wham import WhamStrategy

    return WhamStrategy()


def _optuna() -> Strategy:
    from archplace.dse.strategies.optuna_search import OptunaStrategy

    return OptunaStrategy()


STRATEGY_FACTORIES: Mapping[str, Callable[[], Strategy]] = MappingProxyType({
    "exhaustive": _exhaustive,
    "exhaustive-all": _exhaustive_all,
    "phaze": _phaze,
    "wham": _wham,
    "optuna": _optuna,
})
"""Every strategy by name: a read-only mapping of name -> factory of that strategy with its default
settings, in the order the help lists them."""

STRATEGIES: tuple[str, ...] = tuple(STRATEGY_FACTORIES)
"""The strategy names, in registry order."""


def make_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (a key of :data:`STRATEGY_FACTORIES`) with its default settings.

    Raises:
        ConfigError: an unknown name (the message lists the registry's names).
    """
    return lookup(STRATEGY_FACTORIES, name, "strategy")()
