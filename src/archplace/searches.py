"""Running the searches of a :class:`~archplace.specs.search.SearchSpec`: each checked before
any starts, then one after another on one executor, with progress and a clear word on what an
interrupt kept (:func:`archplace.api.search` and :func:`~archplace.api.search_each` are the
front door)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from archplace.errors import ArchplaceError
from archplace.executor import make_executor
from archplace.lifetime import Interrupted
from archplace.search.request import SearchRequest, SearchResult
from archplace.search.runner import Progress, Tick, run_search, stored_designs
from archplace.search.store import ResultStore
from archplace.search.strategies import make_strategy
from archplace.specs.search import SearchSpec

RequestOf = Callable[[SearchSpec, Sequence[str]], SearchRequest]
"""Builds (and checks) the request of a spec for some of its models."""


class SearchInterrupted(Interrupted):
    """A search (:func:`archplace.api.search`, :func:`~archplace.api.search_each`) stopped by
    an interrupt (SIGINT while :func:`archplace.lifetime.raising_interrupts` is in force, as in
    the CLI); its workers are stopped by then.

    Attributes:
        evaluated: designs evaluated (or read back from the store) before the interrupt.
        store: the result store, or None.
        stored: designs of the searches begun that the store holds (a re-run reads them back);
            None when there is no store or the file turned out not to be one.
    """

    def __init__(self, evaluated: int, store: Path | None = None, stored: int | None = None) -> None:
        if store is None:
            detail = f"{_designs(evaluated)} evaluated; give a store to keep results across runs"
        elif stored is None:
            detail = f"nothing stored in {store}"
        else:
            detail = f"{_designs(stored)} stored in {store}; re-run the same search to resume"
        super().__init__(detail)
        self.evaluated, self.store, self.stored = evaluated, store, stored


def _designs(count: int) -> str:
    return f"{count} design{'' if count == 1 else 's'}"


def run_searches(spec: SearchSpec, progress: Progress | None, request_of: RequestOf) -> list[SearchResult]:
    """Every search of ``spec`` (:attr:`~archplace.specs.search.SearchSpec.groups`): all checked
    first, then run one after another on one executor."""
    make_strategy(spec.strategy)  # an unknown name is refused before any work
    requests: list[SearchRequest] = []
    evaluated: list[int] = []  # designs evaluated (or read back) so far, per search begun
    out: list[SearchResult] = []
    try:
        for names in spec.groups:  # every request checked (and its models traced) before a pool starts
            requests.append(request_of(spec, names))
        with make_executor(spec.executor, spec.jobs, spec.scheduler) as pool:
            for index, request in enumerate(requests):
                evaluated.append(0)
                out.append(run_search(request, make_strategy(spec.strategy),
                                      progress=_reporting(progress, index, evaluated), executor=pool,
                                      store=ResultStore(Path(spec.store)) if spec.store else None,
                                      exact_top=spec.exact, seed=spec.seed, budget=spec.trials,
                                      keep=max(spec.top, spec.exact)))
    except Interrupted:  # the workers are stopped by now: say what is kept
        raise _interrupted(spec.store, requests, sum(evaluated)) from None
    return out


def _reporting(progress: Progress | None, index: int, evaluated: list[int]) -> Progress:
    """A progress callback keeping the designs evaluated of search ``index`` in
    ``evaluated[-1]`` and passing each tick on, marked with ``index``."""

    def report(tick: Tick) -> None:
        evaluated[-1] = tick.evaluated
        if progress is not None:
            progress(dataclasses.replace(tick, search=index))

    return report


def _interrupted(store: str | None, requests: Sequence[SearchRequest], evaluated: int) -> SearchInterrupted:
    """What an interrupted search keeps: the designs in the store (those of the requests begun;
    a re-run reads them back), or without a store how many were evaluated, for nothing."""
    if store is None:
        return SearchInterrupted(evaluated)
    path = Path(store)
    try:
        kept = sum(stored_designs(ResultStore(path), r) for r in requests) if path.is_file() else 0
    except ArchplaceError:  # not a store after all: it was never written to
        return SearchInterrupted(evaluated, path, None)
    return SearchInterrupted(evaluated, path, kept)
