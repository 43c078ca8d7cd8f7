"""Print `evaluate`'s error against published training runs (tests/validation/published_runs.yaml).

One row per run: case, hardware, plan, the published figure, archplace's prediction in the same
unit, and the relative throughput error (positive: predicted too fast), for the chosen variant,
with the other variant's error beside it; then mean and max |error| per variant. A run that
cannot be evaluated (e.g. does not fit in memory) shows why and counts as a miss. Exit status 0.

Run: .venv/bin/python benchmarks/validate.py [--variant as-trained|flash+fused|eager+unfused]
                                             [--case NAME ...] [--cross-validate]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from archplace.validation.runs import (
    COMPARISON_VARIANT,
    DEFAULT_VARIANT,
    VARIANTS,
    Outcome,
    load_runs,
    predict,
    summary,
)

DATA_FILE = Path(__file__).resolve().parents[1] / "tests" / "validation" / "published_runs.yaml"

UNIT_LABEL = {"tflop_per_gpu": "TFLOP/s/GPU", "iteration_time_s": "s/iter", "mfu_percent": "% MFU"}


def _error_text(outcome: Outcome) -> str:
    return "   fails" if outcome.error is None else f"{outcome.error:+8.1%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), default=DEFAULT_VARIANT,
                        help=f"graph variant of the main columns (default {DEFAULT_VARIANT})")
    parser.add_argument("--case", action="append", default=None,
                        help="evaluate only this case (repeatable); default: every run")
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
    main_outcomes, other_outcomes = [], []
    print(f"{'case':<18} {'hardware':<10} {'plan':<28} {'published':>19} {'predicted':>9} "
          f"{args.variant:>13} {other:>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            ours = predict(run, Path(tmp) / args.variant, args.variant)
            theirs = predict(run, Path(tmp) / other, other)
            main_outcomes.append(ours)
            other_outcomes.append(theirs)
            published = f"{run.published.value:g} {UNIT_LABEL[run.published.unit]}"
            predicted = "-" if ours.predicted is None else f"{ours.predicted:.3g}"
            print(f"{run.case:<18} {run.hardware:<10} {run.plan.describe():<28} {published:>19} "
                  f"{predicted:>9} {_error_text(ours):>13} {_error_text(theirs):>13}")
            for outcome in (ours, theirs):
                if outcome.failure:
                    print(f"    {outcome.variant}: {outcome.failure}")
    for variant, outcomes in ((args.variant, main_outcomes), (other, other_outcomes)):
        mean, worst, missing = summary(outcomes)
        print(f"{variant}: mean |error| {mean:.1%}, max |error| {worst:.1%} over "
              f"{len(outcomes) - missing} runs" + (f"; {missing} runs fail" if missing else "")
              + "  [issue #12 thresholds: mean <= 8 %, max <= 15 %]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
