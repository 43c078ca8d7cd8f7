"""Strategies, scheduling backends and executors are chosen by name from read-only registries:
every name builds what it names, an unknown name gets one error listing the registry, and the CLI
help lists exactly the registry's names."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
import typer

from archplace.base.errors import ConfigError
from archplace.base.executor import EXECUTOR_FACTORIES, EXECUTORS, make_executor
from archplace.cli import app
from archplace.dse.strategies import STRATEGIES, STRATEGY_FACTORIES, make_strategy
from archplace.dse.strategies.exhaustive import ExhaustiveStrategy
from archplace.dse.strategies.optuna_search import OptunaStrategy
from archplace.dse.strategies.phaze import PhazeStrategy
from archplace.dse.strategies.wham import WhamStrategy
from archplace.scheduling.cpsat import CpSatScheduler
from archplace.scheduling.milp import GurobiScheduler, HighsScheduler
from archplace.scheduling.solve import BACKENDS, SCHEDULER_FACTORIES, ListScheduler, get_scheduler


@pytest.mark.parametrize("registry", [STRATEGY_FACTORIES, SCHEDULER_FACTORIES, EXECUTOR_FACTORIES])
def test_registries_are_read_only(registry: Mapping[str, object]) -> None:
    with pytest.raises(TypeError):
        registry["extra"] = object()  # type: ignore[index]


def test_every_strategy_name_builds_that_strategy() -> None:
    expected = {"exhaustive": ExhaustiveStrategy, "exhaustive-all": ExhaustiveStrategy,
                "phaze": PhazeStrategy, "wham": WhamStrategy, "optuna": OptunaStrategy}
    assert list(STRATEGY_FACTORIES) == list(expected)
    for name, kind in expected.items():
        strategy = make_strategy(name)
        assert type(strategy) is kind and strategy.name == name
    assert ExhaustiveStrategy(prune=True, name="exhaustive") == make_strategy("exhaustive")
    assert ExhaustiveStrategy(prune=False, name="exhaustive-all") == make_strategy("exhaustive-all")


def test_every_backend_name_builds_that_scheduler() -> None:
    expected = {"list": ListScheduler, "cpsat": CpSatScheduler, "highs": HighsScheduler,
                "gurobi": GurobiScheduler}
    assert list(SCHEDULER_FACTORIES) == list(expected)
    for name, kind in expected.items():
        scheduler = get_scheduler(name)
        assert type(scheduler) is kind and scheduler.name == name


def test_name_tuples_are_the_registry_names_in_order() -> None:
    assert tuple(SCHEDULER_FACTORIES) == BACKENDS == ("list", "cpsat", "highs", "gurobi")
    assert tuple(STRATEGY_FACTORIES) == STRATEGIES
    assert tuple(EXECUTOR_FACTORIES) == EXECUTORS == ("local", "dask")


def test_unknown_names_get_one_error_listing_the_registry() -> None:
    with pytest.raises(ConfigError) as strategy:
        make_strategy("random")
    assert str(strategy.value) == ("unknown strategy 'random'; choose from: exhaustive, exhaustive-all, "
                                   "phaze, wham, optuna")
    with pytest.raises(ConfigError) as backend:
        get_scheduler("quantum")
    assert str(backend.value) == "unknown schedule backend 'quantum'; choose from: list, cpsat, highs, gurobi"
    with pytest.raises(ConfigError) as executor:
        make_executor("ray", 1)
    assert str(executor.value) == "unknown executor 'ray'; choose from: local, dask"


def test_local_executor_with_one_job_runs_in_this_process() -> None:
    with make_executor("local", 1) as pool:
        assert pool is None


def _help(command: str, option: str) -> str:
    """The choices ``command``'s ``option`` shows: its metavar when it lists them (an option
    derived from a spec field), else its help text, as typer built it (not wrapped)."""
    found = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    param = next(p for p in found.params if option in p.opts)
    return str(param.metavar) if "|" in str(param.metavar or "") else str(param.help)


@pytest.mark.parametrize(("command", "option", "registry"), [
    ("search", "--strategy", STRATEGY_FACTORIES),
    ("search", "--executor", EXECUTOR_FACTORIES),
    ("schedule", "--backend", SCHEDULER_FACTORIES),
])
def test_cli_help_lists_exactly_the_registry(command: str, option: str,
                                             registry: Mapping[str, object]) -> None:
    text = _help(command, option)
    # the names are separated by " | "; a name may carry a note in parentheses
    names = [re.sub(r"\s*\(.*?\)", "", part).strip().rstrip(".") for part in text.split("|")]
    assert names == list(registry)
