"""What a search is asked (:class:`SearchRequest`) and what it answers (:class:`SearchResult`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import version
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective, pareto_front, score
from archplace.dse.store import request_key
from archplace.dse.store_file import check_plain_name
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.placement.budget import check_chain_length
from archplace.placement.costs import CostKey
from archplace.placement.grid import PlanGrid, grid_identity
from archplace.placement.plan import Recompute
from archplace.workload.cache import Wanted, cached_chains
from archplace.workload.extract import ExtractOptions, traced_as
from archplace.workload.layers import LayerChain
from archplace.workload.zoo import LoadedModel

DEFAULT_PLAN_SPACE = PlanGrid(tps=(1,), recomputes=(Recompute.NONE, Recompute.FULL))
"""Plan options of a search unless given: TP 1 (the CLI widens it to the valid widths within a
node), micro-batches 1, 2, 4, 8, recompute none or full, every schedule, SP, ZeRO stages 0 to
3, DP overlap on and off, fp32 gradients."""


@dataclass(frozen=True)
class SearchRequest:
    """What to search.

    Attributes:
        models: the models to train (several: the objective is their geometric mean).
        designs: accelerators to consider (already within the area and power budgets).
        cluster: devices and links (shared by every design).
        global_batch: samples per iteration.
        plan_space: parallel-plan options searched for every design (``tps`` must be given;
            its CP and EP degrees and expert-TP widths, ``cps``, ``eps`` and ``etps``, default
            to 1 only).
        objective: what "best" means.
        baseline: a reference design evaluated the same way (e.g. the tpuv4 preset), or None.

    Raises:
        ConfigError: no model or design, a model name that is not a plain name
            (:func:`~archplace.dse.store_file.check_plain_name`), a cluster size out of range
            (:mod:`archplace.base.limits`: devices 1..2**20, global batch 1..2**30), more than 2**26
            tokens per micro-batch, no TP widths, a chain longer than the plan search takes,
            empty option lists. The plan grid's sizes and degrees are taken as the front door
            checked them (:class:`~archplace.front.specs.search.SearchSpec`'s declared ranges).
    """

    models: tuple[LoadedModel, ...]
    designs: tuple[Accelerator, ...]
    cluster: Cluster
    global_batch: int
    plan_space: PlanGrid = DEFAULT_PLAN_SPACE
    objective: Objective = Objective.THROUGHPUT
    baseline: Accelerator | None = None

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("a search needs at least one model")
        for model in self.models:
            try:
                check_plain_name(model.name)
            except ValueError as exc:
                raise ConfigError(f"a search's {exc}") from None
        if len({m.name for m in self.models}) != len(self.models):
            raise ConfigError(f"a model is given twice: {[m.name for m in self.models]}")
        if not self.designs:
            raise ConfigError("the search space has no design")
        limits.whole("devices", self.cluster.devices, 1, limits.MAX_DEVICES)
        limits.whole("global_batch", self.global_batch, 1, limits.MAX_GLOBAL_BATCH)
        space = self.plan_space  # its values were range-checked at the front door (SearchSpec)
        if space.tps is None:
            raise ConfigError("the plan space's TP widths must be given")
        for spec in self.models:
            check_chain_length(spec.num_layers + 2)
            for b in space.micro_batch_sizes:
                limits.micro_batch_tokens(b, spec.seq_len)
        for name in ("micro_batch_sizes", "tps", "recomputes", "schedules", "sps", "zero_stages",
                     "dp_overlap"):
            if not getattr(space, name):
                raise ConfigError(f"the plan space needs at least one value of {name}")

    @cached_property
    def identity(self) -> dict[str, Any]:
        """:func:`request_identity` of this request, computed once (seconds for the full ``phaze``
        space); do not change it."""
        return request_identity(self)

    @cached_property
    def key(self) -> str:
        """The result store's key of this request (32 hex digits:
        :func:`~archplace.dse.store.request_key` of :attr:`identity`), computed once."""
        return request_key(self.identity)

    @property
    def cost_keys(self) -> tuple[CostKey, ...]:
        """The (tp, micro_batch, sp, cp, ep, etp) layer-cost keys of the plan space (SP only with
        tp > 1)."""
        space = self.plan_space
        assert space.tps is not None  # checked in __post_init__
        return tuple(CostKey(t, b, sp, cp, ep, etp) for t in space.tps
                     for b in sorted(set(space.micro_batch_sizes)) for sp in space.sps if t > 1 or not sp
                     for cp in _degrees(space, "cps") for ep in _degrees(space, "eps")
                     for etp in _degrees(space, "etps"))

    def model_keys(self, model: LoadedModel) -> tuple[CostKey, ...]:
        """The cost keys ``model`` is costed with: for a mixture-of-experts model SP at every
        tp > 1 (Megatron-Core requires it with TP), for a dense model etp 1 only (no experts
        to split)."""
        if model.experts:
            return tuple(key for key in self.cost_keys if key.sp or key.tp == 1)
        return tuple(key for key in self.cost_keys if key.etp == 1)

    def extract_options(self, model: LoadedModel) -> dict[CostKey, ExtractOptions]:
        """What to trace of ``model`` for each of its cost keys (:meth:`model_keys`)."""
        return {key: traced_as(model.seq_len, key, self.plan_space) for key in self.model_keys(model)}

    def chains(self, model: LoadedModel, jobs: int = 1) -> dict[CostKey, LayerChain]:
        """Layer chains of ``model`` for each of its cost keys (graph cache; extraction once per key, the
        missing ones on a local pool of ``jobs`` processes when more than one:
        :func:`archplace.workload.cache.cached_chains`)."""
        options = self.extract_options(model)
        found = cached_chains([(model, o) for o in options.values()], jobs=jobs)
        return dict(zip(options, found, strict=True))

    def all_chains(self, jobs: int = 1) -> dict[str, dict[CostKey, LayerChain]]:
        """Layer chains of every model for every cost key, by model name then key: the missing
        ones traced together (on a local pool of ``jobs`` processes when more than one), the same
        chains for any ``jobs``."""
        options = {model.name: self.extract_options(model) for model in self.models}
        wanted: list[Wanted] = [(model, opts) for model in self.models
                                for opts in options[model.name].values()]
        found = iter(cached_chains(wanted, jobs=jobs))
        return {model.name: {key: next(found) for key in options[model.name]} for model in self.models}


def _degrees(space: PlanGrid, name: str) -> tuple[int, ...]:
    """The CP or EP degrees or expert-TP widths (``name`` ``cps``, ``eps`` or ``etps``) of a
    search's plan space: 1 only when it does not give them."""
    given = getattr(space, name)
    return (1,) if given is None else tuple(given)


def request_identity(request: SearchRequest) -> dict[str, Any]:
    """Everything that determines a search's results, as JSON (the store's search key): the
    models (their names too: a multi-model result names its components), the designs' count
    and digest (:func:`designs_digest`), the cluster, the batch; the cost keys carry the TP, CP
    and EP degrees and expert-TP widths searched, the other plan options as
    :func:`~archplace.placement.grid.grid_identity` writes them.

    The strategy is not part of it: a design's result does not depend on how it was reached,
    so strategies share finished evaluations through the store.
    """
    return {"models": [{"name": m.name, "config": json.loads(m.config_json), "seq_len": m.seq_len}
                       for m in request.models],
            "designs": {"count": len(request.designs), "sha256": designs_digest(request.designs)},
            "cluster": request.cluster.to_dict(),
            "global_batch": request.global_batch, "cost_keys": [list(k) for k in request.cost_keys],
            "version": version("archplace"), **grid_identity(request.plan_space)}


def designs_digest(designs: tuple[Accelerator, ...]) -> str:
    """SHA-256 (64 hex digits) of the designs' JSON list (:meth:`Accelerator.to_dict`, in order):
    what a stored request keeps of them, in place of the list (33.8 MB for the ``phaze``
    space's 88,080 designs)."""
    text = json.dumps([acc.to_dict() for acc in designs], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """Every evaluated design, best first (:func:`archplace.dse.objective.rank`); built with
    keywords only.

    Attributes:
        evaluated: the designs evaluated, ranked.
        model: model name(s), comma-separated.
        devices, global_batch: the cluster size and batch.
        objective: what was maximised.
        baseline: the reference design's result, or None.
        strategy: how the space was explored.
        considered: designs in the space (within budgets).
        pruned: designs skipped by a bound that proves they cannot win.
        note: how the strategy stopped.
        exact: the best designs re-evaluated with CP-SAT layer schedules (proven optimal
            within a time limit), best first; empty when not asked for.
        fuse: the layers were costed with element-wise operators fused into their matmul.
        attention, kernels: how attention and the element-wise kernels were costed
            (``flash`` / ``sdpa`` / ``eager``; ``fused`` / ``unfused``).
        capacity_factor, expert_load_imbalance: of the MoE layers' routed tokens (1.0 each:
            dropless and balanced; :class:`archplace.workload.extract.ExtractOptions`).
    """

    evaluated: tuple[DesignResult, ...]
    model: str = ""
    devices: int = 0
    global_batch: int = 0
    objective: Objective = Objective.THROUGHPUT
    baseline: DesignResult | None = None
    strategy: str = "exhaustive"
    considered: int = 0
    pruned: int = 0
    note: str = ""
    exact: tuple[DesignResult, ...] = ()
    fuse: bool = False
    attention: str = "flash"
    kernels: str = "fused"
    capacity_factor: float = 1.0
    expert_load_imbalance: float = 1.0

    @property
    def best(self) -> DesignResult | None:
        """The best feasible design (fastest of the front for ``pareto``), or None."""
        if self.evaluated and self.evaluated[0].best is not None:
            return self.evaluated[0]
        return None

    @property
    def front(self) -> tuple[DesignResult, ...]:
        """Pareto front of (throughput, area, TDP) over the evaluated designs."""
        return pareto_front(self.evaluated)

    @property
    def speedup_vs_baseline(self) -> float | None:
        """Objective of the best design / objective of the baseline (None without either)."""
        best = self.best
        if best is None or self.baseline is None or self.baseline.best is None:
            return None
        return score(best, self.objective) / score(self.baseline, self.objective)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"best": {...} | null, "baseline": {...} | null, "speedup_vs_baseline": ..,
        "strategy": .., "considered": .., "pruned": .., "evaluated": [...]}`` (plus ``"front"``
        for the pareto objective and ``"exact"`` when CP-SAT re-evaluation was asked for)."""
        best = self.best
        out: dict[str, Any] = {
            "model": self.model, "devices": self.devices, "global_batch": self.global_batch,
            "objective": self.objective.value, "fuse": self.fuse, "attention": self.attention,
            "kernels": self.kernels, "capacity_factor": self.capacity_factor,
            "expert_load_imbalance": self.expert_load_imbalance, "strategy": self.strategy,
            "considered": self.considered,
            "evaluated_count": len(self.evaluated), "pruned": self.pruned, "note": self.note,
            "best": best.to_dict() if best else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup_vs_baseline": self.speedup_vs_baseline}
        if self.objective is Objective.PARETO:
            out["front"] = [r.to_dict() for r in self.front]
        if self.exact:
            out["exact"] = [r.to_dict() for r in self.exact]
        out["evaluated"] = [r.to_dict() for r in self.evaluated]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        """Inverse of :meth:`to_dict` (``best``, ``front``, ``speedup_vs_baseline`` and
        ``evaluated_count`` are derived, so ignored): re-reads a search's ``--out`` file.

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            baseline = data.get("baseline")
            return cls(evaluated=tuple(DesignResult.from_dict(r) for r in data["evaluated"]),
                       model=str(data["model"]), devices=int(data["devices"]),
                       global_batch=int(data["global_batch"]), objective=Objective(data["objective"]),
                       baseline=None if baseline is None else DesignResult.from_dict(baseline),
                       strategy=str(data["strategy"]), considered=int(data["considered"]),
                       pruned=int(data["pruned"]), note=str(data.get("note", "")),
                       exact=tuple(DesignResult.from_dict(r) for r in data.get("exact", ())),
                       fuse=bool(data.get("fuse", False)), attention=str(data.get("attention", "flash")),
                       kernels=str(data.get("kernels", "fused")),
                       capacity_factor=float(data.get("capacity_factor", 1.0)),
                       expert_load_imbalance=float(data.get("expert_load_imbalance", 1.0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"invalid search result: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
