"""``archplace plan``: the best parallel plans of a model on a cluster of known chips (or of a
layer-graph file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from archplace import api
from archplace.cli import runs as cli_runs
from archplace.cli.options import (
    AsJson,
    AttentionKernelOption,
    AttentionOption,
    CapacityFactorOption,
    CpsOption,
    Devices,
    EpsOption,
    EtpsOption,
    Fuse,
    GlobalBatch,
    GradDtypeOption,
    Hardware,
    KernelsOption,
    LoadImbalanceOption,
    Optim,
    PpCommOverlapOption,
    PrecisionsOption,
    RankOrderOption,
    SeqLen,
    TpCommOverlapOption,
    ZeroStagesOption,
    plain_console,
)
from archplace.cli.report import ReportFile, write_plan_report
from archplace.errors import ConfigError
from archplace.outputs import check_output
from archplace.reporting.plan_tables import detail_tables, summary_table
from archplace.schemas import stamp
from archplace.specs.plan import TOP_K


def _single(values: list[int] | None, option: str) -> int:
    if not values:
        return 1
    if len(values) > 1:
        raise ConfigError(f"{option} takes one value with --layer-graph (the costs are for one), "
                          f"got {len(values)}")
    return values[0]


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app``."""

    @app.command()
    def plan(
        ctx: typer.Context,
        hardware: Hardware = None, devices: Devices = None, global_batch: GlobalBatch = None,
        model: Annotated[str | None, typer.Option(
            help="Model preset or path of an HF config.json (or give --layer-graph).")] = None,
        config: Annotated[Path | None, typer.Option(
            "--config", help="YAML file of the run (archplace config --example plan); options given "
                             "here override its fields.")] = None,
        layer_graph: Annotated[Path | None, typer.Option(
            "--layer-graph", help="YAML/JSON file of a layer DAG with its costs, instead of --model "
                                  "(one --tp and --micro-batch: those of the costs).")] = None,
        seq_len: SeqLen = None,
        tp: Annotated[list[int] | None, typer.Option(help="TP widths to try (repeatable) [all valid].")]
        = None,
        cp: CpsOption = None,
        ep: EpsOption = None,
        etp: EtpsOption = None,
        micro_batch: Annotated[list[int] | None, typer.Option(help="Micro-batches (repeatable) [1 2 4 8].")]
        = None,
        recompute: Annotated[list[str] | None, typer.Option(help="none|selective|full (repeatable).")]
        = None,
        schedule: Annotated[list[str] | None, typer.Option(help="gpipe|1f1b|interleaved (repeatable).")]
        = None,
        no_sp: Annotated[bool, typer.Option("--no-sp", help="Never use sequence parallelism.")] = False,
        no_zero: Annotated[bool, typer.Option("--no-zero", help="Same as --zero-stage 0.")] = False,
        zero_stage: ZeroStagesOption = None,
        grad_reduce_dtype: GradDtypeOption = "fp32",
        precision: PrecisionsOption = None,
        optimizer: Optim = "adam",
        top: Annotated[int, typer.Option(help="Plans to show.")] = TOP_K,
        fuse: Fuse = False,
        attention: AttentionOption = "flash",
        attention_kernel: AttentionKernelOption = None,
        tp_comm_overlap: TpCommOverlapOption = None,
        pp_comm_overlap: PpCommOverlapOption = None,
        kernels: KernelsOption = "fused",
        capacity_factor: CapacityFactorOption = 1.0,
        expert_load_imbalance: LoadImbalanceOption = 1.0,
        rank_order: RankOrderOption = "tp-cp-ep-pp-dp",
        as_json: AsJson = False,
        report: ReportFile = None,
    ) -> None:
        """Best parallel plans (TP/CP/EP/ETP/PP/DP, micro-batch, recompute, schedule) of MODEL on
        DEVICES chips."""
        if layer_graph is not None and (model is not None or config is not None):
            raise ConfigError("give either --model or --layer-graph (a --config file is for --model)")
        if layer_graph is None and model is None and config is None:
            raise ConfigError("give either --model or --layer-graph")
        if no_zero and zero_stage is not None:
            raise ConfigError("give --no-zero or --zero-stage, not both")
        if report is not None:
            check_output(report, "--report")  # before the work; written by write_plan_report
        if layer_graph is not None:
            given = [f"--{name.replace('_', '-')}" for name in (
                "fuse", "attention", "attention_kernel", "tp_comm_overlap", "pp_comm_overlap", "kernels",
                "precision", "cp", "ep", "etp",
                "capacity_factor",
                "expert_load_imbalance")
                     if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]
            if given:
                raise ConfigError(f"{', '.join(given)} applies to --model (a layer graph file carries "
                                  "its own costs)")
            if rank_order.strip().lower() != "tp-cp-ep-pp-dp":
                raise ConfigError(f"--rank-order {rank_order}: layer-graph plans use the rank order "
                                  "tp-cp-ep-pp-dp")
            if hardware is None or devices is None or global_batch is None:
                raise ConfigError("plan --layer-graph needs --hardware, --devices and --global-batch")
            # a layer graph is planned with ZeRO stages 0 and 1 (dag_plan) unless others are asked for
            stages = api.parse_zero_stages(zero_stage, (0,) if no_zero else (0, 1))
            results = api.plan_layer_graph_options(
                layer_graph, hardware, devices=devices, global_batch=global_batch, seq_len=seq_len,
                tp=_single(tp, "--tp"), micro_batch=_single(micro_batch, "--micro-batch"),
                recomputes=recompute, schedules=schedule, zero_stages=stages, optimizer=optimizer,
                top_k=top, grad_reduce_dtype=grad_reduce_dtype)
            write_plan_report(report, results, None)
            if as_json:
                typer.echo(json.dumps(stamp("plan", {"plans": [r.to_dict() for r in results],
                                                     **results[0].to_dict()}),
                                      indent=2))
                return
            title = f"best plans for {layer_graph} on {devices} × {hardware}, global batch {global_batch}"
        else:
            run = cli_runs.plan_run(ctx, config, dict(
                model=model, seq_len=seq_len, attention=attention, kernels=kernels, fuse=fuse,
                attention_kernel=attention_kernel, tp_comm_overlap=tp_comm_overlap,
                pp_comm_overlap=pp_comm_overlap, capacity_factor=capacity_factor,
                expert_load_imbalance=expert_load_imbalance,
                rank_order=rank_order, hardware=hardware, devices=devices, global_batch=global_batch,
                tp=tp, cp=cp, ep=ep, etp=etp,
                micro_batch=micro_batch,
                recompute=recompute, schedule=schedule, no_sp=no_sp, grad_reduce_dtype=grad_reduce_dtype,
                precision=precision, optimizer=optimizer, top=top), zero_stage, no_zero)
            results = api.plan_run(run)
            write_plan_report(report, results, run)
            if as_json:
                typer.echo(json.dumps(stamp("plan", {"plans": [r.to_dict() for r in results],
                                                     **results[0].to_dict(), **cli_runs.run_fields(run)}),
                                      indent=2))
                return
            title = (f"best plans for {run.model.model} on {run.cluster.devices} × {run.hardware.hardware}, "
                     f"global batch {run.cluster.global_batch}")
        console = plain_console(160)
        console.print(summary_table(results, title))
        for table in detail_tables(results[0]):
            console.print(table)
