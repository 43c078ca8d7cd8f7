"""PHAZE's experiment, reproduced with archplace (issue 15).

PHAZE (Wang et al., "Integrated Hardware Architecture and Device Placement Search", ICML 2024)
searches an accelerator's architecture jointly with the parallel placement of language models.
Its public code (github.com/msr-fiddle/phaze, read at commits fed7cde and c10bf7f) sets the
experiment this script runs with archplace's public API:

* **Models** (``scripts/*.sh`` and ``GraphExtractor/models/*.py``): BERT-large (``bertlarge``,
  sequence 512), GPT-2 XL (``gpt2``, ``GPT2Model.from_pretrained("gpt2-xl")``, sequence 1024),
  OPT-350M (``opt``, ``facebook/opt-350m``, sequence 2048), Llama 2 7B (``llama2``,
  ``meta-llama/Llama-2-7b-hf``, sequence 4096) and Megatron GPT-3 175B (``megatrongpt3``: 96
  layers, hidden 12288, 96 heads, sequence 2048).  archplace's presets ``bert-large``,
  ``gpt2-xl``, ``opt-350m``, ``llama2-7b`` and ``gpt3-175b`` are these models at these
  sequence lengths (their default context lengths).
* **TP widths**: only the Megatron models are split by tensor parallelism.  ``scripts/gpt3.sh``
  passes ``--phaze_max_tmp_width 8``; ``GraphExtractor/graph_extract.py`` (``get_tmp_widths``)
  enumerates the widths 1, 2, 4, 8 and skips those below 4 for ``megatrongpt3``: GPT-3 at TP 4
  and 8.  The Hugging Face models are traced at TP 1 only (``max_tmp_width`` defaults to 1,
  ``arguments.py``).  This script searches the same widths (:data:`PHAZE_MODELS`).
* **Cluster and batch**: ``Solver/solver.py`` sets ``global_batch_size = 4096``;
  ``Estimator/architecture.py`` sets ``num_accelerators = 1024`` and one
  ``bandwidth = 4 * 1024**3`` bytes/s for every transfer -- archplace's cluster preset
  ``phaze-paper`` (``src/archplace/hw/clusters/phaze-paper.yaml``).  The other link
  setting is archplace's default for the space: the base design's realistic TPUv4 ICI links
  (300 GB/s, 4 chips per node, 3D torus; the ``phaze-ref`` preset).
* **Space**: ``--space phaze`` is PHAZE's own enumeration, 29,360 core configurations x HBM
  {32, 64, 80} GiB = 88,080 designs (``src/archplace/hw/spaces/phaze.yaml``).
* **Multi-model objective** (``Solver/solver.py``, ``find_config_across_models``): PHAZE keeps
  the designs on which every model fits and takes the one with the highest *arithmetic* mean of
  the models' throughputs (samples/s).  archplace's multi-model search
  (:class:`archplace.DesignResult`, ``combine``) also drops a design on which any model does not
  fit, but ranks by the *geometric* mean of the throughputs, which does not depend on each
  model's scale (PHAZE's arithmetic mean is dominated by the model with the most samples/s,
  BERT-large).  The joint rows below are archplace's geometric-mean optimum, not PHAZE's
  arithmetic-mean one; this script does not add a second objective.  Also unlike PHAZE, which
  searches one micro-batch, one HBM size and one recompute setting per run and then keeps the
  run whose *first* model is fastest (``phaze.py``), archplace searches micro-batches {1, 2, 4,
  8}, recompute none/full and the three HBM sizes within one search.
* **Joint search and TP**: archplace's multi-model search tries one set of TP widths for all its
  models, each width dividing every model's heads; GPT-2 XL's 25 heads admit neither 4 nor 8,
  and PHAZE runs GPT-3 only at TP 4 and 8.  So the joint search holds the models at TP 1
  (bert-large, gpt2-xl, opt-350m, llama2-7b: the four Hugging Face models), and GPT-3 is searched
  on its own with its widths.  Models are grouped by their TP widths; every group of two or more
  models gets one joint search.

The rest of the plan search is archplace's default, the same for every design and for the
baseline: micro-batch 1, 2, 4, 8, recompute none or full, the 1F1B, interleaved and GPipe
schedules, ZeRO stages 0 to 3, DP overlap on and off, every pipeline depth and stage split.
PHAZE's solver (``Solver/solver.py``) uses PipeDream-flush (1F1B), which archplace's wider plan
search includes, and prices the optimizer state of SGD (``optimizer_type = "SGD"``), where
archplace's search prices Adam's (more memory per parameter).

For each link setting the script runs the joint search and one search per model (strategy
``exhaustive``, provably optimal), and prints per model: the best design, its plan, its
samples/s, and its throughput over the ``tpuv4`` preset's under the same cluster, model and plan
search (``best / tpuv4``).  Every result is kept in a SQLite result store as it finishes
(``--store``): an interrupted run resumes from it when run again with the same options.

Run (from the repository root)::

    .venv/bin/python benchmarks/reproduce_phaze.py --quick --jobs 2 --store quick.db --out quick.json
    nice -n 10 .venv/bin/python benchmarks/reproduce_phaze.py --jobs 2 --store phaze-full.db --out full.json

``--quick`` searches a 48-design sub-space of ``phaze`` (:data:`QUICK_SPACE`, written next to the
store) instead of the whole space: about a minute with realistic links and 20 with
``phaze-paper``'s on 2 busy cores.  Over the whole space the six searches with realistic links
take about 50 minutes on 2 busy cores; those with ``phaze-paper`` links take days, because
with 4 GiB/s links the iteration is mostly communication, which the pruning bound
(:mod:`archplace.dse.bounds`: computation and memory only) does not see, so almost nothing
is pruned.  The result store keeps every finished design, so an interrupted run (Ctrl-C) resumes
where it stopped.  ``docs/validation.md`` ("PHAZE's experiment") shows the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from archplace import (
    ArchplaceError,
    ConfigError,
    DesignResult,
    PlanResult,
    SearchResult,
    SearchSpec,
    Tick,
)
from archplace.front import api

DEVICES = 1024
"""PHAZE's ``num_accelerators`` (Estimator/architecture.py)."""
GLOBAL_BATCH = 4096
"""PHAZE's ``global_batch_size`` (Solver/solver.py)."""
BASELINE = "tpuv4"

PHAZE_MODELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "bert-large": ("bertlarge", (1,)),
    "gpt2-xl": ("gpt2", (1,)),
    "opt-350m": ("opt", (1,)),
    "llama2-7b": ("llama2", (1,)),
    "gpt3-175b": ("megatrongpt3", (4, 8)),
}
"""archplace preset -> (PHAZE's model name, the TP widths PHAZE searches for it)."""

LINKS: dict[str, str | None] = {"realistic": None, "phaze-paper": "phaze-paper"}
"""Link settings: a label -> the cluster preset (None: the space's base design's links)."""

QUICK_SPACE = """\
# A 48-design sub-space of PHAZE's space for a run of a few minutes (benchmarks/reproduce_phaze.py
# --quick): the phaze space's base and area rule; 8, 16 or 64 arrays of 64 or 128 rows and
# columns, 2, 64 or 256 vector cores, 32 MiB of buffer, 32 or 80 GiB of HBM.
source: "sub-space of the phaze space (benchmarks/reproduce_phaze.py --quick)"
base: phaze-ref
tensor_cores: [8, 16, 64]
array_rows: [64, 128]
array_cols: [64, 128]
vector_cores: [2, 64, 256]
buffer: [32 MiB]
hbm: [32 GiB, 80 GiB]
vector_lanes_per_col: 1
area_min_fraction: 0.3
area_floor_waived_for: [tensor_cores, vector_cores]
"""


@dataclass(frozen=True)
class Row:
    """One line of the table: a model's best design in one search under one link setting.

    Attributes:
        links: the link setting's label (a key of :data:`LINKS`).
        search: ``joint`` (the model's share of the joint search's best design) or ``per model``.
        model: the model preset.
        design: the best design's name ("" when nothing fits).
        area_mm2: its die area.
        plan: its best plan for this model, in one line.
        samples_per_s: that plan's throughput (samples/s; 0 when nothing fits).
        baseline_samples_per_s: the tpuv4 preset's best throughput for this model under the same
            cluster and plan search (0 when nothing fits on it).
        relative: ``samples_per_s / baseline_samples_per_s`` (None without both).
    """

    links: str
    search: str
    model: str
    design: str
    area_mm2: float
    plan: str
    samples_per_s: float
    baseline_samples_per_s: float
    relative: float | None


@dataclass(frozen=True)
class SearchRun:
    """One search of the reproduction: its link setting, models, result and wall time (s)."""

    links: str
    search: str
    models: tuple[str, ...]
    result: SearchResult
    wall_s: float


def plan_text(result: PlanResult) -> str:
    """``tp4 pp8 dp32 b=1 1f1b recompute=full zero1 overlap``: one line naming a plan."""
    p = result.plan
    parts = [f"tp{p.tp} pp{p.pp} dp{p.dp}", f"b={p.micro_batch}", p.schedule.value]
    if p.chunks > 1:
        parts.append(f"v={p.chunks}")
    parts.append(f"recompute={p.recompute.value}")
    parts += [flag for flag, on in (("sp", p.sp), (f"zero{p.zero_stage}", p.zero_stage > 0),
                                    ("overlap", p.dp_overlap)) if on]
    return " ".join(parts)


def _part(design: DesignResult | None, model: str) -> DesignResult | None:
    """``model``'s result within a design's result (the design's own for a one-model search)."""
    if design is None or not design.components:
        return design
    return next(c for c in design.components if c.model == model)


def model_row(links: str, search: str, model: str, result: SearchResult) -> Row:
    """``model``'s row of a search's result: the best design's plan and throughput for it, and the
    baseline's."""
    best = result.best
    mine = _part(best, model)
    base = _part(result.baseline, model)
    rate = mine.throughput_samples_per_s if mine is not None and mine.best is not None else 0.0
    base_rate = base.throughput_samples_per_s if base is not None and base.best is not None else 0.0
    return Row(links=links, search=search, model=model,
               design=best.accelerator.name if best is not None else "",
               area_mm2=best.area_mm2 if best is not None else 0.0,
               plan=plan_text(mine.best) if mine is not None and mine.best is not None else "nothing fits",
               samples_per_s=rate, baseline_samples_per_s=base_rate,
               relative=rate / base_rate if rate > 0 and base_rate > 0 else None)


def groups(models: Sequence[str]) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """The models grouped by their TP widths (:data:`PHAZE_MODELS`), in the order given."""
    out: dict[tuple[int, ...], list[str]] = {}
    for model in models:
        out.setdefault(PHAZE_MODELS[model][1], []).append(model)
    return [(tps, tuple(names)) for tps, names in out.items()]


def reproduce(models: Sequence[str], *, space: str = "phaze", links: dict[str, str | None] | None = None,
              jobs: int | None = None, store: str | None = None, devices: int = DEVICES,
              global_batch: int = GLOBAL_BATCH, options: Mapping[str, Any] | None = None,
              progress: Callable[[str, Tick], None] | None = None) -> tuple[list[Row], list[SearchRun]]:
    """Run the joint and the per-model searches of ``models`` under every link setting.

    Args:
        models: keys of :data:`PHAZE_MODELS`.
        space: a space name or YAML path (``phaze``: PHAZE's 88,080 designs).
        links: link settings (label -> cluster preset or None); default :data:`LINKS`.
        jobs: worker processes (None: the usable CPUs).
        store: SQLite result store (a re-run resumes from it); None: none.
        devices, global_batch: the cluster size and samples per iteration.
        options: further :class:`archplace.SearchSpec` fields for every search (e.g.
            ``micro_batch_sizes``); default none (archplace's default plan search).
        progress: called with the search's name and every tick.

    Returns:
        The rows (per link setting: the joint searches' rows, then the per-model ones) and every
        search run.

    Raises:
        ConfigError: an unknown model or space, a bad option.
        SearchInterrupted: an interrupt; what the store kept is in it.
    """
    unknown = [m for m in models if m not in PHAZE_MODELS]
    if unknown or not models:
        raise ConfigError(f"model: choose from {', '.join(PHAZE_MODELS)}; got {', '.join(unknown) or 'none'}")
    rows: list[Row] = []
    runs: list[SearchRun] = []
    for label, cluster in (LINKS if links is None else links).items():
        base = SearchSpec(models=tuple(models), devices=devices, global_batch=global_batch, space=space,
                          cluster=cluster, baseline=BASELINE, jobs=jobs, store=store, exact_top=0, top=1,
                          **dict(options or {}))
        jobs_of = [("joint", names, tps) for tps, names in groups(models) if len(names) > 1]
        jobs_of += [("per model", (name,), PHAZE_MODELS[name][1]) for name in models]
        for search, names, tps in jobs_of:
            name = f"{label} / {search} / {', '.join(names)}"
            spec = base.replace(models=names, tps=tps)
            start = time.perf_counter()
            result = api.search(spec, progress=(lambda tick, name=name: progress(name, tick))
                                if progress else None)
            runs.append(SearchRun(label, search, names, result, time.perf_counter() - start))
            rows.extend(model_row(label, search, model, result) for model in names)
    order = {label: i for i, label in enumerate(LINKS if links is None else links)}
    rows.sort(key=lambda r: (order[r.links], r.search != "joint"))
    return rows, runs


def markdown(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = ["| links | search | model | best design | area mm² | plan | samples/s | tpuv4 samples/s "
             "| best / tpuv4 |", "|---|---|---|---|---:|---|---:|---:|---:|"]
    for r in rows:
        rel = f"{r.relative:.2f}×" if r.relative is not None else "-"
        lines.append(f"| {r.links} | {r.search} | {r.model} | {r.design or '-'} | {r.area_mm2:.1f} "
                     f"| {r.plan} | {r.samples_per_s:,.1f} | {r.baseline_samples_per_s:,.1f} | {rel} |")
    return "\n".join(lines)


def summary(runs: Sequence[SearchRun]) -> str:
    """One line per search: designs in the space, evaluated, pruned, wall time."""
    return "\n".join(f"- {r.links} / {r.search} / {', '.join(r.models)}: {r.result.considered:,} designs, "
                     f"{len(r.result.evaluated):,} evaluated, {r.result.pruned:,} pruned, {r.wall_s:.0f} s"
                     for r in runs)


def _printer(every_s: float) -> Callable[[str, Tick], None]:
    """A progress callback writing one line to stderr at most every ``every_s`` seconds per search."""
    last: dict[str, float] = {}

    def show(name: str, tick: Tick) -> None:
        now = time.monotonic()
        done = tick.evaluated + tick.pruned >= tick.total
        if not done and now - last.get(name, -every_s) < every_s:
            return
        last[name] = now
        lead = tick.best
        best = (f", best so far {lead.accelerator.name} {lead.throughput_samples_per_s:,.1f} samples/s"
                if lead is not None and lead.best is not None else "")
        print(f"{time.strftime('%H:%M:%S')} [{name}] {tick.evaluated:,} evaluated, {tick.pruned:,} pruned "
              f"of {tick.total:,}; {tick.bounded:,} core configurations bounded{best}",
              file=sys.stderr, flush=True)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="phaze", help="a name or a YAML file (default phaze)")
    parser.add_argument("--models", nargs="+", default=list(PHAZE_MODELS), choices=list(PHAZE_MODELS),
                        help="models (default: PHAZE's five)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: the usable CPUs)")
    parser.add_argument("--quick", action="store_true",
                        help="search a 48-design sub-space of phaze instead of --space (about 20 minutes)")
    parser.add_argument("--store", default=None,
                        help="SQLite result store; a re-run with the same options resumes from it")
    parser.add_argument("--out", default=None, help="write the rows and the searches as JSON here")
    parser.add_argument("--links", nargs="+", default=list(LINKS), choices=list(LINKS),
                        help="link settings (default: both)")
    parser.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    args = parser.parse_args(argv)
    space = args.space
    if args.quick:
        where = Path(args.store).resolve().parent if args.store else Path(tempfile.gettempdir())
        path = where / "phaze-quick-space.yaml"
        path.write_text(QUICK_SPACE)
        space = str(path)
    from archplace.base.lifetime import Interrupted, raising_interrupts  # Ctrl-C as the CLI handles it

    start = time.perf_counter()
    try:
        with raising_interrupts():
            rows, runs = reproduce(args.models, space=space, links={k: LINKS[k] for k in args.links},
                                   jobs=args.jobs, store=args.store, progress=_printer(args.progress_every))
    except ArchplaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"interrupted: {exc.detail}", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    command = "benchmarks/reproduce_phaze.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(markdown(rows))
    print()
    print(summary(runs))
    print(f"\nspace {args.space if not args.quick else 'quick sub-space of phaze'}, {DEVICES} devices, "
          f"global batch {GLOBAL_BATCH}; {wall:.0f} s in all; command: {command}")
    if args.out:
        data: dict[str, Any] = {
            "command": command, "space": "quick" if args.quick else args.space, "devices": DEVICES,
            "global_batch": GLOBAL_BATCH, "wall_s": wall, "rows": [asdict(r) for r in rows],
            "searches": [{"links": r.links, "search": r.search, "models": list(r.models),
                          "considered": r.result.considered, "evaluated": len(r.result.evaluated),
                          "pruned": r.result.pruned, "wall_s": r.wall_s,
                          "best": r.result.best.to_dict() if r.result.best else None,
                          "baseline": r.result.baseline.to_dict() if r.result.baseline else None}
                         for r in runs]}
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
