"""``archplace plan`` and ``archplace evaluate``: parallel plans on a cluster of known chips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from archplace import api, limits
from archplace.cli_options import AttentionOption, GradDtypeOption, KernelsOption, ZeroStagesOption
from archplace.errors import ConfigError, InfeasibleError, OutOfMemoryError
from archplace.placement.layer_graph_file import load_layer_graph_file
from archplace.placement.plan import RECOMPUTE_ORDER, SCHEDULE_ORDER, ZERO_STAGES, PlanResult, Recompute
from archplace.report.plan_tables import detail_tables, summary_table
from archplace.schemas import stamp

Model = Annotated[str, typer.Option(help="Model preset or path of an HF config.json.")]
Hardware = Annotated[str, typer.Option(help="Hardware preset or YAML file (with cluster links).")]
Devices = Annotated[int, typer.Option(help="Accelerators in the cluster.")]
GlobalBatch = Annotated[int, typer.Option("--global-batch", help="Samples per iteration.")]
SeqLen = Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")]
Optim = Annotated[str, typer.Option(help="adam (18 B/param) | sgd.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Fuse = Annotated[bool, typer.Option(
    "--fuse", help="Cost layers with element-wise ops fused into the matmul producing their input.")]
DpOverlap = Annotated[bool, typer.Option(
    "--dp-overlap", help="Reduce gradients bucket by bucket during the last backward pass (only what "
                         "is left after it is exposed); without it the whole reduction is exposed.")]


def _single(values: list[int] | None, option: str) -> int:
    if not values:
        return 1
    if len(values) > 1:
        raise ConfigError(f"{option} takes one value with --layer-graph (the costs are for one), "
                          f"got {len(values)}")
    return values[0]


def _plan_layer_graph(path: Path, hardware: str, *, devices: int, global_batch: int, seq_len: int | None,
                      tp: list[int] | None, micro_batch: list[int] | None, recompute: list[str] | None,
                      schedule: list[str] | None, zero_stages: tuple[int, ...], optimizer: str,
                      top: int, grad_reduce_dtype: str) -> list[PlanResult]:
    """The ``top`` best plans of a layer graph file over the recompute policies, schedules (1F1B and
    GPipe by default), ZeRO stages (0 and 1) and DP-overlap settings, each exact
    (``api.plan_layer_graph``).
    When nothing fits, the error of the most memory-frugal option is raised."""
    limits.whole("top", top, 1, limits.MAX_TOP)
    width, batch = _single(tp, "--tp"), _single(micro_batch, "--micro-batch")
    graph, file_seq_len = load_layer_graph_file(path)
    recomputes = list(dict.fromkeys(recompute or [r.value for r in RECOMPUTE_ORDER]))
    schedules = list(dict.fromkeys(schedule or ["1f1b", "gpipe"]))
    found: list[tuple[tuple[object, ...], PlanResult]] = []
    closest: tuple[tuple[object, ...], InfeasibleError] | None = None
    for rc in recomputes:
        for kind in schedules:
            for z in zero_stages:
                for overlap in (False, True):
                    try:
                        result = api.plan_layer_graph(
                            graph, hardware, devices=devices, global_batch=global_batch, micro_batch=batch,
                            recompute=rc, schedule=kind, tp=width, zero_stage=z, dp_overlap=overlap,
                            seq_len=seq_len if seq_len is not None else file_seq_len, optimizer=optimizer,
                            grad_reduce_dtype=grad_reduce_dtype)
                    except InfeasibleError as exc:
                        frugal = (isinstance(exc, OutOfMemoryError),
                                  RECOMPUTE_ORDER.index(Recompute(rc)), kind == "1f1b", z, not overlap)
                        if closest is None or frugal > closest[0]:
                            closest = (frugal, exc)
                        continue
                    plan = result.plan
                    rank = (result.iteration_time_s, plan.devices, plan.pp,
                            RECOMPUTE_ORDER.index(plan.recompute), SCHEDULE_ORDER.index(plan.schedule),
                            plan.zero_stage, plan.dp_overlap)
                    found.append((rank, result))
    if not found:
        assert closest is not None
        raise closest[1]
    found.sort(key=lambda row: row[0])
    return [result for _, result in found[:top]]


def register(app: typer.Typer) -> None:
    """Add the ``plan`` and ``evaluate`` commands to ``app``."""

    @app.command()
    def plan(
        ctx: typer.Context,
        hardware: Hardware, devices: Devices, global_batch: GlobalBatch,
        model: Annotated[str | None, typer.Option(
            help="Model preset or path of an HF config.json (or give --layer-graph).")] = None,
        layer_graph: Annotated[Path | None, typer.Option(
            "--layer-graph", help="YAML/JSON file of a layer DAG with its costs, instead of --model "
                                  "(one --tp and --micro-batch: those of the costs).")] = None,
        seq_len: SeqLen = None,
        tp: Annotated[list[int] | None, typer.Option(help="TP widths to try (repeatable) [all valid].")]
        = None,
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
        optimizer: Optim = "adam",
        top: Annotated[int, typer.Option(help="Plans to show.")] = 5,
        fuse: Fuse = False,
        attention: AttentionOption = "flash",
        kernels: KernelsOption = "fused",
        as_json: AsJson = False,
    ) -> None:
        """Best parallel plans (TP/PP/DP, micro-batch, recompute, schedule) of MODEL on DEVICES chips."""
        if (model is None) == (layer_graph is None):
            raise ConfigError("give either --model or --layer-graph")
        if no_zero and zero_stage is not None:
            raise ConfigError("give --no-zero or --zero-stage, not both")
        # a layer graph is planned with ZeRO stages 0 and 1 (dag_plan) unless others are asked for
        default = (0,) if no_zero else (0, 1) if layer_graph is not None else ZERO_STAGES
        stages = api.parse_zero_stages(zero_stage, default)
        if layer_graph is not None:
            given = [f"--{name}" for name in ("fuse", "attention", "kernels")
                     if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]
            if given:
                raise ConfigError(f"{', '.join(given)} applies to --model (a layer graph file carries "
                                  "its own costs)")
            results = _plan_layer_graph(layer_graph, hardware, devices=devices, global_batch=global_batch,
                                        seq_len=seq_len, tp=tp, micro_batch=micro_batch, recompute=recompute,
                                        schedule=schedule, zero_stages=stages, optimizer=optimizer, top=top,
                                        grad_reduce_dtype=grad_reduce_dtype)
            name = str(layer_graph)
        else:
            assert model is not None
            results = api.plan(model, hardware, devices=devices, global_batch=global_batch, seq_len=seq_len,
                               tps=tp, micro_batches=micro_batch, recomputes=recompute, schedules=schedule,
                               sp=not no_sp, zero_stages=stages, optimizer=optimizer, top_k=top, fuse=fuse,
                               grad_reduce_dtype=grad_reduce_dtype,
                               attention=attention, kernels=kernels)
            name = model
        if as_json:
            typer.echo(json.dumps(stamp("plan", {"plans": [r.to_dict() for r in results],
                                                 **results[0].to_dict()}), indent=2))
            return
        console = Console(width=160)
        console.print(summary_table(results, f"best plans for {name} on {devices} × {hardware}, "
                                              f"global batch {global_batch}"))
        for table in detail_tables(results[0]):
            console.print(table)

    @app.command()
    def evaluate(
        model: Model, hardware: Hardware, devices: Devices, global_batch: GlobalBatch,
        tp: Annotated[int, typer.Option(help="Tensor-parallel width.")],
        pp: Annotated[int, typer.Option(help="Pipeline stages.")],
        dp: Annotated[int, typer.Option(help="Data-parallel degree.")],
        micro_batch: Annotated[int, typer.Option(help="Samples per micro-batch.")],
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
        stages: Annotated[str | None, typer.Option(
            help="Layer ranges per stage, e.g. 0-12,13-25 [even split of the blocks].")] = None,
        optimizer: Optim = "adam",
        fuse: Fuse = False,
        attention: AttentionOption = "flash",
        kernels: KernelsOption = "fused",
        as_json: AsJson = False,
    ) -> None:
        """Iteration time, throughput, MFU and memory of one fixed plan."""
        result = api.evaluate(model, hardware, devices=devices, global_batch=global_batch, seq_len=seq_len,
                              tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, recompute=recompute,
                              schedule=schedule, chunks=chunks, sp=sp, zero=zero, dp_overlap=dp_overlap,
                              stages=stages, optimizer=optimizer, fuse=fuse, zero_stage=zero_stage,
                              grad_reduce_dtype=grad_reduce_dtype,
                              attention=attention, kernels=kernels)
        if as_json:
            typer.echo(json.dumps(stamp("evaluate", result.to_dict()), indent=2))
            return
        console = Console(width=160)
        console.print(summary_table([result], f"{model} on {devices} × {hardware}, "
                                               f"global batch {global_batch}"))
        for table in detail_tables(result):
            console.print(table)
