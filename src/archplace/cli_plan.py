"""``archplace plan`` and ``archplace evaluate``: parallel plans on a cluster of known chips."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from archplace import api
from archplace.placement.plan import PlanResult

_GIB = 2.0**30

Model = Annotated[str, typer.Option(help="Model preset or path of an HF config.json.")]
Hardware = Annotated[str, typer.Option(help="Hardware preset or YAML file (with cluster links).")]
Devices = Annotated[int, typer.Option(help="Accelerators in the cluster.")]
GlobalBatch = Annotated[int, typer.Option("--global-batch", help="Samples per iteration.")]
SeqLen = Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")]
Optim = Annotated[str, typer.Option(help="adam (18 B/param) | sgd.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _plan_label(result: PlanResult) -> str:
    p = result.plan
    parts = [f"tp{p.tp} pp{p.pp} dp{p.dp}", f"b={p.micro_batch}", p.schedule.value]
    if p.chunks > 1:
        parts.append(f"v={p.chunks}")
    parts.append(f"recompute={p.recompute.value}")
    parts += [flag for flag, on in (("sp", p.sp), ("zero", p.zero), ("overlap", p.dp_overlap)) if on]
    return " ".join(parts)


def _summary_table(results: list[PlanResult], title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "plan", "iteration s", "samples/s", "tokens/s", "MFU", "max memory GiB"):
        table.add_column(column, justify="left" if column == "plan" else "right")
    for i, r in enumerate(results, 1):
        peak = max((m.total for m in r.memory), default=0.0)
        table.add_row(str(i), _plan_label(r), f"{r.iteration_time_s:.3f}",
                      f"{r.throughput_samples_per_s:,.1f}", f"{r.tokens_per_s:,.0f}", f"{r.mfu:.1%}",
                      f"{peak / _GIB:.1f}")
    return table


def _detail_tables(result: PlanResult) -> list[Table]:
    breakdown = Table(title="iteration time breakdown")
    breakdown.add_column("part")
    breakdown.add_column("seconds", justify="right")
    breakdown.add_column("share", justify="right")
    for part, seconds in result.breakdown_s.items():
        breakdown.add_row(part, f"{seconds:.4f}", f"{seconds / result.iteration_time_s:.1%}")
    memory = Table(title="memory per device (GiB)")
    for column in ("stage", "layers", "weights", "gradients", "optimizer", "activations", "total"):
        memory.add_column(column, justify="right")
    stages, pp = result.plan.stages, result.plan.pp
    for m in result.memory:  # interleaved: device j holds chunks j, j + pp, j + 2 pp, ...
        layers = ", ".join(f"{first}–{last}" for first, last in stages[m.stage::pp])
        memory.add_row(str(m.stage), layers, *(f"{v / _GIB:.2f}" for v in
                                                 (m.weights, m.gradients, m.optimizer, m.activations,
                                                  m.total)))
    return [breakdown, memory]


def register(app: typer.Typer) -> None:
    """Add the ``plan`` and ``evaluate`` commands to ``app``."""

    @app.command()
    def plan(
        model: Model, hardware: Hardware, devices: Devices, global_batch: GlobalBatch,
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
        no_zero: Annotated[bool, typer.Option("--no-zero", help="Never shard the optimizer.")] = False,
        optimizer: Optim = "adam",
        top: Annotated[int, typer.Option(help="Plans to show.")] = 5,
        as_json: AsJson = False,
    ) -> None:
        """Best parallel plans (TP/PP/DP, micro-batch, recompute, schedule) of MODEL on DEVICES chips."""
        results = api.plan(model, hardware, devices=devices, global_batch=global_batch, seq_len=seq_len,
                           tps=tp, micro_batches=micro_batch, recomputes=recompute, schedules=schedule,
                           sp=not no_sp, zero=not no_zero, optimizer=optimizer, top_k=top)
        if as_json:
            typer.echo(json.dumps({"plans": [r.to_dict() for r in results], **results[0].to_dict()},
                                  indent=2))
            return
        console = Console(width=160)
        console.print(_summary_table(results, f"best plans for {model} on {devices} × {hardware}, "
                                              f"global batch {global_batch}"))
        for table in _detail_tables(results[0]):
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
        zero: Annotated[bool, typer.Option("--zero", help="ZeRO-1 optimizer sharding.")] = False,
        dp_overlap: Annotated[bool, typer.Option("--dp-overlap", help="Overlap the DP all-reduce.")]
        = False,
        stages: Annotated[str | None, typer.Option(
            help="Layer ranges per stage, e.g. 0-12,13-25 [even split of the blocks].")] = None,
        optimizer: Optim = "adam",
        as_json: AsJson = False,
    ) -> None:
        """Iteration time, throughput, MFU and memory of one fixed plan."""
        result = api.evaluate(model, hardware, devices=devices, global_batch=global_batch, seq_len=seq_len,
                              tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, recompute=recompute,
                              schedule=schedule, chunks=chunks, sp=sp, zero=zero, dp_overlap=dp_overlap,
                              stages=stages, optimizer=optimizer)
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
            return
        console = Console(width=160)
        console.print(_summary_table([result], f"{model} on {devices} × {hardware}, "
                                               f"global batch {global_batch}"))
        for table in _detail_tables(result):
            console.print(table)
