"""Plans of a layer DAG read from a file (``archplace plan --layer-graph``): the fixed-options
plan (:func:`plan_layer_graph`) and the best plans over the recompute, schedule, ZeRO-stage,
DP-overlap and hybrid-sharding options (:func:`plan_layer_graph_options`).

The front door of :mod:`archplace.placement.downset_dp` (Piper's downset DP, Tarnawski et al.,
NeurIPS 2021): names and files are resolved here, the DP receives resolved objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError, InfeasibleError, OutOfMemoryError
from archplace.base.fields import check_as, member
from archplace.front import app
from archplace.front.layer_graph_file import load_layer_graph_file
from archplace.front.specs import ClusterSpec, HardwareSpec, Plan
from archplace.front.specs.plan import check_sp, enum_choices, fixed_zero_stage
from archplace.placement.downset_dp import dag_plan
from archplace.placement.layer_graph import LayerGraph
from archplace.placement.plan import RECOMPUTE_ORDER, SCHEDULE_ORDER, GradSync, PipelineSchedule, Recompute
from archplace.placement.result import PlanResult

DEFAULT_SCHEDULES = ("1f1b", "gpipe")
"""Schedules tried by default (the downset DP has no interleaved schedule)."""


def plan_layer_graph(graph: str | Path | Any, hardware: str, *, devices: int, global_batch: int,
                     micro_batch: int = 1, recompute: str = "none", schedule: str = "1f1b", tp: int = 1,
                     zero: bool = False, dp_overlap: bool = False, sp: bool = False,
                     seq_len: int | None = None, optimizer: str = "adam",
                     zero_stage: int | None = None, grad_reduce_dtype: str = "fp32",
                     dp_replicate: int = 1, grad_sync: str = "auto") -> PlanResult:
    """The fastest plan of a layer DAG (a two-tower or multi-modal model, or a profiled layer graph)
    on ``devices`` chips of ``hardware``: exact over pipeline depth, DP degree and stages (Piper's
    downset DP, Tarnawski et al., NeurIPS 2021; :func:`archplace.placement.downset_dp.dag_plan`).

    Args:
        graph: a :class:`~archplace.placement.layer_graph.LayerGraph`, or the path of a YAML/JSON layer
            graph file (:func:`~archplace.front.layer_graph_file.load_layer_graph_file`); its costs are per
            micro-batch of ``micro_batch`` samples and per TP rank of a ``tp``-wide group, SI units.
        hardware: hardware preset or YAML file (chip and cluster links).
        devices, global_batch: cluster size and samples per iteration.
        micro_batch, recompute, schedule, tp, zero_stage, dp_overlap, sp: the fixed plan
            options: schedule ``1f1b`` or ``gpipe``; zero_stage 0 or 1 (``zero=True`` is the
            older spelling of 1); sp only recorded (the costs already reflect it).
        grad_reduce_dtype: fp32 or bf16 gradients (:func:`archplace.front.api.plan`).
        dp_replicate: hybrid sharding's replicas r (:attr:`Plan.dp_replicate`; r > 1 needs
            zero_stage 1: the optimizer state sharded over dp / r ranks of each replica).
        grad_sync: when the gradients are reduced (:attr:`Plan.grad_sync`): auto or iteration
            (the same at ZeRO stages 0 and 1); micro_batch is refused (modelled for chains).
        seq_len: tokens per sample for tokens/s [the file's ``seq_len``, else 1].
        optimizer: ``adam`` or ``sgd``.

    Returns:
        The plan; ``plan.stage_layers`` names the layers of every stage.

    Raises:
        ConfigError: a bad file or option, a size out of range (:mod:`archplace.base.limits`), an
            unknown preset, the interleaved schedule, FLOP faster than the chip's peak.
        InfeasibleError: nothing fits (closest candidate and its memory against HBM named).
    """
    ClusterSpec(devices, global_batch)
    check_as(Plan, "micro_batch", micro_batch)
    check_as(Plan, "tp", tp)
    check_as(Plan, "dp_replicate", dp_replicate)
    if isinstance(graph, LayerGraph):
        layers, file_seq_len = graph, None
    else:
        layers, file_seq_len = load_layer_graph_file(graph)
    check_sp(sp, tp)
    tokens = limits.whole("seq_len", seq_len if seq_len is not None else file_seq_len or 1, 1,
                          limits.MAX_SEQ_LEN)
    stage = fixed_zero_stage(zero_stage, zero)
    _, setup = app.training_setup(HardwareSpec(hardware), devices=devices, global_batch=global_batch,
                                  seq_len=tokens, optimizer=optimizer, grad_reduce_dtype=grad_reduce_dtype)
    sync = member(GradSync, grad_sync, "grad_sync")
    return dag_plan(layers, replace(setup, dp_replicate=dp_replicate, grad_sync=sync),
                    micro_batch=micro_batch, recompute=enum_choices(Recompute, [recompute], "recompute")[0],
                    schedule=enum_choices(PipelineSchedule, [schedule], "schedule")[0], tp=tp,
                    zero_stage=stage, dp_overlap=dp_overlap, sp=sp)


def plan_layer_graph_options(graph: str | Path | LayerGraph, hardware: str, *, devices: int,
                             global_batch: int, tp: int = 1, micro_batch: int = 1,
                             seq_len: int | None = None, recomputes: Iterable[str] | None = None,
                             schedules: Iterable[str] | None = None,
                             zero_stages: Iterable[int] = (0, 1), optimizer: str = "adam",
                             grad_reduce_dtype: str = "fp32", top_k: int = 5,
                             dp_replicates: Iterable[int] = (1,),
                             grad_sync: str = "auto") -> list[PlanResult]:
    """The ``top_k`` best plans of a layer DAG over the recompute policies (default: all),
    schedules (default 1F1B and GPipe), ``zero_stages`` and DP overlap off and on, each exact
    (:func:`plan_layer_graph`), fastest first; ties go to fewer devices, fewer stages, less
    recompute, 1F1B, the lower ZeRO stage and no overlap.

    Args:
        graph: the layer DAG or its file; ``hardware``, ``devices``, ``global_batch``, ``tp``,
            ``micro_batch``, ``seq_len``, ``optimizer``, ``grad_reduce_dtype`` and ``grad_sync`` as
            in :func:`plan_layer_graph` (one TP width and micro-batch: those of the graph's costs).
        recomputes, schedules, zero_stages: the options searched, by name / number.
        dp_replicates: hybrid sharding's replica counts tried (each r > 1 with ZeRO stage 1 only,
            as :func:`plan_layer_graph` allows).
        top_k: plans returned (1..1,000; 5 by default, as ``--top``).

    Raises:
        ConfigError: a bad file or option (as :func:`plan_layer_graph`), top_k out of range.
        InfeasibleError: no option has a plan; the error of the most memory-frugal option
            (:class:`~archplace.base.errors.OutOfMemoryError` first, then more recompute, GPipe, higher
            ZeRO stage, overlap) is raised, with its numbers.
    """
    limits.whole("top_k", top_k, 1, limits.MAX_TOP)
    if not isinstance(graph, LayerGraph):
        graph, file_seq_len = load_layer_graph_file(graph)
        seq_len = seq_len if seq_len is not None else file_seq_len
    replicas = tuple(dict.fromkeys(check_as(Plan, "dp_replicate", r) for r in dp_replicates))
    if not replicas or (min(replicas) > 1 and 1 not in zero_stages):
        raise ConfigError("hybrid sharding (dp_replicate > 1) needs ZeRO stage 1 in a layer-graph plan; "
                          f"got dp_replicates {list(replicas)} with zero stages {list(zero_stages)}",
                          fields=("dp_replicate",))
    policies = list(dict.fromkeys(recomputes or [r.value for r in RECOMPUTE_ORDER]))
    kinds = list(dict.fromkeys(schedules or DEFAULT_SCHEDULES))
    found: list[tuple[tuple[Any, ...], PlanResult]] = []
    closest: tuple[tuple[Any, ...], InfeasibleError] | None = None
    for rc in policies:
        for kind in kinds:
            for z, r, overlap in itertools.product(zero_stages, replicas, (False, True)):
                if r > 1 and z != 1:
                    continue  # hybrid sharding needs ZeRO; a layer graph has stages 0 and 1
                try:
                    result = plan_layer_graph(
                        graph, hardware, devices=devices, global_batch=global_batch,
                        micro_batch=micro_batch, recompute=rc, schedule=kind, tp=tp, zero_stage=z,
                        dp_overlap=overlap, seq_len=seq_len, optimizer=optimizer,
                        grad_reduce_dtype=grad_reduce_dtype, dp_replicate=r, grad_sync=grad_sync)
                except InfeasibleError as exc:
                    frugal = (isinstance(exc, OutOfMemoryError),
                              RECOMPUTE_ORDER.index(Recompute(rc)), kind == "1f1b", z, not overlap, -r)
                    if closest is None or frugal > closest[0]:
                        closest = (frugal, exc)
                    continue
                plan = result.plan
                rank = (result.iteration_time_s, plan.devices, plan.pp,
                        RECOMPUTE_ORDER.index(plan.recompute), SCHEDULE_ORDER.index(plan.schedule),
                        plan.zero_stage, plan.dp_overlap, plan.dp_replicate)
                found.append((rank, result))
    if not found:
        assert closest is not None  # at least one option was tried
        raise closest[1]
    found.sort(key=lambda row: row[0])
    return [result for _, result in found[:top_k]]
