"""``archplace results``: the designs a search store holds, as a table, CSV or a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from archplace.base.errors import ArchplaceError
from archplace.base.outputs import (
    check_image_output,
    check_outputs,
    write_output,
)
from archplace.cli.options import (
    say_wrote,
    table_console,
)
from archplace.cli.search import draw_design_space
from archplace.front import api
from archplace.reporting.tables import (
    results_table,
    write_results_csv,
)


def results(
    store: Annotated[Path, typer.Argument(help="Result store written by search --store (only read).")],
    top: Annotated[int, typer.Option(help="Rows to show per search.")] = 10,
    search_id: Annotated[str | None, typer.Option(
        "--search", help="Only the search whose id (the search column) starts with this.")] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write every row as CSV here.")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Draw samples/s against area and TDP of every design of the search (PNG, SVG or PDF).")] = None,
) -> None:
    """Show the results in a search store: each search's designs, best first by its objective."""
    if top <= 0:
        raise ArchplaceError(f"--top must be positive, got {top}")
    for path, option in ((csv, "--csv"), (plot, "--plot")):
        if path is not None and path.resolve() == store.resolve():
            raise ArchplaceError(f"{option} {path}: that is the result store, which results only reads")
    rows = api.results(store, search=search_id)  # a bad store is refused before any output is made
    searches = list(dict.fromkeys(row.search for row in rows))
    if plot is not None and len(searches) > 1:
        raise ArchplaceError(f"--plot draws one search, and {store} holds {len(searches)} "
                             f"({', '.join(s.short_id for s in searches)}): choose one with --search ID")
    check_outputs({"--csv": csv, "--plot": plot})
    if plot is not None:
        check_image_output(plot, "--plot")
    table_console(200).print(results_table(rows, str(store), top))
    if csv is not None:
        write_output(csv, "--csv", lambda handle: write_results_csv(rows, handle))
        say_wrote(csv)
    if plot is not None:
        draw_design_space(store, plot, search=search_id)
        say_wrote(plot)



def register(app: typer.Typer) -> None:
    """Add the ``results`` command to ``app``."""
    app.command(name="results")(results)
