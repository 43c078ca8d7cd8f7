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

from archplace import api
from archplace.cli.options import (
    AttentionOption,
    CapacityFactorOption,
    GradDtypeOption,
    KernelsOption,
    LoadImbalanceOption,
    PrecisionsOption,
    SearchCpsOption,
    SearchEpsOption,
    SearchEtpsOption,
    ZeroStagesOption,
    plain_console,
    say_wrote,
    table_console,
)
from archplace.dse.objective import score
from archplace.dse.request import SearchResult
from archplace.dse.runner import Tick
from archplace.errors import ArchplaceError
from archplace.lifetime import Interrupted
from archplace.outputs import (
    check_image_output,
    check_output,
    check_outputs,
    prepare_output,
    write_text_output,
)
from archplace.reporting.tables import (
    search_table,
)
from archplace.schemas import stamp
from archplace.specs.search import SearchSpec, read_fields


def _same(value: Any) -> Any:
    return value


def _one(value: Any) -> tuple[Any, ...]:
    return (value,)


# search's options that are fields of a SearchSpec: option -> (field, the value as the field takes it)
_SEARCH_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "model": ("models", tuple), "micro_batch": ("micro_batches", tuple), "recompute": ("recompute", _one),
    "tp": ("tp", tuple), "zero_stage": ("zero_stages", _same), "store": ("store", str),
    "precision": ("precisions", tuple), "cp": ("cps", tuple), "ep": ("eps", tuple),
    "etp": ("etps", tuple),
    **{name: (name, _same) for name in (
        "devices", "global_batch", "space", "strategy", "trials", "seed", "seq_len", "cluster", "top",
        "jobs", "executor", "scheduler", "objective", "area_budget", "power_budget", "baseline",
        "exact_top", "per_model", "fuse", "attention", "kernels", "grad_reduce_dtype", "capacity_factor",
        "expert_load_imbalance")},
}
_REQUIRED = {"models": "--model", "devices": "--devices", "global_batch": "--global-batch"}



def search(
    ctx: typer.Context,
    model: Annotated[list[str] | None, typer.Option(
        help="Model preset or path of an HF config.json (repeatable: the objective is the geometric "
             "mean over the models, or see --per-model). Required, here or in --config.")] = None,
    devices: Annotated[int | None, typer.Option(
        help="Accelerators in the cluster. Required, here or in --config.")] = None,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="Samples per iteration. Required, here or in --config.")] = None,
    config: Annotated[Path | None, typer.Option(
        help="YAML file of the search's fields (see: archplace config --example search); the "
             "options given here override its fields.")] = None,
    space: Annotated[str, typer.Option(
        help="Search space: 'tiny', 'phaze', 'phaze-square' or a space YAML file.")] = "tiny",
    strategy: Annotated[str, typer.Option(
        help="exhaustive (provable pruning) | exhaustive-all | phaze | wham | optuna.")] = "exhaustive",
    trials: Annotated[int | None, typer.Option(help="Most designs to evaluate.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed (optuna).")] = 0,
    seq_len: Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")] = None,
    micro_batch: Annotated[list[int] | None, typer.Option(
        "--micro-batch", help="Micro-batch size to try (repeatable) [1 2 4 8].")] = None,
    recompute: Annotated[str, typer.Option(help="none | selective | full | both | all.")] = "both",
    tp: Annotated[list[int] | None, typer.Option(
        help="TP width to try (repeatable) [valid widths within a node].")] = None,
    cp: SearchCpsOption = None,
    ep: SearchEpsOption = None,
    etp: SearchEtpsOption = None,
    cluster: Annotated[str | None, typer.Option(
        help="Hardware or cluster preset (phaze-paper) or YAML whose links form the cluster "
             "[the space's base].")] = None,
    top: Annotated[int, typer.Option(help="Rows of the table.")] = 5,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Draw samples/s against area and TDP of every evaluated design (PNG, SVG or PDF).")] = None,
    report: Annotated[Path | None, typer.Option(
        help="Write an interactive HTML report here (designs against area and TDP, the best designs, "
             "the best plan's figures; opens without network).")] = None,
    jobs: Annotated[int | None, typer.Option(help="Worker processes [the usable CPUs].")] = None,
    executor: Annotated[str, typer.Option(help="local (process pool) | dask.")] = "local",
    scheduler: Annotated[str | None, typer.Option(
        help="Dask scheduler address, e.g. tcp://host:8786 (implies --executor dask).")] = None,
    store: Annotated[Path | None, typer.Option(
        help="SQLite file: results written as they finish; re-running resumes.")] = None,
    objective: Annotated[str, typer.Option(help="throughput | throughput-per-watt | pareto.")] = "throughput",
    area_budget: Annotated[str | None, typer.Option(help="Largest die area, e.g. '280 mm2'.")] = None,
    power_budget: Annotated[str | None, typer.Option(help="Largest TDP per chip, e.g. '300 W'.")] = None,
    baseline: Annotated[str, typer.Option(help="Preset to compare with ('none' to skip).")] = "tpuv4",
    exact_top: Annotated[int | None, typer.Option(
        help="Re-evaluate the best K designs with exact CP-SAT layer schedules [--top: the designs "
             "shown].")] = None,
    per_model: Annotated[bool, typer.Option(
        "--per-model", help="With several --model: search each model on its own.")] = False,
    fuse: Annotated[bool, typer.Option(
        "--fuse", help="Cost layers with element-wise ops fused into the matmul producing their input.")]
    = False,
    attention: AttentionOption = "flash",
    kernels: KernelsOption = "fused",
    capacity_factor: CapacityFactorOption = 1.0,
    expert_load_imbalance: LoadImbalanceOption = 1.0,
    zero_stage: ZeroStagesOption = None,
    grad_reduce_dtype: GradDtypeOption = "fp32",
    precision: PrecisionsOption = None,
) -> None:
    """Find the accelerator design (and its parallel plan) that trains MODEL fastest."""
    spec = _search_spec(ctx, config)
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


def _search_spec(ctx: typer.Context, config: Path | None) -> SearchSpec:
    """The search's spec: the fields of the ``--config`` file (if any), overridden by the options
    given on the command line (an option left at its default overrides nothing)."""
    values = read_fields(config) if config is not None else {}
    for name, (field, convert) in _SEARCH_FIELDS.items():
        if _given(ctx, name):
            values[field] = convert(ctx.params[name])
    for field, option in _REQUIRED.items():
        if field not in values:
            raise ArchplaceError(f"{option} is required (or {field}: in a --config file)")
    return SearchSpec(**values)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (on the command line), not left at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


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
    :func:`~archplace.outputs.prepare_output`), with a one-line error when it cannot be written."""
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
