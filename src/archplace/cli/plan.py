"""``archplace plan``: the best parallel plans of a model on a cluster of known chips (or of a
layer-graph file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from archplace.base.errors import ConfigError
from archplace.base.outputs import check_output
from archplace.cli import runs as cli_runs
from archplace.cli.derived import cli_options, with_options
from archplace.cli.options import AsJson, plain_console
from archplace.cli.report import ReportFile, write_plan_report
from archplace.cli.runs import PLAN_SPECS
from archplace.front import api
from archplace.front.specs.plan import TOP_K
from archplace.placement.plan import RankOrder
from archplace.reporting.plan_tables import detail_tables, summary_table
from archplace.schemas import stamp


def _single(values: list[int] | None, option: str) -> int:
    if not values:
        return 1
    if len(values) > 1:
        raise ConfigError(f"{option} takes one value with --layer-graph (the costs are for one), "
                          f"got {len(values)}")
    return values[0]


LAYER_GRAPH_READS = ("hardware", "devices", "global_batch", "seq_len", "tp", "micro_batch", "recompute",
                     "schedule", "zero_stage", "optimizer", "top", "grad_reduce_dtype", "rank_order",
                     "dp_replicate", "grad_sync")
"""The options ``plan --layer-graph`` reads (the rank order only as its default); it refuses
any other option given (a layer graph file
carries its own costs, so the model's and the chip's options do not apply)."""


def _layer_graph_plans(ctx: typer.Context, layer_graph: Path, no_zero: bool,
                       options: dict[str, Any]) -> list[Any]:
    given = [option.field.flag for name, option in cli_options(*PLAN_SPECS).items()
             if name not in LAYER_GRAPH_READS and cli_runs.given(ctx, name)]
    if given:
        raise ConfigError(f"{', '.join(given)} applies to --model (a layer graph file carries "
                          "its own costs)")
    order = options["rank_order"]
    if order is not None and order.strip().lower() != RankOrder.TP_CP_EP_PP_DP.value:
        raise ConfigError(f"--rank-order {order}: layer-graph plans use the rank order "
                          f"{RankOrder.TP_CP_EP_PP_DP.value}")
    if any(options[name] is None for name in ("hardware", "devices", "global_batch")):
        raise ConfigError("plan --layer-graph needs --hardware, --devices and --global-batch")
    # a layer graph is planned with ZeRO stages 0 and 1 (dag_plan) unless others are asked for
    stages = api.parse_zero_stages(options["zero_stage"], (0,) if no_zero else (0, 1))
    return api.plan_layer_graph_options(
        layer_graph, options["hardware"], devices=options["devices"], global_batch=options["global_batch"],
        seq_len=options["seq_len"], tp=_single(options["tp"], "--tp"),
        micro_batch=_single(options["micro_batch"], "--micro-batch"), recomputes=options["recompute"],
        schedules=options["schedule"], zero_stages=stages, optimizer=options["optimizer"] or "adam",
        top_k=options["top"] or TOP_K, grad_reduce_dtype=options["grad_reduce_dtype"] or "fp32",
        dp_replicates=options["dp_replicate"] or (1,), grad_sync=options["grad_sync"] or "auto")


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app``."""

    @app.command()
    @with_options(*PLAN_SPECS)
    def plan(
        ctx: typer.Context,
        config: Annotated[Path | None, typer.Option(
            "--config", help="YAML file of the run (archplace config --example plan); options given "
                             "here override its fields.")] = None,
        layer_graph: Annotated[Path | None, typer.Option(
            "--layer-graph", help="YAML/JSON file of a layer DAG with its costs, instead of --model "
                                  "(one --tp and --micro-batch: those of the costs).")] = None,
        no_zero: Annotated[bool, typer.Option("--no-zero", help="Same as --zero-stage 0.")] = False,
        as_json: AsJson = False,
        report: ReportFile = None,
        **options: Any,
    ) -> None:
        """Best parallel plans (TP/CP/EP/ETP/PP/DP, micro-batch, recompute, schedule) of MODEL on
        DEVICES chips (or of a --layer-graph file)."""
        if layer_graph is not None and (options["model"] is not None or config is not None):
            raise ConfigError("give either --model or --layer-graph (a --config file is for --model)")
        if layer_graph is None and options["model"] is None and config is None:
            raise ConfigError("give either --model or --layer-graph")
        if no_zero and options["zero_stage"] is not None:
            raise ConfigError("give --no-zero or --zero-stage, not both")
        if report is not None:
            check_output(report, "--report")  # before the work; written by write_plan_report
        if layer_graph is not None:
            results = _layer_graph_plans(ctx, layer_graph, no_zero, options)
            write_plan_report(report, results, None)
            fields: dict[str, Any] = {}
            title = (f"best plans for {layer_graph} on {options['devices']} × {options['hardware']}, "
                     f"global batch {options['global_batch']}")
        else:
            run = cli_runs.plan_run(ctx, config, options, no_zero)
            results = api.plan_run(run)
            write_plan_report(report, results, run)
            fields = cli_runs.run_fields(run)
            title = (f"best plans for {run.model.model} on {run.cluster.devices} × {run.hardware.hardware}, "
                     f"global batch {run.cluster.global_batch}")
        if as_json:
            typer.echo(json.dumps(stamp("plan", {"plans": [r.to_dict() for r in results],
                                                 **results[0].to_dict(), **fields}), indent=2))
            return
        console = plain_console(160)
        console.print(summary_table(results, title))
        for table in detail_tables(results[0]):
            console.print(table)
