"""Exhaustive search: evaluate every design of a space and keep the best."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from archplace.cost.model import SystolicCostModel
from archplace.errors import ConfigError
from archplace.hardware.accelerator import Accelerator
from archplace.hardware.cluster import Cluster
from archplace.placement.plan import Recompute
from archplace.search.evaluate import DesignResult, core_key, evaluate_designs
from archplace.search.objective import Objective, rank, score
from archplace.search.store import ResultStore
from archplace.workload.cache import cached_chain
from archplace.workload.extract import ExtractOptions
from archplace.workload.zoo import ModelSpec

log = logging.getLogger(__name__)

Progress = Callable[[DesignResult], None]


@dataclass(frozen=True)
class SearchRequest:
    """What to search.

    Attributes:
        model: the model to train.
        designs: accelerators to evaluate.
        cluster: devices and links (shared by every design).
        global_batch: samples per iteration.
        micro_batches: micro-batch sizes to try.
        recomputes: recompute choices to try.
        objective: what "best" means.
        baseline: a reference design evaluated the same way (e.g. the tpuv4 preset), or None.

    Raises:
        ConfigError: empty design list or micro-batch list, non-positive sizes.
    """

    model: ModelSpec
    designs: tuple[Accelerator, ...]
    cluster: Cluster
    global_batch: int
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    recomputes: tuple[Recompute, ...] = (Recompute.NONE, Recompute.FULL)
    objective: Objective = Objective.THROUGHPUT
    baseline: Accelerator | None = None

    def __post_init__(self) -> None:
        if not self.designs:
            raise ConfigError("the search space has no design")
        if self.global_batch <= 0:
            raise ConfigError(f"global batch must be positive, got {self.global_batch}")
        if not self.micro_batches or any(b <= 0 for b in self.micro_batches):
            raise ConfigError(f"micro-batches must be positive, got {list(self.micro_batches)}")
        if not self.recomputes:
            raise ConfigError("at least one recompute choice is needed")


@dataclass(frozen=True)
class SearchResult:
    """Every evaluated design, best first (feasible before infeasible, then by throughput)."""

    evaluated: tuple[DesignResult, ...]
    model: str = ""
    devices: int = 0
    global_batch: int = 0
    objective: Objective = Objective.THROUGHPUT
    baseline: DesignResult | None = None

    @property
    def speedup_vs_baseline(self) -> float | None:
        """Objective of the best design / objective of the baseline (None without either)."""
        best = self.best
        if best is None or self.baseline is None or self.baseline.best is None:
            return None
        return score(best, self.objective) / score(self.baseline, self.objective)

    @property
    def best(self) -> DesignResult | None:
        """The best feasible design, or None when no design can train the model."""
        if self.evaluated and self.evaluated[0].best is not None:
            return self.evaluated[0]
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"best": {...} | null, "baseline": {...} | null, "speedup_vs_baseline": ..,
        "evaluated": [...]}``."""
        best = self.best
        return {"model": self.model, "devices": self.devices, "global_batch": self.global_batch,
                "objective": self.objective.value, "best": best.to_dict() if best else None,
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "speedup_vs_baseline": self.speedup_vs_baseline,
                "evaluated": [r.to_dict() for r in self.evaluated]}


def _evaluate(accs: list[Accelerator], chains: dict[int, Any], cluster: Cluster, global_batch: int,
              recomputes: tuple[Recompute, ...]) -> list[DesignResult]:
    """Designs sharing a core configuration, in a worker (a fresh cost model per task)."""
    return evaluate_designs(accs, chains, cluster, global_batch, recomputes, SystolicCostModel(cluster))


def request_identity(request: SearchRequest) -> dict[str, Any]:
    """Everything that determines a search's results, as JSON (the store's search key)."""
    return {"model": json.loads(request.model.config_json), "seq_len": request.model.seq_len,
            "designs": [acc.to_dict() for acc in request.designs], "cluster": request.cluster.to_dict(),
            "global_batch": request.global_batch, "micro_batches": sorted(set(request.micro_batches)),
            "recomputes": [r.value for r in request.recomputes], "version": version("archplace")}


def run_search(request: SearchRequest, progress: Progress | None = None,
               executor: Executor | None = None, store: ResultStore | None = None) -> SearchResult:
    """Evaluate every design of ``request``; graphs are extracted once per micro-batch.

    Args:
        request: the search.
        progress: called in this process with each design's result as it finishes
            (also for results read back from ``store``).
        executor: where evaluations run (default: in this process, one after another).
        store: SQLite store; each result is written as it finishes, and designs already
            in the store for the same request are read back instead of evaluated.

    Raises:
        ConfigError, ExtractionError: bad model or options.
    """
    results: list[DesignResult] = []
    key = store.begin(request_identity(request)) if store is not None else ""
    done = store.finished(key) if store is not None else {}
    for acc in request.designs:
        if acc.name in done:
            results.append(DesignResult.from_dict(done[acc.name]))
            if progress is not None:
                progress(results[-1])
    todo = [acc for acc in request.designs if acc.name not in done]

    def finish(result: DesignResult) -> None:
        results.append(result)
        if store is not None:
            store.record(key, result.accelerator.name, result.to_dict(), result.throughput_samples_per_s,
                         result.area_mm2, result.best is not None)
        if progress is not None:
            progress(result)

    chains = {b: cached_chain(request.model, ExtractOptions(b, request.model.seq_len))
              for b in sorted(set(request.micro_batches))} if todo else {}
    groups: dict[Accelerator, list[Accelerator]] = {}
    for acc in todo:  # one task per core configuration: its HBM variants share layer schedules
        groups.setdefault(core_key(acc), []).append(acc)
    if executor is None:
        for group in groups.values():
            for result in _evaluate(group, chains, request.cluster, request.global_batch, request.recomputes):
                finish(result)
    else:
        futures = [executor.submit(_evaluate, group, chains, request.cluster, request.global_batch,
                                   request.recomputes) for group in groups.values()]
        for future in as_completed(futures):
            for result in future.result():
                finish(result)
    log.info("evaluated %d designs", len(results))
    baseline = None
    if request.baseline is not None:
        if not chains:
            chains = {b: cached_chain(request.model, ExtractOptions(b, request.model.seq_len))
                      for b in sorted(set(request.micro_batches))}
        baseline = _evaluate([request.baseline], chains, request.cluster, request.global_batch,
                             request.recomputes)[0]
    return SearchResult(rank(results, request.objective), request.model.name, request.cluster.devices,
                        request.global_batch, request.objective, baseline)
