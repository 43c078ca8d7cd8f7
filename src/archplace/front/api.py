"""archplace as Python functions: the same questions the CLI answers.

Example::

    from archplace.front import api
    result = api.search("gpt2-xl", space="tiny", devices=1024, global_batch=4096)
    print(result.best.accelerator.name, result.best.throughput_samples_per_s)
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import check_as
from archplace.cost.estimate import estimate_matmul
from archplace.dse.request import SearchRequest, SearchResult
from archplace.dse.runner import Progress
from archplace.front import app
from archplace.front.app import (
    estimate_model,
    estimate_preset_matmul,
    layer_problem,
    read_schedule_problem,
    schedule_layer,
)
from archplace.front.layer_graphs import plan_layer_graph, plan_layer_graph_options
from archplace.front.searches import SearchInterrupted, run_searches
from archplace.front.specs import ClusterSpec, EvaluateRun, HardwareSpec, ModelSpec, Plan, PlanRun, PlanSpace
from archplace.front.specs.plan import (
    SEARCHED_CHUNKS,
    TOP_K,
    check_sp,
    fixed_zero_stage,
    parse_stages,
    parse_zero_stages,
)
from archplace.front.specs.resolved import ResolvedHardware
from archplace.front.specs.search import SearchSpec
from archplace.front.stored_results import plot_design_space, results
from archplace.hw.presets import preset_summaries
from archplace.placement.plan import MICRO_BATCHES, ZERO_STAGES
from archplace.placement.result import PlanResult
from archplace.scheduling.base import SolveOptions
from archplace.scheduling.solve import get_scheduler, solve_problem
from archplace.workload.expert_parallel import shared_experts
from archplace.workload.expert_tensor import check_etp
from archplace.workload.options import Attention, Kernels
from archplace.workload.summary import chain_summary
from archplace.workload.zoo import model_preset_summaries

if TYPE_CHECKING:
    from archplace.calibration import Calibration
    from archplace.placement.ranked import PlanReport

__all__ = ["EvaluateRun", "PlanRun", "SearchInterrupted", "SearchSpec", "SolveOptions", "calibrate",
           "check_run_options", "check_scheduler", "estimate_matmul", "estimate_model",
           "estimate_preset_matmul", "evaluate", "evaluate_run", "fixed_zero_stage", "graph", "hardware",
           "layer_problem", "models", "parse_stages", "parse_zero_stages", "plan", "plan_layer_graph",
           "plan_report", "plan_layer_graph_options", "plan_run", "plot_design_space",
           "read_schedule_problem", "report", "report_plan", "report_search", "results", "schedule_layer",
           "search", "search_each", "search_request", "solve_problem", "spec_request"]


def check_scheduler(backend: str) -> None:
    """Refuse an unknown layer-scheduling backend before any work (``list``, ``cpsat``,
    ``highs``, ``gurobi``: :data:`archplace.scheduling.solve.SCHEDULER_FACTORIES`).

    Raises:
        ConfigError: an unknown backend, with the choices.
    """
    get_scheduler(backend)


def models() -> list[dict[str, Any]]:
    """Bundled model presets (name, model_type, layers, hidden, seq_len, source)."""
    return model_preset_summaries()


def hardware() -> list[dict[str, Any]]:
    """Bundled hardware presets (name, peak, HBM, area, source)."""
    return preset_summaries()


def graph(model: str, *, seq_len: int | None = None, micro_batch: int = 1, tp: int = 1,
          sp: bool = False, fuse: bool = False, attention: Attention | str = Attention.FLASH,
          kernels: Kernels | str = Kernels.FUSED, ep: int = 1, capacity_factor: float = 1.0,
          expert_load_imbalance: float = 1.0, etp: int = 1,
          recompute_modules: Iterable[str] = ("core_attn",),
          expert_weighting: str = "output", loss: str = "megatron",
          swiglu_fp8_input: bool = False) -> dict[str, Any]:
    """Per-layer totals of ``model``'s operator graphs (per device for ``tp`` > 1, per expert-parallel
    rank for ``ep`` > 1: :mod:`archplace.workload.expert_parallel`, per expert-tensor-parallel rank
    for ``etp`` > 1: :mod:`archplace.workload.expert_tensor`).

    ``attention`` (eager | sdpa | flash) and ``kernels`` (fused | unfused), members or names,
    as in :class:`~archplace.workload.extract.ExtractOptions`; every function here that traces
    a model takes them. ``capacity_factor`` and ``expert_load_imbalance`` (each >= 1; 1.0:
    dropless and balanced) as in :class:`archplace.front.specs.ModelSpec`, for a mixture-of-experts
    model only; :func:`plan`, :func:`evaluate` and :func:`search` take them too, and
    ``recompute_modules``: what selective recomputation reruns, a list of Megatron-Core's module
    names (``core_attn``, ``mlp``, ``moe``, ``shared_experts``, ``moe_act``, ``layernorm``,
    ``mla_up_proj``: :class:`~archplace.workload.options.RecomputeModule`; default core_attn),
    which sets the layers' selective figures; ``expert_weighting``: where the MoE layers apply
    the routing weights, ``output`` (Hugging Face's, the default) or ``activation``
    (Megatron-Core's: :class:`~archplace.workload.options.ExpertWeighting`); ``loss``: how the
    cross-entropy over the vocabulary runs, ``megatron`` (the logits upcast and the loss
    worked in that float32 buffer pass by pass, Megatron-LM's; the default), ``megatron-fused``
    (the same compiled, Megatron-Core's ``cross_entropy_loss_fusion``), ``te`` (Transformer Engine's fused
    kernels on the 16-bit logits), ``fp32`` (upcast, PyTorch's cross-entropy out of place,
    Hugging Face's) or ``fused`` (one fused kernel on the 16-bit logits, as llm-foundry runs it:
    :class:`~archplace.workload.options.Loss`);
    ``swiglu_fp8_input``: the SwiGLU inputs kept for the backward pass in FP8 (Megatron-Core's
    ``--activation-func-fp8-input-store``, DeepSeek-V3's).

    Returns:
        ``{"model", "micro_batch", "seq_len", "tp", "sp", "ep", "etp", "attention", "kernels",
        "capacity_factor", "expert_load_imbalance", "recompute_modules", "expert_weighting", "loss",
        "swiglu_fp8_input",
        "layers": [{"name",
        "kind", "params", "fwd_flop", "bwd_flop", "activation_bytes", "selective_activation_bytes",
        "boundary_bytes", "collectives", "operators"}], "total": {"params", "fwd_flop",
        "bwd_flop"}}``; bytes per micro-batch.
        Mixture-of-experts blocks add ``experts``, ``experts_per_token``, ``tokens_per_expert``,
        ``active_params``, ``shared_experts``, ``local_experts``, ``all_to_all_bytes`` and
        ``expert_tp_bytes``.

    Raises:
        ConfigError: unknown model, sizes out of range (:mod:`archplace.base.limits`), a TP width that
            does not divide the heads, KV heads or FFN size, ``sp`` with ``tp`` = 1, an unknown
            attention or kernels value, an ``ep`` that does not divide the routed experts (or
            above 1 for a dense model), an ``etp`` that does not divide the experts' FFN size (or
            above 1 for a dense model), ``tp`` > 1 without ``sp`` for a mixture-of-experts model,
            a capacity factor or load imbalance below 1 or other than 1 for a dense model.
        ExtractionError: the model code cannot be traced.
    """
    spec = ModelSpec(model, seq_len, attention=attention, kernels=kernels, fuse=fuse,  # type: ignore[arg-type]
                     capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance,
                     recompute_modules=_listed(recompute_modules),
                     expert_weighting=expert_weighting, loss=loss,  # type: ignore[arg-type]
                     swiglu_fp8_input=swiglu_fp8_input)
    check_as(Plan, "micro_batch", micro_batch)
    check_as(Plan, "tp", tp)
    check_as(Plan, "ep", ep)
    check_as(Plan, "etp", etp)
    check_sp(sp, tp)
    check_etp(app.load_model(spec), etp)
    chain = app.layer_chain(spec, micro_batch=micro_batch, tp=tp, sp=sp, ep=ep, etp=etp)
    summary = chain_summary(chain, shared_experts=shared_experts(app.load_model(spec)))
    return {**summary, "attention": spec.attention.value, "kernels": spec.kernels.value, **spec.moe_options,
            "recompute_modules": [module.value for module in spec.recompute_modules],
            "expert_weighting": spec.expert_weighting.value, "loss": spec.loss.value,
            "swiglu_fp8_input": spec.swiglu_fp8_input}


def plan(model: str, hardware: str, *, devices: int, global_batch: int, seq_len: int | None = None,
         tps: Iterable[int] | None = None, micro_batch_sizes: Iterable[int] | None = None,
         recomputes: Iterable[str] | None = None, schedules: Iterable[str] | None = None,
         sp: bool = True, zero: bool = True, optimizer: str = "adam", top_k: int = TOP_K,
         fuse: bool = False, zero_stages: str | Iterable[int] | None = None,
         grad_reduce_dtype: str = "fp32", attention: Attention | str = Attention.FLASH,
         kernels: Kernels | str = Kernels.FUSED, precisions: Iterable[str] | None = None,
         cps: Iterable[int] | None = None, eps: Iterable[int] | None = None,
         rank_order: str = "tp-cp-ep-pp-dp", capacity_factor: float = 1.0,
         expert_load_imbalance: float = 1.0, etps: Iterable[int] | None = None,
         attention_kernel: str | None = None, tp_comm_overlap: bool | None = None,
         pp_comm_overlap: bool | None = None, ep_comm_overlap: bool | None = None,
         chunks: Iterable[int] | None = None,
         dp_overlap: Iterable[bool] | None = None, cluster: str | None = None,
         dp_replicates: Iterable[int] = (1,),
         recompute_modules: Iterable[str] = ("core_attn",), grad_sync: str = "auto",
         expert_weighting: str = "output", loss: str = "megatron",
         swiglu_fp8_input: bool = False) -> list[PlanResult]:
    """The best parallel plans of ``model`` on ``devices`` chips of ``hardware``, best first.

    Searches TP width (default: every valid power of two), micro-batch (1, 2, 4, 8),
    recompute (none / selective / full), pipeline schedule (GPipe, 1F1B, interleaved with
    2 or 4 chunks), SP, the ZeRO stages (``zero_stages``: ``"all"``, ``"0,1,3"`` or ints;
    default all four, or 0 only when ``zero`` is False, the older switch), DP overlap (off and
    on: the gradient reduction bucketed over the last backward pass), every pipeline depth,
    stage split and DP degree. ``fuse``: layers costed with element-wise operators fused into
    their producing matmul (:class:`archplace.front.specs.PlanSpace`).
    ``grad_reduce_dtype``: fp32 (Megatron-LM's bf16 recipe, the default) or bf16 gradient
    buffer and reduction. ``attention`` and ``kernels`` as in :func:`graph`.
    ``precisions``: ``bf16`` and/or ``fp8`` (the linear layers' GEMMs in FP8, Transformer
    Engine's recipe: :mod:`archplace.cost.precision`), ranked together; default bf16.
    ``cps`` and ``eps``: the context-parallel (sequence split, ring attention) and
    expert-parallel (routed experts sharded over data-parallel ranks) degrees to try; default:
    the engine's automatic choice.
    ``etps``: expert-tensor-parallel widths to try (every routed expert's weights split over
    etp ranks, Megatron-Core's ``expert_tensor_parallel_size``); default: 1 and each TP width
    for a mixture-of-experts model, 1 for a dense one.
    ``rank_order``: how the parallel groups are laid over the ranks, ``tp-cp-ep-pp-dp`` (the
    default) or ``tp-cp-ep-dp-pp`` (Megatron-Core's); recorded in every plan.
    ``capacity_factor``, ``expert_load_imbalance``, ``recompute_modules`` (what the selective
    recompute the search tries reruns), ``expert_weighting``, ``loss``, ``swiglu_fp8_input``: :func:`graph`'s.
    ``attention_kernel``: the fused-attention kernel family whose measured per-shape table costs
    the attention operators (``flash2``, ``flash3``, ``cudnn``, ``triton-flash1``, where the
    chip has one: :mod:`archplace.cost.attention_tables`); None: the chip's own (flash2 on
    a100-80gb and h100-80gb).
    ``tp_comm_overlap``: the framework hides the TP collectives behind the GEMMs next to them
    (Transformer Engine's userbuffers overlap, :mod:`archplace.placement.tp_overlap`); None:
    the chip's own (off on the shipped presets). ``pp_comm_overlap``: an interleaved plan's
    pipeline sends overlap the next chunk's computation (Megatron-Core's ``overlap_p2p_comm``);
    None: the chip's own (off). ``ep_comm_overlap``: the expert all-to-alls hide behind another
    micro-batch's computation (:mod:`archplace.placement.ep_overlap`); None: the chip's own (off).
    ``chunks``: model chunks per device tried with the interleaved schedule (default 2 and 4);
    ``dp_overlap``: the DP overlap settings tried (default both, False and True);
    ``dp_replicates``: hybrid-sharding (HSDP) replica counts tried (default 1 only: ZeRO over the
    whole DP x CP group; r > 1: ZeRO within each of r replicas, which all-reduce their gradient
    shards once per iteration, :mod:`archplace.placement.layout`);
    ``grad_sync``: when the DP gradient reduction runs, for every plan: ``auto`` (each ZeRO
    stage's framework default: stages 0 and 1 once per iteration, 2 and 3 every micro-batch),
    ``iteration`` (accumulated and reduced once; ZeRO 2 and 3 then hold unsharded gradients) or
    ``micro_batch`` (every micro-batch; :mod:`archplace.placement.zero`);
    ``cluster``: the preset or YAML whose cluster section gives the links (default
    ``hardware``'s own). Each keyword is a field of :class:`~archplace.front.specs.PlanSpace`,
    :class:`~archplace.front.specs.ModelSpec` or :class:`~archplace.front.specs.HardwareSpec`, as ``plan``'s
    options are.

    Raises:
        ConfigError: unknown model / preset / option, an attention kernel with no table for the
            chip (the families it has named), sizes out of range (:mod:`archplace.base.limits`:
            devices, TP, CP and EP degrees and expert-TP widths 1..2**20, global batch 1..2**30,
            micro-batches 1..2**20, top_k 1..1,000, ...), a chain too long or a plan space too large to search
            (:mod:`archplace.placement.budget`), fp8 on a chip without FP8 tensor cores.
        InfeasibleError: nothing fits, with the closest candidate's numbers.
    """
    given = {name: _listed(value) for name, value in locals().items() if value is not None}
    given.update(sp=bool(sp), fuse=bool(fuse),
                 zero_stages=parse_zero_stages(zero_stages, ZERO_STAGES if zero else (0,)))
    return plan_run(PlanRun(ModelSpec(**_fields_of(ModelSpec, given)),
                            HardwareSpec(**_fields_of(HardwareSpec, given)),
                            ClusterSpec(**_fields_of(ClusterSpec, given)),
                            PlanSpace(**_fields_of(PlanSpace, given))))


def _fields_of(spec: type, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that name a field of the dataclass ``spec`` (each keyword of a
    façade is the spec field of its name, with its default and range check)."""
    return {field.name: values[field.name] for field in dataclasses.fields(spec) if field.name in values}


def plan_report(*args: Any, **kwargs: Any) -> PlanReport:
    """The best parallel plans as one :class:`~archplace.placement.ranked.PlanReport`: its
    ``plan``, ``mfu``, ``iteration_time_s``, ... are the best plan's, ``ranked`` every plan
    (``top_k`` of them), best first. ``archplace.plan`` is this function; it takes the
    arguments of :func:`plan` (its signature, which ``help()`` shows) and raises what it raises
    (:class:`ConfigError`, :class:`~archplace.base.errors.InfeasibleError` when nothing fits)."""
    from archplace.placement.ranked import PlanReport

    return PlanReport.of(plan(*args, **kwargs))


plan_report.__signature__ = inspect.signature(plan).replace(  # type: ignore[attr-defined]
    return_annotation="PlanReport")


def plan_run(run: PlanRun) -> list[PlanResult]:
    """:func:`plan` of a run given as specs (as a plan file gives it;
    :class:`~archplace.front.app.PlanRun`), best first.

    Raises:
        ConfigError, InfeasibleError: as :func:`plan`.
    """
    return app.plan(run)


def evaluate(model: str, hardware: str | ResolvedHardware, *, devices: int, global_batch: int, tp: int,
             pp: int, dp: int, micro_batch: int, seq_len: int | None = None, recompute: str = "none",
             schedule: str = "1f1b", chunks: int = 1, sp: bool = False, zero: bool = False,
             dp_overlap: bool = False, stages: str | None = None, optimizer: str = "adam",
             fuse: bool = False, zero_stage: int | None = None,
             grad_reduce_dtype: str = "fp32", attention: Attention | str = Attention.FLASH,
             kernels: Kernels | str = Kernels.FUSED, precision: str = "bf16", cp: int = 1,
             ep: int = 1, rank_order: str = "tp-cp-ep-pp-dp", capacity_factor: float = 1.0,
             expert_load_imbalance: float = 1.0, etp: int = 1,
             attention_kernel: str | None = None, tp_comm_overlap: bool | None = None,
             pp_comm_overlap: bool | None = None, ep_comm_overlap: bool | None = None,
             cluster: str | None = None,
             dp_replicate: int = 1, recompute_modules: Iterable[str] = ("core_attn",),
             grad_sync: str = "auto", expert_weighting: str = "output",
             loss: str = "megatron", swiglu_fp8_input: bool = False) -> PlanResult:
    """Iteration time, throughput, MFU, HFU, breakdown, communication and memory of one fixed
    plan (``fuse``, ``grad_reduce_dtype``, ``attention``, ``kernels``, ``rank_order``,
    ``capacity_factor``, ``expert_load_imbalance``, ``recompute_modules`` (used when
    ``recompute`` is ``selective``), ``expert_weighting``, ``loss`` and ``swiglu_fp8_input`` as in
    :func:`plan`;
    ``precision`` ``bf16`` or ``fp8``, one of :func:`plan`'s ``precisions``; ``cp``, ``ep`` and
    ``etp`` the context- and expert-parallel degrees and the expert-TP width, ``dp_replicate`` the
    hybrid-sharding replicas (dividing ``dp``, with ``zero_stage`` >= 1), ``grad_sync`` when the
    DP gradient reduction runs (``auto``, ``iteration`` or ``micro_batch``, as in :func:`plan`), and
    ``attention_kernel``, ``tp_comm_overlap``, ``pp_comm_overlap`` and ``ep_comm_overlap``, as in
    :func:`plan`;
    ``hardware`` a preset, a hardware YAML or a
    :class:`~archplace.front.specs.resolved.ResolvedHardware`; ``cluster`` the preset or YAML whose
    cluster section gives the links, default ``hardware``'s own).

    ``zero_stage`` 0..3 (ZeRO; 3 is FSDP); ``zero=True`` is the older spelling of stage 1 (an
    error together with another ``zero_stage``). ``dp_overlap``: the DP gradient reduction runs
    bucket by bucket during the last micro-batch's backward pass, only what is left after it
    is exposed.

    Stages are Megatron-LM's even split of the blocks unless ``stages`` gives the layer
    ranges (``"0-12,13-25,..."``; embedding = 0, head = last).

    Raises:
        ConfigError: unknown model / preset / option, sizes out of range (:mod:`archplace.base.limits`:
            devices, tp, cp, ep, etp, pp, dp and chunks 1..2**20, global batch 1..2**30, micro-batch 1..2**20,
            ...), an invalid plan, fp8 on a chip without FP8 tensor cores.
        InfeasibleError: the plan does not fit in memory (stage and bytes named).
    """
    if cluster is not None and isinstance(hardware, ResolvedHardware):
        raise ConfigError("cluster applies to a hardware preset or file; a ResolvedHardware carries its "
                          "own links", fields=("cluster",))
    cluster_spec = ClusterSpec(devices, global_batch)
    fixed = Plan(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, recompute=recompute,  # type: ignore[arg-type]
                 schedule=schedule, chunks=chunks, sp=sp, zero_stage=fixed_zero_stage(zero_stage, zero),  # type: ignore[arg-type]
                 dp_overlap=dp_overlap, grad_reduce_dtype=grad_reduce_dtype, optimizer=optimizer,  # type: ignore[arg-type]
                 stages=parse_stages(stages) if stages else None, precision=precision, cp=cp, ep=ep,  # type: ignore[arg-type]
                 rank_order=rank_order, etp=etp, dp_replicate=dp_replicate,  # type: ignore[arg-type]
                 grad_sync=grad_sync)  # type: ignore[arg-type]
    spec = ModelSpec(model, seq_len, attention=attention, kernels=kernels, fuse=bool(fuse),  # type: ignore[arg-type]
                     capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance,
                     recompute_modules=_listed(recompute_modules),
                     expert_weighting=expert_weighting, loss=loss,  # type: ignore[arg-type]
                     swiglu_fp8_input=swiglu_fp8_input)
    chip = (HardwareSpec(hardware, cluster, attention_kernel=attention_kernel,
                         tp_comm_overlap=tp_comm_overlap, pp_comm_overlap=pp_comm_overlap,
                         ep_comm_overlap=ep_comm_overlap)
            if not isinstance(hardware, ResolvedHardware) else dataclasses.replace(
                hardware,
                attention_kernel=hardware.attention_kernel if attention_kernel is None else attention_kernel,
                tp_comm_overlap=hardware.tp_comm_overlap if tp_comm_overlap is None else tp_comm_overlap,
                pp_comm_overlap=hardware.pp_comm_overlap if pp_comm_overlap is None else pp_comm_overlap,
                ep_comm_overlap=hardware.ep_comm_overlap if ep_comm_overlap is None else ep_comm_overlap))
    return evaluate_run(EvaluateRun(spec, chip, cluster_spec, fixed))


def calibrate(runs: str | Path, hardware: str, *, fit: str | Sequence[str] | None = None,
              variant: str = "as-trained", out: str | Path | None = None) -> Calibration:
    """``archplace calibrate``: fit ``fit`` of ``hardware`` to the runs file ``runs``, write the
    calibrated hardware YAML to ``out`` if given (:func:`archplace.calibration.calibrate_file`)."""
    from archplace.calibration import calibrate_file  # scipy only when asked for

    return calibrate_file(runs, hardware, fit=fit, variant=variant, out=out)


def evaluate_run(run: EvaluateRun) -> PlanResult:
    """:func:`evaluate` of a run given as specs (as ``evaluate --plan`` reads it;
    :class:`~archplace.front.app.EvaluateRun`).

    Raises:
        ConfigError, InfeasibleError: as :func:`evaluate`.
    """
    return app.evaluate(run)


def search_request(
    model: str | Sequence[str],
    *,
    space: str = "tiny",
    devices: int,
    global_batch: int,
    seq_len: int | None = None,
    micro_batch_sizes: Iterable[int] = MICRO_BATCHES,
    recomputes: Iterable[str] = ("none", "full"),
    tps: Iterable[int] | None = None,
    schedules: Iterable[str] = ("1f1b", "interleaved", "gpipe"),
    chunks: Iterable[int] = SEARCHED_CHUNKS,
    dp_overlap: Iterable[bool] = (False, True),
    cluster: str | None = None,
    objective: str = "throughput",
    area_budget: str | float | None = None,
    power_budget: str | float | None = None,
    baseline: str | None = "tpuv4",
    fuse: bool = False,
    attention: Attention | str = Attention.FLASH,
    kernels: Kernels | str = Kernels.FUSED,
    zero_stages: str | Iterable[int] | None = ZERO_STAGES,
    grad_reduce_dtype: str = "fp32",
    precisions: Iterable[str] = ("bf16",),
    cps: Iterable[int] | None = None,
    eps: Iterable[int] | None = None,
    capacity_factor: float = 1.0,
    expert_load_imbalance: float = 1.0,
    etps: Iterable[int] | None = None,
    dp_replicates: Iterable[int] = (1,),
    recompute_modules: Iterable[str] = ("core_attn",),
    grad_sync: str = "auto",
    expert_weighting: str = "output",
    loss: str = "megatron",
    swiglu_fp8_input: bool = False,
) -> SearchRequest:
    """Load and check everything a search needs, without running it: the keywords make a
    :class:`~archplace.front.specs.search.SearchSpec` (each keyword is its field of the same name, with
    its default and range check), which :func:`archplace.front.app.search_request` resolves.

    Args:
        model: a model preset name or the path of an HF ``config.json``; or several (the
            objective is then the geometric mean over the models).
        space: a bundled space name (``tiny``, ``phaze``, ``phaze-square``) or the path of a space YAML file.
        devices: accelerators in the cluster.
        global_batch: samples per iteration.
        seq_len: tokens per sample (default: each model's context length).
        micro_batch_sizes, recomputes, tps, schedules, chunks, dp_overlap: the plan choices to
            try, as :class:`~archplace.front.specs.search.SearchChoices`' fields (``recomputes``:
            ``none``, ``selective``, ``full``, ``both`` or ``all``; default none and full; ``tps``
            default: every power of two within a node that divides every model).
        cluster: hardware preset (or YAML) whose links the cluster uses (default: the space's base).
        objective: ``throughput`` (samples/s), ``throughput-per-watt`` (per watt of TDP, WHAM) or
            ``pareto`` (front of throughput, area and TDP).
        area_budget: keep designs of at most this area (``"280 mm2"``; default: the space's rule).
        power_budget: keep designs of at most this TDP (``"300 W"``).
        baseline: hardware preset evaluated the same way for comparison (None: none).
        zero_stages, grad_reduce_dtype, grad_sync, precisions, cps, eps, etps, dp_replicates: the
            other plan choices, likewise (``zero_stages`` also ``"all"`` or ``"0,1,3"``; a design
            without FP8 tensor cores tries bf16 only; cps, eps, etps default to 1 only; etps above
            1 refused when every model is dense).
        fuse, attention, kernels: how the layers are traced, as in :func:`graph`
            (:class:`~archplace.workload.options.Tracing`; recorded with the search).
        capacity_factor, expert_load_imbalance, recompute_modules, expert_weighting: as in
            :func:`graph` (a dense model among several ignores the first two). The search lays the groups over
            the ranks in the default order, tp-cp-ep-pp-dp.
        loss, swiglu_fp8_input: as in :func:`graph`.

    Raises:
        ConfigError: unknown model / space / preset, bad file, sizes out of range
            (:mod:`archplace.base.limits`), a budget that is not a positive finite quantity, a TP width
            a model cannot be split by, fp8 alone on a space none of whose designs has FP8
            tensor cores, a capacity factor or load imbalance below 1, or other than 1 when
            every model is dense.
    """
    given: dict[str, Any] = {name: _listed(value) for name, value in locals().items() if name != "model"}
    return app.search_request(SearchSpec(models=model, **given))  # type: ignore[arg-type]


def _listed(value: Any) -> Any:
    """An iterable given to a list field (a generator, a set) as a tuple; a text, a number, a
    list or a tuple as it is (the spec checks it)."""
    if isinstance(value, str | bytes | list | tuple | dict) or not isinstance(value, Iterable):
        return value
    return tuple(value)


def check_run_options(*, trials: int | None = None, seed: int = 0, exact_top: int = 0,
                      jobs: int | None = None, top: int = 1) -> None:
    """Check how a search is run, before any work (:mod:`archplace.base.limits`): ``trials``
    1..10**6 (or None), ``seed`` 0..2**32 - 1 (NumPy's and Optuna's range), ``exact_top`` and
    ``top`` up to 1,000 (``top`` >= 1), ``jobs`` 1..4 per usable CPU (or None).

    Raises:
        ConfigError: the first value out of range, named.
    """
    limits.whole("top", top, 1, limits.MAX_TOP)
    limits.optional_whole("trials", trials, 1, limits.MAX_TRIALS)
    limits.whole("seed", seed, 0, limits.MAX_SEED)
    limits.whole("exact_top", exact_top, 0, limits.MAX_TOP)
    if jobs is not None:
        limits.jobs(jobs)


def search(spec: SearchSpec | str | Sequence[str], *, progress: Progress | None = None,
           **fields: Any) -> SearchResult:
    """Search a space of accelerators for the one that trains the spec's models best.

    Args:
        spec: a :class:`~archplace.front.specs.search.SearchSpec` (``fields`` then override its
            fields), or -- the older call -- a model name or several, with the spec's fields as
            keywords (``devices``, ``global_batch``, ``space``, ``strategy``, ``trials``, ``jobs``,
            ``store``, ...); that call runs in this process (``jobs=1``) and re-evaluates
            nothing with CP-SAT (``exact_top=0``) unless told.
        progress: called in this process with a :class:`~archplace.dse.runner.Tick` after
            every finished batch of designs.

    The spec says how the space is explored (``strategy``, ``trials``, ``seed``), where the work
    runs (``jobs`` local processes, or ``executor="dask"``) and where results are kept as they
    finish (``store``: a re-run of the same search resumes from it).

    Returns:
        The evaluated designs, best first (``result.best`` is None when nothing fits).

    Raises:
        ConfigError: bad input (:class:`~archplace.front.specs.search.SearchSpec`,
            :func:`search_request`), an unreachable scheduler; ``per_model`` with several models
            (use :func:`search_each`).
        ExtractionError: the model code cannot be traced.
        SearchInterrupted: an interrupt, saying what was kept.
    """
    chosen = _search_spec(spec, fields)
    if len(chosen.groups) > 1:
        raise ConfigError("per_model: searching each model on its own gives one result per model; "
                          "use search_each")
    return run_searches(chosen, progress, spec_request)[0]


def search_each(spec: SearchSpec | Sequence[str], *, progress: Progress | None = None,
                **fields: Any) -> list[SearchResult]:
    """:func:`search` of each model on its own (``per_model``), in the order given; every
    search is checked (and its model traced) before the first starts, and they share the
    workers. ``progress`` receives ticks whose ``search`` is the index of the search."""
    chosen = _search_spec(spec, {**fields, "per_model": True})
    return run_searches(chosen, progress, spec_request)


def _search_spec(spec: SearchSpec | str | Sequence[str], fields: dict[str, Any]) -> SearchSpec:
    """``spec`` with ``fields`` applied, or the spec of the older call ``search(model, **fields)``."""
    if isinstance(spec, SearchSpec):
        return spec.replace(**fields) if fields else spec
    models = (spec,) if isinstance(spec, str | os.PathLike) else tuple(spec)
    return SearchSpec(models=models, **{"jobs": 1, "exact_top": 0, "top": 1, **fields})


def spec_request(spec: SearchSpec, models: Sequence[str] | None = None) -> SearchRequest:
    """:func:`search_request` of ``spec`` (for ``models``, default all of the spec's): the spec,
    already checked, resolved by :func:`archplace.front.app.search_request`."""
    return app.search_request(spec.replace(models=tuple(models)) if models else spec)


def report(store: str | Path, out: str | Path, *, search: str | None = None, top: int = 10,
           baseline: str | None = "tpuv4") -> Path:
    """Write the HTML report of a result store (``archplace report``) and return its path:
    :func:`archplace.reporting.pages.write_store_report` (arguments, what the page shows, errors)."""
    from archplace.reporting.pages import write_store_report  # plotly only when asked for

    return write_store_report(store, out, search=search, top=top, baseline=baseline)


def report_search(results: SearchResult | Sequence[SearchResult], out: str | Path, *,
                  spec: SearchSpec | None = None, top: int = 10) -> Path:
    """Write the HTML report of search results (``search --report``): with the ``spec`` they
    were searched with, the best design's layer schedule too (its models loaded again, not
    searched); :func:`archplace.reporting.pages.write_search_report`."""
    from archplace.reporting.pages import write_search_report

    requests = [spec_request(spec, names) for names in spec.groups] if spec is not None else []
    return write_search_report(results, out, requests=requests, top=top)


def report_plan(results: PlanResult | Sequence[PlanResult], out: str | Path, *,
                run: PlanRun | EvaluateRun | None = None) -> Path:
    """Write the HTML report of plans, best first (``plan --report``, ``evaluate --report``):
    :func:`archplace.reporting.pages.write_plan_report`."""
    from archplace.reporting.pages import write_plan_report

    return write_plan_report(results, out, run=run)
