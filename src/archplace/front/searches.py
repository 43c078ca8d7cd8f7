"""Running the searches of a :class:`~archplace.front.specs.search.SearchSpec`: each checked before
any starts, then one after another on one executor, with progress and a clear word on what an
interrupt kept (:func:`archplace.front.api.search` and :func:`~archplace.front.api.search_each` are the
front door)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from archplace.base.errors import ArchplaceError
from archplace.base.executor import make_executor
from archplace.base.lifetime import Interrupted
from archplace.dse.request import SearchRequest, SearchResult
from archplace.dse.runner import Progress, Tick, run_search, stored_designs
from archplace.dse.store import ResultStore
from archplace.dse.strategies import make_strategy
from archplace.front.specs.search import SearchSpec

RequestOf = Callable[[SearchSpec, Sequence[str]], SearchRequest]
"""Builds (and checks) the request of a spec for some of its models."""


class SearchInterrupted(Interrupted):
    """A search (:func:`archplace.front.api.search`, :func:`~archplace.front.api.search_each`) stopped by
    an interrupt (SIGINT while :func:`archplace.base.lifetime.raising_interrupts` is in force, as in
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
    """Every search of ``spec`` (:attr:`~archplace.front.specs.search.SearchSpec.groups`): all checked
    first, then run one after another on one executor."""
    make_strategy(spec.strategy)  # an unknown name is refused before any work
    requests: list[SearchRequest] = []
    evaluated: list[int] = []  # designs evaluated (or read back) so far, per search begun
    out: list[SearchResult] = []
    store: ResultStore | None = None
    try:
        for names in spec.groups:  # every request checked (and its models traced) before a pool starts
            request = request_of(spec, names)
            if spec.store:
                request.key  # noqa: B018 -- its store key now, so that an interrupt need not compute it
            requests.append(request)
        store = ResultStore(Path(spec.store)) if spec.store else None  # checked once, before the pool
        with make_executor(spec.executor, spec.jobs, spec.scheduler) as pool:
            for index, request in enumerate(requests):
                evaluated.append(0)
                out.append(run_search(request, make_strategy(spec.strategy),
                                      progress=_reporting(progress, index, evaluated), executor=pool,
                                      store=store, exact_top=spec.exact, seed=spec.seed, budget=spec.trials,
                                      keep=max(spec.top, spec.exact)))
    except Interrupted:  # the workers are stopped by now: say what is kept
        raise _interrupted(spec.store, store, requests, sum(evaluated)) from None
    return out


def _reporting(progress: Progress | None, index: int, evaluated: list[int]) -> Progress:
    """A progress callback keeping the designs evaluated of search ``index`` in
    ``evaluated[-1]`` and passing each tick on, marked with ``index``."""

    def report(tick: Tick) -> None:
        evaluated[-1] = tick.evaluated
        if progress is not None:
            progress(dataclasses.replace(tick, search=index))

    return report


def _interrupted(name: str | None, store: ResultStore | None, requests: Sequence[SearchRequest],
                 evaluated: int) -> SearchInterrupted:
    """What an interrupted search keeps: the designs in the store (``name``; ``store`` once it
    was opened and checked) of the requests checked (a re-run reads them back), or without a
    store how many were evaluated, for nothing.  The rows are counted by their search's key,
    known by then, and not read: this takes milliseconds whatever the space."""
    if name is None:
        return SearchInterrupted(evaluated)
    if store is None:  # interrupted before the store was opened: nothing was written to it
        return SearchInterrupted(evaluated, Path(name), None)
    try:
        kept = sum(stored_designs(store, r) for r in requests)
    except ArchplaceError:  # no longer readable
        return SearchInterrupted(evaluated, store.path, None)
    return SearchInterrupted(evaluated, store.path, kept)
