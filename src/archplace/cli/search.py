"""``archplace search``: the best accelerator designs of a space for one or more models, with
their plans; its options over a ``--config`` file, its progress bar and its outputs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from archplace.base.errors import ArchplaceError
from archplace.base.lifetime import Interrupted
from archplace.base.outputs import (
    check_image_output,
    check_output,
    check_outputs,
    prepare_output,
    write_text_output,
)
from archplace.cli.derived import cli_options, fields_of, with_options
from archplace.cli.options import plain_console, say_wrote, table_console
from archplace.cli.runs import given
from archplace.dse.objective import score
from archplace.dse.request import SearchResult
from archplace.dse.runner import Tick
from archplace.front import api
from archplace.front.specs.search import SearchSpec, read_fields
from archplace.reporting.tables import (
    search_table,
)
from archplace.schemas import stamp

_REQUIRED = {"models": "--model", "devices": "--devices", "global_batch": "--global-batch"}


@with_options(SearchSpec)
def search(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(
        help="YAML file of the search's fields (see: archplace config --example search); the "
             "options given here override its fields.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Draw samples/s against area and TDP of every evaluated design (PNG, SVG or PDF).")] = None,
    report: Annotated[Path | None, typer.Option(
        help="Write an interactive HTML report here (designs against area and TDP, the best designs, "
             "the best plan's figures; opens without network).")] = None,
    **options: Any,
) -> None:
    """Find the accelerator design (and its parallel plan) that trains MODEL fastest."""
    spec = _search_spec(ctx, config, options)
    outputs = {"--out": out, "--plot": plot, "--report": report}
    try:
        _check_not_the_store(Path(spec.store) if spec.store else None, outputs)
        check_outputs(outputs)  # now, not after the search
        plots = [] if plot is None else _plot_paths(plot, [names[0] for names in spec.groups])
        for path in plots:
            check_image_output(path, "--plot")
        with _search_progress() as advance:
            outcomes = (api.search_each(spec, progress=advance) if spec.per_model
                        else [api.search(spec, progress=advance)])
    except api.SearchInterrupted as exc:  # the workers are stopped by now: say what is kept
        raise Interrupted(_interrupted_search(exc)) from None
    except Interrupted as exc:  # before the search began: nothing evaluated, nothing stored
        if exc.detail:
            raise
        store = Path(spec.store) if spec.store else None
        raise Interrupted(_interrupted_search(api.SearchInterrupted(0, store, None))) from None
    for result in outcomes:
        table_console(200).print(search_table(result, spec.top))
    failed = next((r for r in outcomes if r.best is None), None)
    # On failure the files are still written (the JSON says why each design failed), but the
    # one line on stderr is the error.
    say = say_wrote if failed is None else (lambda _: None)
    if out is not None:
        data = stamp("search", outcomes[0].to_dict() if len(outcomes) == 1
                     else {"per_model": [r.to_dict() for r in outcomes]})
        write_text_output(out, "--out", json.dumps(data, indent=2) + "\n")
        say(out)
    for result, path in zip(outcomes, plots, strict=True) if plots else ():
        draw_design_space(result, path)
        say(path)
    if report is not None:
        check_output(report, "--report")  # again, after the search; its directories made when written
        api.report_search(outcomes, report, spec=spec, top=spec.top)
        say(report)
    if failed is not None:
        reason = failed.evaluated[0].infeasible_reason if failed.evaluated else "no design"
        raise ArchplaceError(f"no design of the space can train {failed.model}: {reason}")


def _search_spec(ctx: typer.Context, config: Path | None, options: dict[str, Any]) -> SearchSpec:
    """The search's spec: the fields of the ``--config`` file (if any), overridden by the options
    given on the command line (an option left at its default overrides nothing)."""
    values = read_fields(config) if config is not None else {}
    fields = fields_of(cli_options(SearchSpec))
    for name, value in options.items():
        if given(ctx, name):
            values.update(fields(name, value))
    for field, option in _REQUIRED.items():
        if field not in values:
            raise ArchplaceError(f"{option} is required (or {field}: in a --config file)")
    return SearchSpec(**values)


def _interrupted_search(exc: api.SearchInterrupted) -> str:
    """What an interrupted search keeps, in the CLI's words."""
    if exc.store is None:
        return f"{_designs(exc.evaluated)} evaluated; use --store FILE to keep results across runs"
    if exc.stored is None:
        return f"nothing stored in {exc.store}"
    return f"{_designs(exc.stored)} stored in {exc.store}; re-run the same command to resume"


def _designs(count: int) -> str:
    return f"{count} design{'' if count == 1 else 's'}"


def _check_not_the_store(store: Path | None, outputs: dict[str, Path | None]) -> None:
    """Refuse an output path that names the result store itself (writing it would destroy the
    store)."""
    if store is None:
        return
    for option, path in outputs.items():
        if path is not None and path.resolve() == store.resolve():
            raise ArchplaceError(f"{option} {path} is the result store (--store): choose another file")


def _plot_paths(plot: Path, models: list[str]) -> list[Path]:
    """``plot`` itself for one search, or with --per-model one file per model (the searches'
    ``models``, in order): ``name-MODEL.suffix``."""
    if len(models) == 1:
        return [plot]
    return [plot.with_name(f"{plot.stem}-{Path(model).name}{plot.suffix}") for model in models]


def draw_design_space(source: SearchResult | Path, path: Path, search: str | None = None) -> None:
    """:func:`api.plot_design_space` onto ``path`` (checked again and its directories made first:
    :func:`~archplace.base.outputs.prepare_output`), with a one-line error when it cannot be written."""
    prepare_output(path, "--plot")
    try:
        api.plot_design_space(source if isinstance(source, SearchResult) else str(source), path,
                              search=search)
    except (OSError, ValueError) as exc:  # ValueError: a suffix matplotlib cannot write
        raise ArchplaceError(f"--plot {path}: cannot write ({exc})") from None


@contextmanager
def _search_progress() -> Iterator[Callable[[Tick], None]]:
    """A progress bar on stderr: designs done (evaluated + pruned) of the space, designs/s,
    pruned count and the best so far; it starts again for each search of a per-model run."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}", markup=False), TimeElapsedColumn())  # names: text
    console = plain_console(stderr=True)
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("designs", total=None, status="")
        current = [0]  # the search the bar shows

        def advance(tick: Tick) -> None:
            if tick.search != current[0]:
                current[0] = tick.search
                bar.reset(task)
            elapsed = bar.tasks[0].elapsed or 0.0
            rate = tick.evaluated / elapsed if elapsed else 0.0
            best = (f"best {tick.best.accelerator.name} {score(tick.best, tick.objective):,.4g}"
                    if tick.best is not None else "nothing fits yet")
            bounded = f"{tick.bounded} core configurations bounded, " if tick.bounded else ""
            bar.update(task, total=tick.total, completed=tick.evaluated + tick.pruned,
                       status=f"{bounded}{rate:.1f} designs/s, {tick.pruned} pruned, {best}")

        yield advance



def register(app: typer.Typer) -> None:
    """Add the ``search`` command to ``app``."""
    app.command(name="search")(search)
