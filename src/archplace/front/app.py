"""The one place that turns specs into domain objects and runs them.

A model spec becomes a loaded model (preset or HF ``config.json``, sequence length applied),
then traced layer chains (through the graph cache); a hardware spec becomes an
:class:`~archplace.hw.accelerator.Accelerator` and the cluster's links. cost/,
scheduling/, placement/ and dse/ receive only those resolved objects; nothing below this
module loads a preset or reads an input file.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError, MissingSectionError
from archplace.base.fields import check_as, member
from archplace.base.inputs import read_mapping, syntax_of
from archplace.base.units import parse_area_mm2, parse_power_w
from archplace.cost.attention_tables import kernel_key, model_tables
from archplace.cost.estimate import ModelEstimate, PresetMatmul, estimate_layers, preset_matmul
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Precision
from archplace.dse.objective import Objective
from archplace.dse.request import SearchRequest
from archplace.front.specs import ClusterSpec, HardwareSpec, ModelSpec, Plan, PlanSpace
from archplace.front.specs.resolved import ResolvedHardware
from archplace.front.specs.runs import EvaluateRun, PlanRun
from archplace.front.specs.search import SearchSpec
from archplace.hw.accelerator import FRAMEWORK_OVERLAPS, Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.cluster import Cluster
from archplace.hw.power import tdp_w
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.hw.space import SearchSpace, load_space
from archplace.placement import workflow
from archplace.placement.grid import PlanGrid, grid_of
from archplace.placement.interference import Interference
from archplace.placement.plan import GradReduceDtype, Optimizer, RankOrder, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.scheduling.base import ScheduleResult, SolveOptions
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.solve import LAYERS, PHASES, solve_problem
from archplace.workload import zoo
from archplace.workload.cache import cached_chain
from archplace.workload.extract import check_tp, extract_chain, traced_as
from archplace.workload.key import CostKey
from archplace.workload.layers import LayerChain
from archplace.workload.options import Attention, Kernels, Loss


def read_run_file(path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """The top-level mapping of a run file (YAML, or JSON for ``*.json``;
    :func:`archplace.base.inputs.read_mapping`'s limits).

    Raises:
        ConfigError: one line naming the file and the problem.
    """
    return read_mapping(path, kind, syntax=syntax_of(path))


def load_model(model: ModelSpec, micro_batch_sizes: Iterable[int] = ()) -> zoo.LoadedModel:
    """The model of ``model`` at its sequence length (the spec's, else the model's context),
    with the sequence and every micro-batch's token count within :mod:`archplace.base.limits`.

    Raises:
        ConfigError: an unknown model or a bad config file, a size out of range, a fused
            attention the model's code does not run (:func:`archplace.workload.zoo.check_attention`),
            a capacity factor or expert load imbalance other than 1 for a dense model (named in
            ``fields``).
    """
    loaded = zoo.load_model(model.model)
    try:
        zoo.check_attention(loaded, model.attention)
    except ConfigError as exc:
        raise ConfigError(str(exc), fields=("attention",)) from None
    if not loaded.experts:
        for name, value in model.moe_options.items():
            if value != 1.0:
                raise ConfigError(f"{name} = {value:g} applies to mixture-of-experts models; "
                                  f"{loaded.name} is dense (leave it at 1)", fields=(name,))
    if model.seq_len is not None:
        loaded = loaded.with_seq_len(model.seq_len)
    limits.whole(f"sequence length of {loaded.name!r}", loaded.seq_len, 1, limits.MAX_SEQ_LEN)
    for b in micro_batch_sizes:
        limits.micro_batch_tokens(b, loaded.seq_len)
    return loaded


def accelerator(hardware: HardwareSpec) -> Accelerator:
    """The chip of ``hardware``, with its efficiency's attention kernel and communication overlaps
    replaced by ``hardware.attention_kernel``, ``tp_comm_overlap``, ``pp_comm_overlap`` and
    ``ep_comm_overlap`` when given (the one place the choices are applied).

    Raises:
        ConfigError: an unknown preset or a bad hardware file; an attention kernel or an
            overlap for a chip without an efficiency section, or a family with no table for the
            chip (the families that exist for it named).
    """
    acc = (hardware.accelerator if isinstance(hardware, ResolvedHardware)
           else load_accelerator(hardware.hardware))
    for name in FRAMEWORK_OVERLAPS:
        chosen = getattr(hardware, name)
        if chosen is None:
            continue
        if acc.efficiency is None:
            raise ConfigError(f"{name}: {acc.name} has no efficiency section, so its communication "
                              "overlap is not modelled; it applies to known chips", fields=(name,))
        acc = replace(acc, efficiency=replace(acc.efficiency, **{name: chosen}))
    family = hardware.attention_kernel
    if family is None:
        return acc
    if acc.efficiency is None:
        raise ConfigError(f"attention_kernel {family!r}: {acc.name} has no efficiency section, so its "
                          "attention runs on the cycle model; measured kernels apply to known chips "
                          f"({', '.join(sorted({p for _, p in model_tables()}))})",
                          fields=("attention_kernel",))
    try:
        key = kernel_key(family, acc.name, acc.efficiency.attention_kernel)
    except ConfigError as exc:
        raise ConfigError(f"attention_kernel: {exc}", fields=("attention_kernel",)) from None
    return replace(acc, efficiency=replace(acc.efficiency, attention_kernel=key))


def cluster(hardware: HardwareSpec, devices: int) -> Cluster:
    """``devices`` chips joined by the links of ``hardware`` (its ``cluster``, else its own).

    Raises:
        ConfigError: an unknown preset, a bad file, a preset without a ``cluster`` section.
    """
    if isinstance(hardware, ResolvedHardware):
        return hardware.links_of(devices)
    return load_cluster(hardware.links, devices)


def design_space(space: str) -> SearchSpace:
    """The accelerator design space ``space`` (a bundled name or a space YAML file).

    Raises:
        ConfigError: an unknown space or a bad file.
    """
    return load_space(space)


def cluster_or_none(hardware: HardwareSpec, devices: int) -> Cluster | None:
    """:func:`cluster`, or None when the hardware file has no ``cluster`` section (a chip
    alone)."""
    try:
        return cluster(hardware, devices)
    except MissingSectionError as exc:
        if exc.section == "cluster":
            return None
        raise


def layer_chain(model: ModelSpec, *, micro_batch: int = 1, tp: int = 1, sp: bool = False,
                ep: int = 1, etp: int = 1) -> LayerChain:
    """The traced layer chain of ``model`` (graph cache), per TP rank of a ``tp``-wide group,
    per EP rank of an ``ep``-wide expert-parallel group and per rank of an ``etp``-wide
    expert-tensor-parallel group.

    Raises:
        ConfigError: as :func:`load_model`, a TP width the model cannot be split by (an MoE
            model at tp > 1 also needs ``sp``), an EP degree that does not divide its routed
            experts, an ``etp`` that does not divide the experts' FFN width.
        ExtractionError: the model cannot be traced.
    """
    loaded = load_model(model, (micro_batch,))
    return cached_chain(loaded, traced_as(loaded.seq_len, CostKey(tp, micro_batch, sp, 1, ep, etp), model))


def training_setup(hardware: HardwareSpec, *, devices: int, global_batch: int, seq_len: int,
                   optimizer: Optimizer | str = Optimizer.ADAM, dp_must_divide_batch: bool = True,
                   grad_reduce_dtype: GradReduceDtype | str = GradReduceDtype.FP32,
                   rank_order: RankOrder | str = RankOrder.TP_CP_EP_PP_DP
                   ) -> tuple[Accelerator, TrainingSetup]:
    """The chip of ``hardware`` and the training setup of ``devices`` of them, their parallel
    groups laid over the ranks in ``rank_order``.

    Raises:
        ConfigError: an unknown preset, optimizer, gradient dtype or rank order, a preset
            without cluster links.
    """
    acc = accelerator(hardware)
    links = cluster(hardware, devices)
    setup = TrainingSetup(links, global_batch, seq_len, acc.hbm_bytes, acc.hbm_bandwidth_bytes_per_s,
                          acc.peak_flop_per_s, optimizer=member(Optimizer, optimizer, "optimizer"),
                          dp_must_divide_batch=dp_must_divide_batch,
                          grad_reduce_dtype=member(GradReduceDtype, grad_reduce_dtype, "grad_reduce_dtype"),
                          rank_order=member(RankOrder, rank_order, "rank_order"),
                          interference=Interference.of(acc),
                          hbm_fraction=acc.efficiency.hbm if acc.efficiency is not None else 1.0,
                          pp_comm_overlap=acc.efficiency is not None and acc.efficiency.pp_comm_overlap)
    return acc, setup


def problem(model: ModelSpec, hardware: HardwareSpec, cluster_spec: ClusterSpec, *,
            micro_batch_sizes: Iterable[int] = (), optimizer: Optimizer = Optimizer.ADAM,
            grad_reduce_dtype: GradReduceDtype = GradReduceDtype.FP32,
            rank_order: RankOrder = RankOrder.TP_CP_EP_PP_DP) -> workflow.Problem:
    """The model on the cluster, everything but the plan (``rank_order``: how the plan's
    groups are laid over the ranks).

    Raises:
        ConfigError: as :func:`load_model` and :func:`training_setup`.
    """
    loaded = load_model(model, micro_batch_sizes)
    acc, setup = training_setup(hardware, devices=cluster_spec.devices,
                                global_batch=cluster_spec.global_batch, seq_len=loaded.seq_len,
                                optimizer=optimizer, grad_reduce_dtype=grad_reduce_dtype,
                                rank_order=rank_order)
    return workflow.Problem(loaded, acc, setup)


def plan_grid(space: PlanSpace, model: ModelSpec) -> PlanGrid:
    """The engine's grid of a plan space, derived field by field: each field of
    :class:`~archplace.placement.grid.PlanGrid` takes the plan space's field of its name, else the
    model spec's (how the layers are traced and costed). The one field whose spelling differs:
    the grid's ``sps`` (the SP settings tried) is (False, True) when ``space.sp``, else (False,).
    """
    values: dict[str, Any] = {}
    for field in dataclasses.fields(PlanGrid):
        if field.name == "sps":
            values["sps"] = (False, True) if space.sp else (False,)
        else:
            values[field.name] = getattr(space if hasattr(space, field.name) else model, field.name)
    return PlanGrid(**values)


def plan(run: PlanRun) -> list[PlanResult]:
    """The ``run.space.top_k`` best plans of the run's model on its cluster, best first.

    Raises:
        ConfigError: as :func:`problem`, a TP width the model cannot be split by, a chain too
            long or a plan space too large (:mod:`archplace.placement.budget`).
        InfeasibleError: nothing fits, with the closest candidate's numbers.
    """
    space, model = run.space, run.model
    prob = problem(model, run.hardware, run.cluster, micro_batch_sizes=space.micro_batch_sizes,
                   optimizer=space.optimizer, grad_reduce_dtype=space.grad_reduce_dtype,
                   rank_order=space.rank_order)
    return workflow.plan(prob, plan_grid(space, model), space.top_k)


def evaluate_keywords(plan: Plan, model: ModelSpec) -> dict[str, Any]:
    """The keywords of :func:`archplace.placement.workflow.evaluate` for a fixed plan, derived
    by name: each keyword-only parameter takes the plan's field of its name, else the model
    spec's. (The plan's ``optimizer``, ``grad_reduce_dtype`` and ``rank_order`` go to the
    training setup, :func:`problem`.)"""
    names = [name for name, parameter in inspect.signature(workflow.evaluate).parameters.items()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    return {name: getattr(plan if hasattr(plan, name) else model, name) for name in names}


def evaluate(run: EvaluateRun) -> PlanResult:
    """Iteration time, throughput, MFU, HFU, breakdown, communication and memory of the run's
    plan.

    Raises:
        ConfigError: as :func:`problem`, an invalid plan, a layer-graph plan (its
            ``stage_layers`` set).
        InfeasibleError: the plan does not fit in memory (stage and bytes named).
    """
    p, model = run.plan, run.model
    if p.stage_layers:
        raise ConfigError("plan.stage_layers: the stages of a layer-graph plan index its graph's layers in "
                          "topological order, not the model's chain; evaluate scores chain plans "
                          "(remove stage_layers and give the chain's layer ranges)",
                          fields=("plan.stage_layers",))
    prob = problem(model, run.hardware, run.cluster, micro_batch_sizes=(p.micro_batch,),
                   optimizer=p.optimizer, grad_reduce_dtype=p.grad_reduce_dtype, rank_order=p.rank_order)
    return workflow.evaluate(prob, **evaluate_keywords(p, model))


def estimate_model(model: str, hardware: str, *, tp: int = 1, micro_batch: int = 1,
                   seq_len: int | None = None, attention: Attention | str = Attention.FLASH,
                   kernels: Kernels | str = Kernels.FUSED, capacity_factor: float = 1.0,
                   expert_load_imbalance: float = 1.0, loss: Loss | str = Loss.MEGATRON) -> ModelEstimate:
    """Trace ``model`` (a preset name or an HF ``config.json``) and estimate it on ``hardware``
    (``capacity_factor`` and ``expert_load_imbalance`` as in :class:`~archplace.front.specs.ModelSpec`;
    one chip holds every expert, so only a capacity factor above 1 changes the figures; ``loss``
    as in :class:`~archplace.workload.options.Loss`).

    The preset's cluster links (for TP collectives) are those of a node of ``tp`` devices.

    Raises:
        ConfigError: unknown model or preset, a size out of range (:mod:`archplace.base.limits`: tp
            1..2**20, micro_batch 1..2**20, seq_len 1..2**20, at most 2**26 tokens per
            micro-batch), a TP width the model cannot be split by, an unknown attention or
            kernels value.
        ExtractionError: the model could not be traced.
    """
    spec = ModelSpec(model, seq_len, attention=attention, kernels=kernels,  # type: ignore[arg-type]
                     capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance,
                     loss=loss)  # type: ignore[arg-type]
    check_as(Plan, "tp", tp)
    check_as(Plan, "micro_batch", micro_batch)
    chip = HardwareSpec(hardware)
    chain = layer_chain(spec, micro_batch=micro_batch, tp=tp)
    return estimate_layers(chain, accelerator(chip), SystolicCostModel(cluster_or_none(chip, tp)))


def estimate_preset_matmul(hardware: str, m: int, k: int, n: int, *, batch: int = 1) -> PresetMatmul:
    """Latency and achieved FLOP/s of ``[batch, m, k] x [batch, k, n]`` on a hardware preset
    (:func:`archplace.cost.estimate.preset_matmul`).

    Raises:
        ConfigError: an unknown preset, or a size out of range (1..2**31 - 1).
    """
    for name, value in (("m", m), ("k", k), ("n", n), ("batch", batch)):
        limits.whole(f"matmul: {name}", value, 1, limits.MAX_GEMM_DIM)
    return preset_matmul(accelerator(HardwareSpec(hardware)), m, k, n, batch=batch)


def layer_problem(model: str, hardware: str = "tpuv4", layer: str = "block", phase: str = "fwd",
                  *, tp: int = 1, micro_batch: int = 1, seq_len: int | None = None,
                  attention: Attention | str = Attention.FLASH,
                  kernels: Kernels | str = Kernels.FUSED, capacity_factor: float = 1.0,
                  expert_load_imbalance: float = 1.0,
                  loss: Loss | str = Loss.MEGATRON) -> ScheduleProblem:
    """The scheduling problem of one layer's forward or backward graph.

    Args:
        model: model preset or path of an HF config.json.
        hardware: accelerator preset or YAML file (its cluster prices the TP collectives).
        layer: ``embedding``, ``block`` or ``head``.
        phase: ``fwd`` or ``bwd``.
        tp: tensor-parallel width.
        micro_batch: samples per micro-batch.
        seq_len: tokens per sample [the model's default].
        attention, kernels: eager | sdpa | flash and fused | unfused
            (:class:`archplace.workload.extract.ExtractOptions`).
        capacity_factor, expert_load_imbalance: of a mixture-of-experts model's routed tokens
            (:class:`~archplace.front.specs.ModelSpec`; 1.0 each).
        loss: how the head's cross-entropy runs (:class:`~archplace.workload.options.Loss`).

    Raises:
        ConfigError: an unknown layer or phase, a bad model or hardware, a size out of range
            (:mod:`archplace.base.limits`), a TP width the model does not allow, or tp > 1 on
            hardware without a cluster section.
        ExtractionError: the model cannot be traced.
    """
    spec = ModelSpec(model, seq_len, attention=attention, kernels=kernels,  # type: ignore[arg-type]
                     capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance,
                     loss=loss)  # type: ignore[arg-type]
    if layer not in LAYERS:
        raise ConfigError(f"unknown layer {layer!r}; choose from {', '.join(LAYERS)}")
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    check_as(Plan, "tp", tp)
    check_as(Plan, "micro_batch", micro_batch)
    loaded = load_model(spec, (micro_batch,))
    chip = HardwareSpec(hardware)
    acc = accelerator(chip)
    cost = SystolicCostModel(cluster=cluster(chip, tp)) if tp > 1 else SystolicCostModel()
    options = traced_as(loaded.seq_len, CostKey(tp, micro_batch, False), spec)
    chain = extract_chain(loaded, dataclasses.replace(options, fuse=False))  # unfused: one operator each
    chosen = next(item for item in chain.layers if item.kind.value == layer)
    return ScheduleProblem.from_graph(chosen.fwd if phase == "fwd" else chosen.bwd, acc, cost)


def schedule_layer(model: str, hardware: str = "tpuv4", layer: str = "block", phase: str = "fwd",
                   *, tp: int = 1, micro_batch: int = 1, seq_len: int | None = None,
                   backend: str = "cpsat", options: SolveOptions | None = None,
                   attention: Attention | str = Attention.FLASH,
                   kernels: Kernels | str = Kernels.FUSED, capacity_factor: float = 1.0,
                   expert_load_imbalance: float = 1.0) -> ScheduleResult:
    """Build the problem of one layer (:func:`layer_problem`) and schedule it
    (:func:`archplace.scheduling.solve.solve_problem`).

    Raises:
        ConfigError, ExtractionError, SolverError: as those two functions.
    """
    problem_ = layer_problem(model, hardware, layer, phase, tp=tp, micro_batch=micro_batch,
                             seq_len=seq_len, attention=attention, kernels=kernels,
                             capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance)
    return solve_problem(problem_, backend, options)


def read_schedule_problem(path: str | os.PathLike[str]) -> ScheduleProblem:
    """The layer-scheduling problem in the JSON file ``path`` (the format of
    :meth:`~archplace.scheduling.problem.ScheduleProblem.to_dict`, as ``schedule --dump-problem``
    writes it, stamped or not).

    Raises:
        ConfigError: a file :func:`archplace.base.inputs.read_mapping` refuses (missing, oversized,
            binary, not JSON, too deep), or not a valid problem (the message starts with the path).
    """
    data = read_mapping(path, "schedule problem", syntax="json")
    try:
        return ScheduleProblem.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


__all__ = ["EvaluateRun", "PlanRun", "accelerator", "cluster", "cluster_or_none", "design_space",
           "estimate_model", "estimate_preset_matmul", "evaluate", "layer_chain", "layer_problem",
           "load_model", "plan", "problem", "read_run_file", "read_schedule_problem",
           "schedule_layer", "training_setup"]


def search_request(spec: SearchSpec) -> SearchRequest:
    """Everything the search of ``spec`` needs, loaded and checked, without running it: its models
    (loaded; traced when the search runs), the designs of its space within the budgets, the
    cluster's links, the plan grid searched for every design, the objective and the baseline.
    The spec's values are range-checked already (:class:`~archplace.front.specs.search.SearchSpec`);
    what is checked here needs the loaded models, space or chips.

    Raises:
        ConfigError: unknown model / space / preset, a bad file, a cluster out of range, routing
            options or expert-TP widths above 1 when every model is dense, no design within the
            budgets, fp8 alone on a space none of whose designs has FP8 tensor cores, a TP width
            above the devices or one a model cannot be split by.
    """
    ClusterSpec(spec.devices, spec.global_batch)
    models = _search_models(spec)
    space = design_space(spec.space)
    links = cluster(HardwareSpec(spec.cluster or space.base), spec.devices)
    designs = _within_budgets(spec, space)
    if Precision.BF16 not in spec.precisions and all(d.fp8_speedup is None for d in designs):
        raise ConfigError(f"no design of space {spec.space!r} has FP8 tensor cores: add bf16 to the "
                          f"precisions, or give the space an fp8_speedup", fields=("precisions",))
    # each grid field from the search's field of its name; cp = ep = etp = 1 unless told: every
    # degree multiplies every design's layer costs
    grid = grid_of({**{field.name: getattr(spec, field.name) for field in dataclasses.fields(spec)},
                    "tps": _search_tps(spec, models, links),
                    "cps": spec.cps or (1,), "eps": spec.eps or (1,), "etps": spec.etps or (1,)})
    reference = accelerator(HardwareSpec(spec.baseline)) if spec.baseline else None
    return SearchRequest(models, designs, links, spec.global_batch, grid, Objective(spec.objective),
                         reference)


def _search_models(spec: SearchSpec) -> tuple[zoo.LoadedModel, ...]:
    """The spec's models, loaded; the MoE routing options and expert-TP widths refused when every
    model is dense."""
    models = tuple(load_model(ModelSpec(name, spec.seq_len), spec.micro_batch_sizes) for name in spec.models)
    if not any(model.experts for model in models):
        load_model(ModelSpec(spec.models[0], spec.seq_len, capacity_factor=spec.capacity_factor,
                             expert_load_imbalance=spec.expert_load_imbalance))  # refuses them
        if max(spec.etps or (1,)) > 1:
            raise ConfigError(f"etps = {max(spec.etps or (1,))}: every model is dense (no routed experts "
                              "to split); use etp 1", fields=("etps",))
    return models


def _within_budgets(spec: SearchSpec, space: SearchSpace) -> tuple[Accelerator, ...]:
    designs = space.designs()
    if spec.area_budget is not None:
        limit_mm2 = parse_area_mm2(spec.area_budget, "area_budget")
        designs = tuple(d for d in designs if area_mm2(d) <= limit_mm2)
    if spec.power_budget is not None:
        limit_w = parse_power_w(spec.power_budget, "power_budget")
        designs = tuple(d for d in designs if tdp_w(d) <= limit_w)
    if not designs:
        raise ConfigError(f"no design of space {spec.space!r} is within the area and power budgets")
    return designs


def _search_tps(spec: SearchSpec, models: tuple[zoo.LoadedModel, ...], links: Cluster) -> tuple[int, ...]:
    """The spec's TP widths (each at most the devices, each splitting every model; MoE models are
    searched with SP at tp > 1), or every width within a node that splits every model."""
    if spec.tps is None:
        node = min(links.devices_per_node, spec.devices)
        widths = set.intersection(*(set(workflow.valid_tp_widths(m, spec.devices, node)) for m in models))
        return tuple(sorted(widths)) or (1,)
    tps = tuple(dict.fromkeys(spec.tps))
    for width in tps:
        if width > spec.devices:
            raise ConfigError(f"tp {width} must be between 1 and the {spec.devices} devices", fields=("tps",))
        for model in models:
            check_tp(model, width, sp=True)
    return tps
