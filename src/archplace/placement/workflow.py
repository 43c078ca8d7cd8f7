"""``plan`` and ``evaluate``: a model on a cluster of known chips, end to end.

A resolved :class:`Problem` (model, chip, training setup; built by :mod:`archplace.front.app`) ->
layer chains for every (TP width, micro-batch, SP) asked for (graph cache) -> layer costs on
the chip (cost model with the cluster's links for TP collectives, list-scheduled layers) ->
the placement engine (:mod:`archplace.placement.solver`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from archplace.base.errors import ConfigError, InfeasibleError, OutOfMemoryError
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import PRECISION_ORDER, Fp8CostModel, Precision, check_precision
from archplace.hw.accelerator import Accelerator
from archplace.placement.budget import check_chain_length
from archplace.placement.costs import costs_by_key
from archplace.placement.grid import DEFAULT_GRID, PlanGrid
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import (
    CostKey,
    GradSync,
    LayerCost,
    PipelineSchedule,
    Plan,
    Recompute,
    TrainingSetup,
)
from archplace.placement.result import PlanResult
from archplace.placement.solver import plan_search
from archplace.workload.cache import cached_chains
from archplace.workload.extract import ExtractOptions, check_tp
from archplace.workload.options import (
    DEFAULT_RECOMPUTE_MODULES,
    Attention,
    ExpertWeighting,
    Kernels,
    Loss,
    RecomputeModule,
    Tracing,
    tracing_of,
)
from archplace.workload.zoo import LoadedModel

MAX_TP = 64  # widest TP width tried by default

DEFAULT_TRACING = Tracing()
"""The tracing options' defaults (:class:`~archplace.workload.options.Tracing`)."""

MIN_TOKENS_PER_CP_RANK = 8192
"""Fewest tokens of a sample per context-parallel rank that the automatic CP degrees keep
(:func:`valid_cp_degrees`): Llama 3 trains its 131,072-token sequences with CP16, i.e. 8,192
tokens per rank (Llama Team, "The Llama 3 Herd of Models", 2024, sec. 3.3.2); shorter shares
leave the ring's KV exchange less to hide behind (an assumption of the default only: ``cps``
given explicitly may go lower)."""


@dataclass(frozen=True)
class Problem:
    """A model on a cluster: everything but the plan.

    Attributes:
        spec: the model (sequence length applied).
        acc: the chip.
        setup: cluster, global batch, sequence, memory and peak of a device.
    """

    spec: LoadedModel
    acc: Accelerator
    setup: TrainingSetup


def valid_tp_widths(spec: LoadedModel, devices: int, limit: int = MAX_TP) -> tuple[int, ...]:
    """Powers of two up to ``min(devices, limit)`` that divide the heads, KV heads and FFN size
    (a mixture-of-experts model's widths above 1 are run with sequence parallelism, which
    Megatron-Core requires for them: :func:`check_moe_sp`)."""
    widths = []
    t = 1
    while t <= min(devices, limit):
        try:
            check_tp(spec, t, sp=True)
            widths.append(t)
        except ConfigError:
            pass
        t *= 2
    return tuple(widths)


def check_cp(spec: LoadedModel, cp: int) -> None:
    """Refuse a CP degree the sequence cannot be split by: Megatron-Core's causal load balancing
    cuts the sequence into 2 cp chunks (rank i takes chunks i and 2 cp - 1 - i), so cp > 1 needs
    seq_len % (2 cp) == 0.

    Raises:
        ConfigError: cp not a positive integer, or the sequence not divisible by 2 cp.
    """
    if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
        raise ConfigError(f"plan.cp must be a positive integer, got {cp!r}", fields=("plan.cp",))
    if cp > 1 and spec.seq_len % (2 * cp):
        raise ConfigError(f"plan.cp = {cp}: the sequence length {spec.seq_len} must be divisible by "
                          f"2*cp = {2 * cp} (causal load balancing splits it into 2*cp chunks)",
                          fields=("plan.cp",))


def check_ep(spec: LoadedModel, ep: int) -> None:
    """Refuse an EP degree the model's experts cannot be sharded by.

    Raises:
        ConfigError: ep not a positive integer, ep > 1 for a dense model, or ep not dividing the
            routed experts of every MoE layer.
    """
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"plan.ep must be a positive integer, got {ep!r}", fields=("plan.ep",))
    if ep == 1:
        return
    if not spec.experts:
        raise ConfigError(f"plan.ep = {ep}: {spec.name} is a dense model (no routed experts to shard); "
                          f"use ep 1", fields=("plan.ep",))
    if spec.experts % ep:
        raise ConfigError(f"plan.ep = {ep} must divide the {spec.experts} routed experts of {spec.name}",
                          fields=("plan.ep",))


def check_etp(spec: LoadedModel, etp: int) -> None:
    """Refuse an expert-tensor-parallel width for a model without routed experts.

    Raises:
        ConfigError: etp not a positive integer, or etp > 1 for a dense model.
    """
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise ConfigError(f"plan.etp must be a positive integer, got {etp!r}", fields=("plan.etp",))
    if etp > 1 and not spec.experts:
        raise ConfigError(f"plan.etp = {etp}: {spec.name} is a dense model (no routed experts to split); "
                          f"use etp 1", fields=("plan.etp",))


def check_moe_sp(spec: LoadedModel, tp: int, sp: bool) -> None:
    """Refuse tensor parallelism without sequence parallelism for a mixture-of-experts model:
    Megatron-Core requires SP for MoE layers with TP > 1 (the token dispatcher takes the
    sequence-split tokens of every TP rank).

    Raises:
        ConfigError: tp > 1, sp off and routed experts.
    """
    if spec.experts and tp > 1 and not sp:
        raise ConfigError(f"plan.sp: {spec.name} at tp = {tp} needs sequence parallelism (Megatron-Core "
                          f"requires it for mixture-of-experts layers with tensor parallelism); use sp",
                          fields=("plan.sp",))


def valid_cp_degrees(spec: LoadedModel, devices: int) -> tuple[int, ...]:
    """1 and the powers of two cp <= devices that :func:`check_cp` accepts and that leave at least
    :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank."""
    degrees = [1]
    cp = 2
    while cp <= devices and spec.seq_len % (2 * cp) == 0 and spec.seq_len // cp >= MIN_TOKENS_PER_CP_RANK:
        degrees.append(cp)
        cp *= 2
    return tuple(degrees)


def valid_ep_degrees(spec: LoadedModel, devices: int) -> tuple[int, ...]:
    """1 and, for a mixture-of-experts model, the powers of two ep <= devices dividing its routed
    experts per MoE layer; (1,) for a dense model."""
    degrees = [1]
    ep = 2
    while spec.experts and ep <= devices and spec.experts % ep == 0:
        degrees.append(ep)
        ep *= 2
    return tuple(degrees)


def valid_etp_degrees(spec: LoadedModel, tp: int) -> tuple[int, ...]:
    """The automatic expert-tensor-parallel widths at TP width ``tp``: 1 and tp for a
    mixture-of-experts model (experts whole on every rank, or split as the dense layers are:
    Megatron-Core's default ``expert_tensor_parallel_size`` is the TP width), tp only when it
    divides the routed experts' FFN width (``moe_intermediate_size``, else the FFN size);
    (1,) for a dense model."""
    if not spec.experts:
        return (1,)
    width = spec.config.get("moe_intermediate_size") or spec.ffn_size
    return (1, tp) if tp > 1 and isinstance(width, int) and width % tp == 0 else (1,)


def layer_costs_for(prob: Problem, keys: Sequence[CostKey], *, precision: Precision = Precision.BF16,
                    tracing: Tracing = DEFAULT_TRACING) -> dict[CostKey, list[LayerCost]]:
    """Layer costs of ``prob``'s model on its chip for each :class:`CostKey` (tp, micro_batch,
    sp, cp, ep, etp), the model traced with the options of ``tracing`` (any
    :class:`~archplace.workload.options.Tracing`: a plan grid, a model spec; attention, kernels,
    fuse, the MoE options, what selective recompute reruns, the loss; as in
    :class:`archplace.workload.extract.ExtractOptions`); ``precision`` fp8: the linear layers'
    GEMMs in FP8 (:class:`archplace.cost.precision.Fp8CostModel`).

    Raises:
        ConfigError: a TP width the model cannot be split by, fp8 on a chip without FP8, a
            capacity factor or load imbalance below 1.
    """
    check_precision(prob.acc, precision)
    seq_len = prob.spec.seq_len
    options = tracing_of(tracing)
    chains = dict(zip(keys, cached_chains([(prob.spec, ExtractOptions(
        key._replace(sp=key.sp and key.tp > 1), seq_len, **options)) for key in keys]),
        strict=True))
    cost = SystolicCostModel(prob.setup.cluster)
    fp8_cost = Fp8CostModel(cost) if precision is Precision.FP8 else None
    return costs_by_key(chains, prob.acc, cost, fp8_cost=fp8_cost)


def search_options(space: PlanGrid) -> dict[str, Any]:
    """The options :func:`~archplace.placement.solver.plan_search` searches, from ``space``: each
    keyword-only parameter of ``plan_search`` that names a :class:`PlanGrid` field, given that
    field's value (so that a new searched option reaches the engine without anyone listing it)."""
    grid = {field.name for field in fields(PlanGrid)}
    return {name: getattr(space, name) for name, param in inspect.signature(plan_search).parameters.items()
            if param.kind is inspect.Parameter.KEYWORD_ONLY and name in grid}


def precision_setup(prob: Problem, precision: Precision) -> TrainingSetup:
    """``prob.setup`` for training at ``precision``: with fp8, MFU and HFU are counted against
    the FP8 peak (``fp8_speedup`` x the bf16 peak), the rate the linear layers' GEMMs run at.

    Raises:
        ConfigError: fp8 on a chip without FP8 tensor cores.
    """
    check_precision(prob.acc, precision)
    if precision is Precision.BF16:
        return prob.setup
    speedup = float(prob.acc.fp8_speedup or 1.0)
    return replace(prob.setup, peak_flop_per_s=prob.setup.peak_flop_per_s * speedup)


def plan(prob: Problem, space: PlanGrid = DEFAULT_GRID, top_k: int = 1) -> list[PlanResult]:
    """The ``top_k`` best plans of ``prob`` over ``space``, best first.

    Raises:
        ConfigError: an invalid option (e.g. a TP width that does not divide the heads, a CP
            degree not splitting the sequence into 2 cp chunks, an EP degree or expert-TP width
            for a dense model or an EP degree not dividing its experts: :func:`check_cp`,
            :func:`check_ep`, :func:`check_etp`; an MoE model whose TP widths are all > 1 with SP
            off: :func:`check_moe_sp`), a chain too long or a search too large
            (:mod:`archplace.placement.budget`).
        InfeasibleError: no plan fits, with the closest candidate's numbers; no (tp, cp, ep, etp)
            fits the devices.
    """
    if top_k <= 0:
        raise ConfigError(f"top_k must be positive, got {top_k}")
    check_chain_length(prob.spec.num_layers + 2)  # embedding, blocks, head: refused before tracing
    devices = prob.setup.cluster.devices
    tps = space.tps if space.tps is not None else valid_tp_widths(prob.spec, devices)
    for t in tps:
        check_tp(prob.spec, t, sp=True)  # an MoE model's tp > 1 keys are built with SP only
        if t > devices:
            raise ConfigError(f"TP width {t} exceeds the {devices} devices")
    cps = space.cps if space.cps is not None else valid_cp_degrees(prob.spec, devices)
    eps = space.eps if space.eps is not None else valid_ep_degrees(prob.spec, devices)
    if not cps or not eps:
        raise ConfigError("at least one CP degree and one EP degree are needed",
                          fields=("cps",) if not cps else ("eps",))
    for cp in cps:
        check_cp(prob.spec, cp)
    for ep in eps:
        check_ep(prob.spec, ep)
    if space.etps is not None and not space.etps:
        raise ConfigError("at least one expert-TP width is needed", fields=("etps",))
    for etp in space.etps or ():
        check_etp(prob.spec, etp)
    moe = bool(prob.spec.experts)
    if moe and tps and min(tps) > 1 and True not in space.sps:
        check_moe_sp(prob.spec, min(tps), False)

    def etps(t: int) -> tuple[int, ...]:
        return tuple(dict.fromkeys(space.etps)) if space.etps is not None else valid_etp_degrees(prob.spec, t)
    every = [CostKey(t, b, sp, cp, ep, etp) for t in tps for b in space.micro_batch_sizes for sp in space.sps
             for cp in dict.fromkeys(cps) for ep in dict.fromkeys(eps) for etp in etps(t)
             if (t > 1 or not sp) and (sp or t == 1 or not moe)]  # MoE with TP: SP only
    keys = [key for key in every if key.tp * key.cp <= devices and key.etp * key.ep <= devices]
    if every and not keys:
        raise InfeasibleError(f"no valid plan: no (tp, cp, ep, etp) of the given ones fits {devices} devices "
                              f"(tp*cp and etp*ep must not exceed them)")
    precisions = [p for p in PRECISION_ORDER if p in space.precisions]
    if not precisions:
        raise ConfigError("at least one precision is needed", fields=("precisions",))
    for precision in precisions:
        check_precision(prob.acc, precision)
    ranked: list[tuple[float, int, int, PlanResult]] = []
    refusal: InfeasibleError | None = None
    for order, precision in enumerate(precisions):
        costs = layer_costs_for(prob, keys, precision=precision, tracing=space)
        setup = replace(precision_setup(prob, precision), grad_reduce_dtype=space.grad_reduce_dtype)
        try:
            found = plan_search(costs, setup, top_k=top_k, **search_options(space))
        except InfeasibleError as exc:
            refusal = refusal or exc
            continue
        ranked.extend((result.iteration_time_s, order, rank, _with_precision(result, precision))
                      for rank, result in enumerate(found))
    if not ranked and refusal is not None:
        raise refusal
    ranked.sort(key=lambda row: row[:3])
    return [row[3] for row in ranked[:top_k]]


def _with_precision(result: PlanResult, precision: Precision) -> PlanResult:
    """``result`` with its plan marked as trained at ``precision``."""
    if result.plan.precision is precision:
        return result
    return replace(result, plan=replace(result.plan, precision=precision))


def even_stages(n_layers: int, stages: int) -> tuple[tuple[int, int], ...]:
    """Megatron-LM's split: blocks divided evenly (earlier stages take the remainder), the
    embedding on the first stage and the head on the last.

    Raises:
        ConfigError: more stages than blocks.
    """
    blocks = n_layers - 2
    if stages <= 0 or stages > blocks:
        raise ConfigError(f"cannot split {blocks} blocks into {stages} pipeline stages")
    base, extra = divmod(blocks, stages)
    out, first = [], 1
    for j in range(stages):
        last = first + base + (1 if j < extra else 0) - 1
        out.append((0 if j == 0 else first, n_layers - 1 if j == stages - 1 else last))
        first = last + 1
    return tuple(out)


def evaluate(prob: Problem, *, tp: int, pp: int, dp: int, micro_batch: int, recompute: Recompute,
             schedule: PipelineSchedule, chunks: int = 1, sp: bool = False, zero_stage: int = 0,
             dp_overlap: bool = False, stages: tuple[tuple[int, int], ...] | None = None, fuse: bool = False,
             attention: Attention = Attention.FLASH, kernels: Kernels = Kernels.FUSED,
             precision: Precision = Precision.BF16, cp: int = 1, ep: int = 1,
             capacity_factor: float = 1.0, expert_load_imbalance: float = 1.0, etp: int = 1,
             dp_replicate: int = 1,
             recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES,
             grad_sync: GradSync = GradSync.AUTO,
             expert_weighting: ExpertWeighting = ExpertWeighting.OUTPUT,
             loss: Loss = Loss.MEGATRON, swiglu_fp8_input: bool = False) -> PlanResult:
    """Score one fixed plan (stages: Megatron's even split unless given as ``(first, last)``
    layer ranges); ``fuse``, ``attention``, ``kernels``, ``capacity_factor``,
    ``expert_load_imbalance``, ``recompute_modules``, ``expert_weighting``, ``loss`` and
    ``swiglu_fp8_input`` as in :class:`PlanGrid`;
    ``precision`` of the linear layers' GEMMs (:mod:`archplace.cost.precision`); ``cp``, ``ep``
    and ``etp`` the context- and expert-parallel degrees and the expert-TP width (tp * cp * pp * dp
    devices; the rank order is ``prob.setup.rank_order``, recorded as the returned plan's
    ``rank_order``); ``dp_replicate`` the hybrid-sharding replicas (:attr:`Plan.dp_replicate`);
    ``grad_sync`` when the DP gradient reduction runs (:attr:`Plan.grad_sync`).

    Raises:
        ConfigError: an invalid plan (also: cp not splitting the sequence into 2 cp chunks, ep > 1
            or etp > 1 for a dense model, ep not dividing its experts, etp * ep not dividing
            tp * cp * dp, an MoE model at tp > 1 without SP), stages that do not end at the last
            layer (the head), fp8 on a chip without FP8 tensor cores.
        InfeasibleError: the plan does not fit in memory (stage and bytes named).
    """
    check_moe_sp(prob.spec, tp, sp)
    check_tp(prob.spec, tp, sp)
    check_cp(prob.spec, cp)
    check_ep(prob.spec, ep)
    check_etp(prob.spec, etp)
    if isinstance(dp, int) and dp >= 1 and (tp * cp * dp) % (etp * ep):
        if tp == 1 and etp == 1:
            raise ConfigError(f"plan.ep = {ep} must divide dp*cp = {dp}*{cp} = {dp * cp} (the "
                              f"expert-parallel ranks are taken from the data- and context-parallel "
                              f"ranks)", fields=("plan.ep",))
        raise ConfigError(f"plan: etp*ep = {etp}*{ep} = {etp * ep} must divide tp*cp*dp = {tp}*{cp}*{dp} "
                          f"= {tp * cp * dp} (the expert-tensor- and expert-parallel ranks are folded "
                          f"into a stage's tensor-, context- and data-parallel ranks)",
                          fields=("plan.etp", "plan.ep"))
    key = CostKey(tp, micro_batch, sp and tp > 1, cp, ep, etp)
    setup = replace(precision_setup(prob, precision), dp_replicate=dp_replicate, grad_sync=grad_sync)
    tracing = Tracing(attention=attention, kernels=kernels, fuse=fuse, capacity_factor=capacity_factor,
                      expert_load_imbalance=expert_load_imbalance, recompute_modules=recompute_modules,
                      expert_weighting=expert_weighting, loss=loss, swiglu_fp8_input=swiglu_fp8_input)
    costs = layer_costs_for(prob, [key], precision=precision, tracing=tracing)[key]
    n = len(costs)
    pieces = pp * (chunks if schedule is PipelineSchedule.INTERLEAVED else 1)
    if stages and stages[-1][1] != n - 1:
        raise ConfigError(f"plan.stages must end at the last layer {n - 1} (head), got {stages[-1][1]}",
                          fields=("plan.stages",))
    ranges = stages if stages else even_stages(n, pieces)
    fixed = Plan(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, recompute=recompute, stages=ranges,
                 schedule=schedule, chunks=chunks, sp=sp, zero_stage=zero_stage, dp_overlap=dp_overlap,
                 precision=precision, cp=cp, ep=ep, etp=etp, **setup.plan_options())
    try:
        return evaluate_plan(costs, setup, fixed)
    except OutOfMemoryError as exc:
        if recompute is not Recompute.SELECTIVE or recompute_modules == DEFAULT_RECOMPUTE_MODULES:
            raise
        modules = ",".join(module.value for module in recompute_modules)
        raise OutOfMemoryError(f"{exc} (selective recompute of {modules})") from None
