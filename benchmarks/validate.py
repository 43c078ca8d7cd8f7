"""Print `evaluate`'s error against published training runs (tests/validation/published_runs.yaml).

One row per run: case, hardware, plan, the published figure, archplace's prediction in the same
unit, and the relative throughput error (positive: predicted too fast), for the chosen variant,
with the other variant's error beside it. Then a table per group (source, hardware, precision,
``moe``: ``Run.group``) with the count, mean and max |error| and the median signed error over the
included runs, the overall figures of the dense runs (issue #24's thresholds) and of the
mixture-of-experts runs (issue #26's), and the excluded runs (``excluded_reason``) with their errors and
reasons, outside every figure. A run that cannot be evaluated (e.g. does not fit in memory)
shows why and counts as a miss. Exit status 0.

Run: .venv/bin/python benchmarks/validate.py [--variant as-trained|flash+fused|eager+unfused]
                                             [--case NAME ...] [--no-comparison]
                                             [--cross-validate]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

from archplace.validation.runs import (
    COMPARISON_VARIANT,
    DEFAULT_VARIANT,
    VARIANTS,
    Outcome,
    load_runs,
    predict,
)

DATA_FILE = Path(__file__).resolve().parents[1] / "tests" / "validation" / "published_runs.yaml"

UNIT_LABEL = {"tflop_per_gpu": "TFLOP/s/GPU", "iteration_time_s": "s/iter", "mfu_percent": "% MFU",
              "tokens_per_s_per_gpu": "tok/s/GPU"}
THRESHOLDS = "[issue #24 thresholds: mean <= 8 %, max <= 20 %, median within +-3 %]"
MOE_THRESHOLDS = "[issue #26 thresholds: >= 8 runs, mean <= 10 %, max <= 20 %]"


def _error_text(outcome: Outcome | None) -> str:
    if outcome is None:
        return "-"
    return "fails" if outcome.error is None else f"{outcome.error:+.1%}"


def group_figures(outcomes: Sequence[Outcome]) -> tuple[int, int, float, float, float]:
    """(runs, runs that fail, mean |error|, max |error|, median signed error) of ``outcomes``;
    NaN figures where none has a prediction."""
    errors = [o.error for o in outcomes if o.error is not None]
    if not errors:
        nan = float("nan")
        return len(outcomes), len(outcomes), nan, nan, nan
    absolute = [abs(e) for e in errors]
    return (len(outcomes), len(outcomes) - len(errors), sum(absolute) / len(absolute), max(absolute),
            statistics.median(errors))


def _figures_line(label: str, outcomes: Sequence[Outcome]) -> str:
    count, fails, mean, worst, median = group_figures(outcomes)
    return (f"{label:<32} {count:>4} {fails:>5} {mean:>10.1%} {worst:>9.1%} {median:>+13.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), default=DEFAULT_VARIANT,
                        help=f"graph variant of the main columns (default {DEFAULT_VARIANT})")
    parser.add_argument("--case", action="append", default=None,
                        help="evaluate only this case (repeatable); default: every run")
    parser.add_argument("--no-comparison", action="store_true",
                        help="skip the comparison variant's column (halves the run time)")
    parser.add_argument("--cross-validate", action="store_true",
                        help="print leave-one-out / leave-one-source-out calibration error per "
                             "hardware preset instead (benchmarks/cross_validate.py)")
    args = parser.parse_args(argv)
    runs = load_runs(DATA_FILE)
    if args.cross_validate:
        from cross_validate import print_cross_validation  # benchmarks/, beside this script

        print_cross_validation(runs)
        return 0
    if args.case:
        unknown = sorted(set(args.case) - {run.case for run in runs})
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; choose from: "
                         + ", ".join(run.case for run in runs))
        runs = tuple(run for run in runs if run.case in args.case)
    other = COMPARISON_VARIANT if args.variant != COMPARISON_VARIANT else DEFAULT_VARIANT
    main_outcomes: list[Outcome] = []
    other_outcomes: list[Outcome] = []
    print(f"{'case':<32} {'hardware':<10} {'plan':<34} {'published':>19} {'predicted':>9} "
          f"{args.variant:>11} {other:>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            ours = predict(run, Path(tmp) / args.variant, args.variant)
            theirs = None if args.no_comparison else predict(run, Path(tmp) / other, other)
            main_outcomes.append(ours)
            if theirs is not None:
                other_outcomes.append(theirs)
            published = f"{run.published.value:g} {UNIT_LABEL[run.published.unit]}"
            predicted = "-" if ours.predicted is None else f"{ours.predicted:.4g}"
            mark = " (excluded)" if run.excluded_reason else ""
            print(f"{run.case:<32} {run.hardware:<10} {run.plan.describe():<34} {published:>19} "
                  f"{predicted:>9} {_error_text(ours):>11} {_error_text(theirs):>13}{mark}")
            for outcome in (ours, theirs):
                if outcome is not None and outcome.failure:
                    print(f"    {outcome.variant}: {outcome.failure}")
    print(f"\nper group, {args.variant}, included runs (error > 0: predicted too fast; a run "
          "that fails has no error and counts in 'fails')")
    print(f"{'group':<32} {'runs':>4} {'fails':>5} {'mean |err|':>10} {'max |err|':>9} "
          f"{'median error':>13}")
    included = [o for o in main_outcomes if o.run.excluded_reason is None]
    for group in dict.fromkeys(o.run.group for o in included):
        print(_figures_line(group, [o for o in included if o.run.group == group]))
    dense = [o for o in included if not o.run.moe]
    moe = [o for o in included if o.run.moe]
    if dense:
        print(_figures_line("all included dense", dense) + "  " + THRESHOLDS)
    if moe:
        print(_figures_line("all included moe", moe) + "  " + MOE_THRESHOLDS)
    if other_outcomes:
        other_included = [o for o in other_outcomes if o.run.excluded_reason is None]
        for label, chosen in (("dense", False), ("moe", True)):
            part = [o for o in other_included if o.run.moe is chosen]
            if part:
                print(_figures_line(f"all included {label}, {other}", part))
    excluded = [o for o in main_outcomes if o.run.excluded_reason is not None]
    if excluded:
        print("\nexcluded from the figures above:")
        for outcome in excluded:
            print(f"  {outcome.run.case:<32} {_error_text(outcome):>8}  {outcome.run.excluded_reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
