"""The HTML reports: ``archplace report STORE``, ``search --report``, ``plan --report`` and
``evaluate --report`` (:mod:`archplace.reporting.html` renders them).

A search's page shows every evaluated design against die area and against TDP with the Pareto
front, the best designs' table (with the baseline when the search result carries it), and the
plan figures of the best design; a plan's page shows the plans' table and the plan figures of
the best plan.  The plan figures: the pipeline timeline
(:mod:`archplace.placement.pipeline_timeline`), the memory of each pipeline device against
the HBM capacity, the iteration-time breakdown and the list schedule of one transformer block's
forward pass on the chip's cores (the schedule the search and the planner cost layers with).

This module is part of the front door: it reads the store and the run specs, reloads the
model of a stored search from the configuration the store keeps, and traces its block (graph
cache) for the layer schedule.  A figure that cannot be drawn (an infeasible design, a model
that no longer traces) is replaced by a line saying why; the page still renders.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archplace.base import limits
from archplace.base.errors import ArchplaceError, ConfigError
from archplace.base.outputs import write_text_output
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Fp8CostModel, Precision
from archplace.dse.evaluate import DesignResult, evaluate_designs
from archplace.dse.objective import Objective, rank
from archplace.dse.request import SearchRequest, SearchResult
from archplace.dse.store import ResultStore, StoredSearch
from archplace.dse.store_file import check_plain_name
from archplace.front import app
from archplace.front.specs import EvaluateRun, HardwareSpec, PlanRun
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster, Topology
from archplace.placement.costs import CostKey
from archplace.placement.grid import PlanGrid, grid_from_identity
from archplace.placement.plan import Plan
from archplace.placement.result import PlanResult
from archplace.reporting.html import Block, Figures, Heading, Text, designs_table, plans_table, render_page
from archplace.reporting.plan_tables import plan_label
from archplace.reporting.plotly_plan import (
    breakdown_figure,
    comm_figure,
    layer_schedule_figure,
    memory_figure,
    timeline_figure,
)
from archplace.reporting.plotly_space import design_space_figures
from archplace.scheduling.list_scheduler import list_schedule
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import Schedule
from archplace.workload import zoo
from archplace.workload.cache import cached_chain
from archplace.workload.extract import traced_as
from archplace.workload.layers import LayerKind
from archplace.workload.options import Tracing, tracing_of

DEFAULT_TOP = 10
"""Designs in a report's table."""


@dataclass(frozen=True)
class LayerView:
    """One layer's schedule on the cores, as the report draws it."""

    problem: ScheduleProblem
    schedule: Schedule
    title: str


@dataclass(frozen=True)
class ModelSetup(Tracing):
    """What tracing a layer needs besides the plan: the model and the tracing options
    (:class:`~archplace.workload.options.Tracing`, keyword-only; :func:`tracing_of` copies them
    from a spec or a grid)."""

    model: zoo.LoadedModel


def layer_view(setup: ModelSetup, acc: Accelerator, cluster: Cluster | None, plan: Plan) -> LayerView:
    """The list schedule of the forward pass of one transformer block (the first layer when the
    model has none) of ``setup.model`` under ``plan``'s TP width, micro-batch, SP, CP, EP and
    expert-TP width on ``acc`` (FP8 GEMMs when the plan trains in FP8), costed as the planner costs it.

    Raises:
        ConfigError, ExtractionError: the model cannot be traced under the plan.
    """
    model = setup.model
    chain = cached_chain(model, traced_as(model.seq_len, plan, setup))
    layer = next((item for item in chain.layers if item.kind is LayerKind.BLOCK), chain.layers[0])
    cost = SystolicCostModel(cluster) if cluster is not None else SystolicCostModel()
    chosen = Fp8CostModel(cost) if plan.precision is Precision.FP8 else cost
    problem = ScheduleProblem.from_graph(layer.fwd, acc, chosen)
    schedule = list_schedule(problem)
    title = (f"{model.name} {layer.name} forward (tp {plan.tp}, micro-batch {plan.micro_batch}) on "
             f"{acc.name}<br>list schedule, makespan {schedule.makespan_s * 1e6:.1f} µs "
             f"({problem.tensor_cores} tensor, {problem.vector_cores} vector cores; hatched: on all cores)")
    return LayerView(problem, schedule, title)


def plan_blocks(result: PlanResult, *, hbm_bytes: float | None, layer: LayerView | None,
                layer_note: str = "") -> list[Block]:
    """The plan figures of ``result``: pipeline timeline; memory per device and time breakdown;
    communication (exposed, hidden, slowed by hiding); the layer schedule, or ``layer_note``
    saying why there is none."""
    blocks: list[Block] = [Figures((timeline_figure(result),)) if result.stage_times
                           else Text("no pipeline timeline: the result has no stage times", note=True),
                           Figures((memory_figure(result, hbm_bytes), breakdown_figure(result))),
                           Figures((comm_figure(result),))]
    if layer is not None:
        blocks.append(Figures((layer_schedule_figure(layer.problem, layer.schedule, layer.title),)))
    else:
        blocks.append(Text(f"no layer schedule: {layer_note or 'no model to trace'}", note=True))
    return blocks


def _layer_or_note(setup: ModelSetup | None, acc: Accelerator, cluster: Cluster | None,
                   plan: Plan) -> tuple[LayerView | None, str]:
    if setup is None:
        return None, "the model is not known here"
    try:
        return layer_view(setup, acc, cluster, plan), ""
    except ArchplaceError as exc:
        return None, str(exc)


def _search_blocks(designs: Sequence[DesignResult], *, objective: Objective, heading: str, summary: str,
                   baseline: DesignResult | None, setup: ModelSetup | None, cluster: Cluster | None,
                   top: int, caption: str = "") -> list[Block]:
    """The blocks of one search: ``designs`` are ranked here by ``objective``."""
    ranked = rank(designs, objective)
    best = ranked[0] if ranked and ranked[0].best is not None else None
    blocks: list[Block] = [Heading(heading), Text(summary)]
    blocks.append(Figures(tuple(design_space_figures(ranked, best=best, baseline=baseline))))
    shown = ranked[:top]
    label = "Pareto front and the designs after it" if objective is Objective.PARETO else "best designs"
    blocks.append(Heading(f"{label} (objective: {objective.value})", 3))
    blocks.append(designs_table(shown, baseline, caption))
    if best is None or best.best is None:
        reason = ranked[0].infeasible_reason if ranked else "no design evaluated"
        blocks.append(Text(f"no design fits, so no plan to show: {reason}", note=True))
        return blocks
    plan = best.best
    model = f" ({best.components[0].model})" if best.components else ""
    blocks.append(Heading(f"the best design {best.accelerator.name}: its plan{model}", 3))
    blocks.append(Text(f"{plan_label(plan)}: {plan.throughput_samples_per_s:,.1f} samples/s, "
                       f"iteration {plan.iteration_time_s * 1e3:.2f} ms, MFU {plan.mfu:.1%}"))
    layer, note = _layer_or_note(setup, best.accelerator, cluster, plan.plan)
    blocks += plan_blocks(plan, hbm_bytes=best.accelerator.hbm_bytes, layer=layer, layer_note=note)
    return blocks


def search_report_html(results: Sequence[SearchResult], requests: Sequence[SearchRequest | None] = (),
                       *, top: int = DEFAULT_TOP, title: str = "") -> str:
    """The page of one or more search results (``search --report``; several with
    ``--per-model``), each with its request when known (for the layer schedule: the model and
    the cluster), its baseline in the table."""
    blocks: list[Block] = []
    for i, result in enumerate(results):
        request = requests[i] if i < len(requests) else None
        setup = cluster = None
        if request is not None:
            space = request.plan_space
            setup = ModelSetup(request.models[0], **tracing_of(space))
            cluster = request.cluster
        evaluated = result.note or f"{len(result.evaluated)} designs evaluated"
        caption = f"strategy {result.strategy}: {evaluated} ({result.considered} in the space)"
        if result.baseline is not None and result.speedup_vs_baseline is not None:
            caption += (f"\nbest / {result.baseline.accelerator.name}: {result.speedup_vs_baseline:.2f}× "
                        f"on the same cluster, model and plan search")
        blocks += _search_blocks(
            result.evaluated, objective=result.objective, heading=f"search: {result.model}",
            summary=(f"{result.model} on {result.devices} devices, global batch {result.global_batch}; "
                     f"strategy {result.strategy}, {len(result.evaluated)} designs evaluated"),
            baseline=result.baseline, setup=setup, cluster=cluster, top=top, caption=caption)
    return render_page(title or "archplace search report", blocks)


@dataclass(frozen=True)
class StoredRequest:
    """What a report reads back from a stored search's request
    (:func:`~archplace.dse.request.request_identity`): its models, cluster, batch and plan
    space."""

    models: tuple[zoo.LoadedModel, ...]
    cluster: Cluster
    global_batch: int
    grid: PlanGrid

    @property
    def setup(self) -> ModelSetup:
        """The first model and its extraction options (the layer schedule's)."""
        return ModelSetup(self.models[0], **tracing_of(self.grid))


def stored_request(request: dict[str, Any], names: Sequence[str]) -> StoredRequest:
    """The models, cluster and plan space of a stored request, whose models must be named
    ``names`` (the search's row), each a plain name
    (:func:`~archplace.dse.store_file.check_plain_name`).

    Raises:
        ConfigError: a request that cannot be read back (another version's fields), a model name
            that is not ``names``' or not a plain name.
    """
    try:
        found = [check_plain_name(m["name"]) for m in request["models"]]
        if found != list(names):
            raise ValueError(f"its models {found!r} are not the search's {list(names)!r}")
        models = tuple(zoo.LoadedModel(name, json.dumps(m["config"], sort_keys=True), int(m["seq_len"]))
                       for name, m in zip(found, request["models"], strict=True))
        links = dict(request["cluster"])
        links["topology"] = Topology(links.get("topology", Topology.SWITCHED.value))
        keys = [CostKey.of(tuple(k)) for k in request["cost_keys"]]
        grid = grid_from_identity(request, keys)
        return StoredRequest(models, Cluster(**links), int(request["global_batch"]), grid)
    except (LookupError, TypeError, ValueError) as exc:
        raise ConfigError(f"the stored request cannot be read back ({exc})") from None


def evaluate_baseline(stored: StoredRequest, baseline: Accelerator) -> DesignResult:
    """``baseline`` evaluated as the search evaluated its designs: every model's layer chains
    (graph cache), list schedules, the stored plan space, the figures combined over the models.

    Raises:
        ConfigError, ExtractionError: a model that cannot be traced.
    """
    request = SearchRequest(stored.models, (baseline,), stored.cluster, stored.global_batch, stored.grid)
    cost = SystolicCostModel(stored.cluster)
    per_model = [evaluate_designs([baseline], request.chains(model), stored.cluster, stored.global_batch,
                                  stored.grid, cost)[0] for model in stored.models]
    if len(per_model) == 1:
        return per_model[0]
    return DesignResult.combine([dataclasses.replace(r, model=m.name)
                                 for r, m in zip(per_model, stored.models, strict=True)])


def store_report_html(store: str | Path, *, search: str | None = None, top: int = DEFAULT_TOP,
                      baseline: Accelerator | None = None) -> str:
    """The page of the searches of a result store (every search, or the one whose id starts
    with ``search``), each ranked by the objective of its latest run.  The store keeps no
    baseline: ``baseline`` is evaluated here for each search (:func:`evaluate_baseline`; a
    search whose models no longer trace is shown without it).

    Raises:
        ConfigError: the store is missing, empty, not a store of this schema version or corrupt
            (:class:`~archplace.dse.store.ResultStore`); ``search`` matches no search or
            several; the store holds no search.
    """
    reader = ResultStore(Path(store), read_only=True)
    chosen = reader.select(search)
    if not chosen:
        raise ConfigError(f"{store}: the result store holds no search")
    blocks: list[Block] = []
    for stored in chosen:
        blocks += _stored_blocks(reader, stored, top, baseline)
    return render_page(f"archplace report: {Path(store).name}", blocks)


def _stored_blocks(reader: ResultStore, stored: StoredSearch, top: int,
                   baseline: Accelerator | None) -> list[Block]:
    label = stored.label
    designs = [row.outcome for row in reader.rows(stored)]
    request: StoredRequest | None = None
    reference: DesignResult | None = None
    notes = []
    try:
        request = stored_request(reader.request(stored), label.models)
        if baseline is not None:
            reference = evaluate_baseline(request, baseline)
    except ArchplaceError as exc:
        notes.append(f"not evaluated again: {exc}")
    caption = (f"base: {reference.accelerator.name} evaluated now on the stored cluster, models and plan "
               f"space" if reference is not None else "no baseline")
    blocks = _search_blocks(
        designs, objective=label.objective,
        heading=f"search {stored.short_id}: {', '.join(label.models)}",
        summary=(f"{', '.join(label.models)} on {label.devices} devices, global batch {label.global_batch}; "
                 f"{len(designs)} designs stored, ranked by {label.objective.value}"),
        baseline=reference, setup=request.setup if request is not None else None,
        cluster=request.cluster if request is not None else None, top=top,
        caption="\n".join([caption, *notes]))
    return blocks


def plan_report_html(results: Sequence[PlanResult], run: PlanRun | EvaluateRun | None = None, *,
                     title: str = "") -> str:
    """The page of plans (best first; ``plan --report``, ``evaluate --report``): their table and
    the plan figures of the first.  With the ``run`` they came from, the memory chart shows the
    chip's HBM and the layer schedule is drawn.

    Raises:
        ConfigError: no plan; the run's hardware cannot be loaded.
    """
    if not results:
        raise ConfigError("a plan report needs at least one plan")
    best = results[0]
    hbm, layer, note = None, None, "no model given (a layer-graph plan, or no run)"
    if run is not None:
        acc = app.accelerator(run.hardware)
        hbm = acc.hbm_bytes
        loaded = app.load_model(run.model, (best.plan.micro_batch,))
        setup = ModelSetup(loaded, **tracing_of(run.model))
        layer, note = _layer_or_note(setup, acc, app.cluster_or_none(run.hardware, run.cluster.devices),
                                     best.plan)
    blocks: list[Block] = [Heading("plans"), plans_table(results),
                           Heading(f"the best plan: {plan_label(best)}", 3)]
    blocks += plan_blocks(best, hbm_bytes=hbm, layer=layer, layer_note=note)
    return render_page(title or "archplace plan report", blocks)


def write_store_report(store: str | Path, out: str | Path, *, search: str | None = None,
                       top: int = DEFAULT_TOP, baseline: str | None = "tpuv4") -> Path:
    """Write the page of :func:`store_report_html`: one self-contained HTML file (plotly.js
    inline; no network needed to open it) with, per search, every stored design against die
    area and against TDP with the Pareto front, the best designs' table and the best design's
    plan figures.

    Args:
        store: the SQLite file a search wrote (only read).
        out: the HTML file to write (replaced atomically).
        search: only the search whose id starts with this (default: every search).
        top: designs in each table.
        baseline: hardware preset (or YAML) evaluated for each search's table and plots, as
            ``search --baseline`` does (None: none).

    Returns:
        ``out`` as a path.

    Raises:
        ConfigError: the store is missing, empty, not a result store of this version or corrupt;
            ``search`` matches no search or several; ``top`` < 1; an unknown baseline; ``out`` is
            the store or cannot be written (nothing is written when anything fails).
    """
    limits.whole("top", top, 1, limits.MAX_TOP)
    path = Path(out)
    if path.resolve() == Path(store).resolve():
        raise ConfigError(f"out {path}: that is the result store, which a report only reads")
    reference = app.accelerator(HardwareSpec(baseline)) if baseline else None
    write_text_output(path, "out", store_report_html(store, search=search, top=top, baseline=reference))
    return path


def write_search_report(results: SearchResult | Sequence[SearchResult], out: str | Path, *,
                        requests: Sequence[SearchRequest | None] = (), top: int = DEFAULT_TOP) -> Path:
    """Write the page of :func:`search_report_html` (one section per result, each table with
    its baseline; with each result's request, the layer schedule too).

    Raises:
        ConfigError: ``top`` < 1, ``out`` cannot be written.
    """
    limits.whole("top", top, 1, limits.MAX_TOP)
    chosen = [results] if isinstance(results, SearchResult) else list(results)
    path = Path(out)
    write_text_output(path, "out", search_report_html(chosen, requests, top=top))
    return path


def write_plan_report(results: PlanResult | Sequence[PlanResult], out: str | Path, *,
                      run: PlanRun | EvaluateRun | None = None) -> Path:
    """Write the page of :func:`plan_report_html`: the plans' table, then the first plan's
    pipeline timeline, memory per device, time breakdown and -- given the ``run`` they came
    from -- the HBM line and one transformer block's operator schedule on the cores.

    Raises:
        ConfigError: no plan; the run's model or hardware cannot be loaded; ``out`` cannot be
            written.
    """
    chosen = [results] if isinstance(results, PlanResult) else list(results)
    path = Path(out)
    write_text_output(path, "out", plan_report_html(chosen, run))
    return path
