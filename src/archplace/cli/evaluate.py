"""``archplace evaluate``: iteration time, throughput, MFU and memory of one fixed plan."""

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
    CpOption,
    Devices,
    DpOverlap,
    EpOption,
    EtpOption,
    Fuse,
    GlobalBatch,
    GradDtypeOption,
    Hardware,
    KernelsOption,
    LoadImbalanceOption,
    Model,
    Optim,
    PpCommOverlapOption,
    PrecisionOption,
    RankOrderOption,
    SeqLen,
    TpCommOverlapOption,
    plain_console,
)
from archplace.cli.report import ReportFile, write_plan_report
from archplace.outputs import check_output
from archplace.reporting.plan_tables import detail_tables, summary_table
from archplace.schemas import stamp


def register(app: typer.Typer) -> None:
    """Add the ``evaluate`` command to ``app``."""

    @app.command()
    def evaluate(
        ctx: typer.Context,
        model: Model = None, hardware: Hardware = None, devices: Devices = None,
        global_batch: GlobalBatch = None,
        plan_file: Annotated[Path | None, typer.Option(
            "--plan", help="JSON or YAML file of the plan: the \"plan\" object plan --json writes, or its "
                           "whole output (model, hardware and cluster too); options given here "
                           "override its fields.")] = None,
        tp: Annotated[int | None, typer.Option(help="Tensor-parallel width.")] = None,
        cp: CpOption = 1,
        ep: EpOption = 1,
        etp: EtpOption = 1,
        pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
        dp: Annotated[int | None, typer.Option(help="Data-parallel degree.")] = None,
        micro_batch: Annotated[int | None, typer.Option(help="Samples per micro-batch.")] = None,
        seq_len: SeqLen = None,
        recompute: Annotated[str, typer.Option(help="none | selective | full.")] = "none",
        schedule: Annotated[str, typer.Option(help="gpipe | 1f1b | interleaved.")] = "1f1b",
        chunks: Annotated[int, typer.Option(help="Model chunks per device (interleaved).")] = 1,
        sp: Annotated[bool, typer.Option("--sp", help="Sequence parallelism.")] = False,
        zero_stage: Annotated[int | None, typer.Option(
            "--zero-stage", help="ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + parameters (FSDP) "
                                 "[0].")] = None,
        zero: Annotated[bool, typer.Option("--zero", help="Deprecated: --zero-stage 1.")] = False,
        dp_overlap: DpOverlap = False,
        grad_reduce_dtype: GradDtypeOption = "fp32",
        precision: PrecisionOption = "bf16",
        stages: Annotated[str | None, typer.Option(
            help="Layer ranges per stage, e.g. 0-12,13-25 [even split of the blocks].")] = None,
        optimizer: Optim = "adam",
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
        """Iteration time, throughput, MFU and memory of one fixed plan."""
        if report is not None:
            check_output(report, "--report")  # before the work; written by write_plan_report
        run = cli_runs.evaluate_run(ctx, plan_file, dict(
            model=model, seq_len=seq_len, attention=attention, kernels=kernels, fuse=fuse, hardware=hardware,
            attention_kernel=attention_kernel, tp_comm_overlap=tp_comm_overlap,
            pp_comm_overlap=pp_comm_overlap,
            capacity_factor=capacity_factor, expert_load_imbalance=expert_load_imbalance,
            rank_order=rank_order,
            devices=devices, global_batch=global_batch, tp=tp, cp=cp, ep=ep, etp=etp, pp=pp, dp=dp,
            micro_batch=micro_batch,
            recompute=recompute, schedule=schedule, chunks=chunks, sp=sp, dp_overlap=dp_overlap,
            grad_reduce_dtype=grad_reduce_dtype, precision=precision, optimizer=optimizer, stages=stages),
            zero_stage, zero)
        result = api.evaluate_run(run)
        write_plan_report(report, [result], run)
        if as_json:
            typer.echo(json.dumps(stamp("evaluate", {**result.to_dict(), **cli_runs.run_fields(run)}),
                                  indent=2))
            return
        console = plain_console(160)
        title = (f"{run.model.model} on {run.cluster.devices} × {run.hardware.hardware}, "
                 f"global batch {run.cluster.global_batch}")
        console.print(summary_table([result], title))
        for table in detail_tables(result):
            console.print(table)
