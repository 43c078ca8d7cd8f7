"""Every strategy's JSON result is the same for one worker and for two (issue #23: phaze listed
and counted the designs it had evaluated ahead for its workers and then set aside, so ``--jobs 2``
reported more designs than ``--jobs 1``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archplace.base.executor import make_executor
from archplace.dse.request import SearchRequest
from archplace.dse.runner import Tick, run_search
from archplace.dse.strategies.exhaustive import ExhaustiveStrategy
from archplace.dse.strategies.optuna_search import OptunaStrategy
from archplace.dse.strategies.phaze import PhazeStrategy
from archplace.dse.strategies.wham import WhamStrategy
from archplace.dse.strategy import Strategy
from archplace.front import api


@pytest.fixture(scope="module")
def request_(models: dict[str, str], small_space_file: Path) -> SearchRequest:
    """The 2-layer GPT on 8 devices over the 12-design small space (no baseline)."""
    return api.search_request(models["gpt"], space=str(small_space_file), devices=8, global_batch=16,
                              micro_batch_sizes=(1, 2), baseline=None)


def document(request: SearchRequest, strategy: Strategy, executor: Any = None,
             ticks: list[Tick] | None = None) -> str:
    """The search's JSON document (:meth:`SearchResult.to_dict`, which has no timing field)."""
    result = run_search(request, strategy, executor=executor, seed=3, budget=None,
                        progress=None if ticks is None else ticks.append)
    return json.dumps(result.to_dict(), sort_keys=True)


@pytest.mark.slow
def test_phaze_reports_the_same_designs_whatever_it_evaluated_ahead(request_: SearchRequest) -> None:
    """With one-bucket hysteresis PHAZE stops after the largest design; a batch of 3 evaluates two
    more ahead. They are set aside: the document (list, count, note) is batch 1's."""
    ticks: list[Tick] = []
    alone = document(request_, PhazeStrategy(hysteresis=1, batch=1))
    ahead = document(request_, PhazeStrategy(hysteresis=1, batch=3), ticks=ticks)
    assert ticks[-1].evaluated == 3  # the look-ahead did happen
    assert ahead == alone
    parsed = json.loads(alone)
    assert parsed["evaluated_count"] == len(parsed["evaluated"]) == 1
    assert parsed["note"].startswith("converged after 1 area buckets (1 of 12 designs)")
    assert "ahead" not in parsed["note"]


@pytest.mark.slow
def test_every_strategy_gives_the_same_document_with_one_or_two_workers(request_: SearchRequest) -> None:
    """exhaustive (pruned and not), phaze (PHAZE's rule, and one that converges inside a batch of
    two), wham and optuna (seeded, with a budget): the same JSON on 1 and on 2 worker processes."""
    strategies: list[Strategy] = [ExhaustiveStrategy(), ExhaustiveStrategy(prune=False, name="all"),
                                  PhazeStrategy(), PhazeStrategy(hysteresis=2), WhamStrategy(),
                                  OptunaStrategy()]
    serial = [document(request_, s) for s in strategies]
    with make_executor("local", 2) as pool:
        assert pool is not None
        parallel = [document(request_, s, pool) for s in strategies]
    for strategy, one, two in zip(strategies, serial, parallel, strict=True):
        assert one == two, strategy.name
