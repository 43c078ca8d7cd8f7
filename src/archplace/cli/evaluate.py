"""``archplace evaluate``: iteration time, throughput, MFU and memory of one fixed plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from archplace.base.outputs import check_output
from archplace.cli import runs as cli_runs
from archplace.cli.derived import with_options
from archplace.cli.options import AsJson, plain_console
from archplace.cli.report import ReportFile, write_plan_report
from archplace.cli.runs import EVALUATE_SPECS
from archplace.front import api
from archplace.reporting.plan_tables import detail_tables, summary_table
from archplace.schemas import stamp


def register(app: typer.Typer) -> None:
    """Add the ``evaluate`` command to ``app``."""

    @app.command()
    @with_options(*EVALUATE_SPECS)
    def evaluate(
        ctx: typer.Context,
        plan_file: Annotated[Path | None, typer.Option(
            "--plan", help="JSON or YAML file of the plan: the \"plan\" object plan --json writes, or its "
                           "whole output (model, hardware and cluster too); options given here "
                           "override its fields.")] = None,
        zero: Annotated[bool, typer.Option("--zero", help="Deprecated: --zero-stage 1.")] = False,
        as_json: AsJson = False,
        report: ReportFile = None,
        **options: Any,
    ) -> None:
        """Iteration time, throughput, MFU and memory of one fixed plan."""
        if report is not None:
            check_output(report, "--report")  # before the work; written by write_plan_report
        run = cli_runs.evaluate_run(ctx, plan_file, options, zero)
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
