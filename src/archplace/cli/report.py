"""``archplace report``: the interactive HTML report of a search store; and the ``--report``
option that ``plan`` and ``evaluate`` share (``search --report`` is in :mod:`archplace.cli.search`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from archplace.base.errors import ArchplaceError
from archplace.base.outputs import check_output
from archplace.cli.options import say_wrote
from archplace.front import api
from archplace.front.app import accelerator
from archplace.front.specs import EvaluateRun, HardwareSpec, PlanRun
from archplace.placement.result import PlanResult

ReportFile = Annotated[Path | None, typer.Option(
    "--report", help="Also write an interactive HTML report of the best plan here (pipeline timeline, "
                     "memory per device, time breakdown, a layer's schedule; opens without network).")]


def write_plan_report(path: Path | None, results: list[PlanResult],
                      run: PlanRun | EvaluateRun | None) -> None:
    """Write ``plan --report`` / ``evaluate --report`` when asked for (the caller checked the path
    with :func:`~archplace.base.outputs.check_output` before the work; it is checked again now, and
    its directories are made once the page is ready).

    Raises:
        ConfigError: the path is refused or cannot be written; the report cannot be made.
    """
    if path is not None:
        check_output(path, "--report")
        api.report_plan(results, path, run=run)
        say_wrote(path)


def report(
    store: Annotated[Path, typer.Argument(help="Result store written by search --store (only read).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The HTML file to write.")],
    search_id: Annotated[str | None, typer.Option(
        "--search", help="Only the search whose id starts with this [every search of the store].")] = None,
    top: Annotated[int, typer.Option(help="Designs in each table.")] = 10,
    baseline: Annotated[str, typer.Option(
        help="Preset evaluated for comparison, as search --baseline does ('none' to skip).")] = "tpuv4",
) -> None:
    """Write an interactive HTML report of a search store: designs against area and TDP, the best
    designs, and the best design's plan (pipeline timeline, memory, time breakdown, a layer's
    schedule)."""
    if top <= 0:
        raise ArchplaceError(f"--top must be positive, got {top}")
    if out.resolve() == store.resolve():
        raise ArchplaceError(f"--out {out}: that is the result store, which report only reads")
    api.results(store, search=search_id, top=1)  # a bad store is refused before anything is written
    chosen = None if baseline == "none" else baseline
    if chosen is not None:
        accelerator(HardwareSpec(chosen))  # so is an unknown baseline
    check_output(out, "--out")  # refused (another store above all) before the report is made
    api.report(store, out, search=search_id, top=top, baseline=chosen)
    say_wrote(out)


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""
    app.command(name="report")(report)
