"""``archplace calibrate``: fit a known chip's efficiency parameters to measured runs.

::

    archplace calibrate RUNS.yaml --hardware H [-o H-mine.yaml] [--fit gemm_sustained,hbm]
                        [--variant as-trained|flash+fused|eager+unfused]

The runs file format, the parameters and the output are described in docs/commands/calibrate.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from archplace.base.outputs import check_output
from archplace.calibration.parameters import DEFAULT_FIT, PARAMETERS, TABLE_FIT
from archplace.cli.options import say_wrote, table_console
from archplace.front import api

_FIT_HELP = (f"Parameters to fit, comma-separated: {' | '.join(PARAMETERS)} "
             f"(docs/commands/calibrate.md) [{','.join(TABLE_FIT)} on a chip with measured kernel "
             f"tables, else {','.join(DEFAULT_FIT)}].")


def calibrate(
    runs: Annotated[Path, typer.Argument(
        help="Measured runs (the format of tests/validation/published_runs.yaml).")],
    hardware: Annotated[str, typer.Option(help="Hardware preset or YAML file to calibrate.")],
    out: Annotated[Path | None, typer.Option(
        "-o", "--out", help="Write the calibrated hardware YAML here (read by --hardware).")] = None,
    fit: Annotated[str | None, typer.Option(help=_FIT_HELP)] = None,
    variant: Annotated[str, typer.Option(
        help="Graph variant the runs are evaluated with: as-trained | flash+fused | eager+unfused.")
    ] = "as-trained",
) -> None:
    """Fit a known chip's efficiency parameters (bounded least squares on log iteration time) to
    measured runs, and write the calibrated hardware file."""
    if out is not None:
        check_output(out, "--out")  # refused before the fit
    result = api.calibrate(runs, hardware, fit=fit, variant=variant, out=out)
    console = table_console(120)
    console.print(_parameter_table(result))
    console.print(_run_table(result))
    for line in (*result.skipped, *result.notes):
        console.print(line)
    if out is not None:
        say_wrote(out)


def _parameter_table(result: api.Calibration) -> Table:
    table = Table(title=f"{result.base}: {len(result.residuals)} runs, {result.evaluations} "
                        f"evaluations ({result.message})")
    for name in ("parameter", "low", "high", "start", "fitted"):
        table.add_column(name, justify="left" if name == "parameter" else "right")
    for p in result.parameters:
        table.add_row(p.name, f"{p.low:g}", f"{p.high:g}", f"{p.start:.4f}",
                      f"{p.value:.4f}" + (" (bound)" if p.at_bound else ""))
    return table


def _run_table(result: api.Calibration) -> Table:
    before, worst_before = result.errors("before")
    after, worst_after = result.errors("after")
    table = Table(title=f"mean |error| {before:.1%} -> {after:.1%}, max {worst_before:.1%} -> "
                        f"{worst_after:.1%} (in sample)")
    for name in ("case", "measured s", "before s", "after s", "error before", "error after"):
        table.add_column(name, justify="left" if name == "case" else "right")
    for r in result.residuals:
        table.add_row(r.case, f"{r.measured_s:.4g}", f"{r.before_s:.4g}", f"{r.after_s:.4g}",
                      f"{r.error_before:+.1%}", f"{r.error_after:+.1%}")
    return table


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to ``app``."""
    app.command(name="calibrate")(calibrate)
