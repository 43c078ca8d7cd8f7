"""Cross-validated calibration error on the published runs (issue #24 item 5), per hardware preset.

For each preset with runs in tests/validation/published_runs.yaml: mean and max |error| with the
preset's own values (uncalibrated), calibrated to every run (in sample), leave-one-out (LOO) and
leave-one-source-out (LOSO), with ``archplace.calibration.cross_validate``. Errors are relative
throughput errors as validate.py prints them. Called by ``validate.py --cross-validate``.

Run: .venv/bin/python benchmarks/cross_validate.py [--fit gemm_sustained,hbm] [--per-run]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from archplace.calibration import DEFAULT_FIT, CrossValidation, cross_validate
from archplace.validation.runs import Run, load_runs

DATA_FILE = Path(__file__).resolve().parents[1] / "tests" / "validation" / "published_runs.yaml"

KINDS = (("uncalibrated", "preset"), ("in_sample", "in sample"), ("loo", "LOO"), ("loso", "LOSO"))


def _cell(result: CrossValidation, kind: str) -> str:
    mean, worst, count = result.summary(kind)
    if not count:
        return f"{'-':>17}"
    return f"{mean:6.1%} / {worst:6.1%}{'' if count == len(result.cases) else '*':1}"


def print_cross_validation(runs: Sequence[Run], fit: str = ",".join(DEFAULT_FIT),
                           per_run: bool = False) -> None:
    """Print, per hardware preset of ``runs``, mean / max |error| uncalibrated, in sample, LOO
    and LOSO of calibrating ``fit``."""
    print(f"cross-validated calibration of {fit} (mean / max |error|; * some runs without a fit)")
    print(f"{'hardware':<11} {'runs':>4} " + " ".join(f"{label:>17}" for _, label in KINDS) + "   time")
    for hardware in dict.fromkeys(run.hardware for run in runs):
        start = time.perf_counter()
        result = cross_validate([run for run in runs if run.hardware == hardware], hardware, fit)
        cells = " ".join(_cell(result, kind) for kind, _ in KINDS)
        print(f"{hardware:<11} {len(result.cases):>4} {cells} {time.perf_counter() - start:5.0f} s")
        for line in result.skipped:
            print(f"    {line}")
        if per_run:
            for i, case in enumerate(result.cases):
                values = [getattr(result, kind)[i] for kind, _ in KINDS]
                print(f"    {case:<20} {result.groups[i][:28]:<28} "
                      + " ".join("       -" if v is None else f"{v:+8.1%}" for v in values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", default=",".join(DEFAULT_FIT),
                        help=f"parameters to calibrate (default {','.join(DEFAULT_FIT)})")
    parser.add_argument("--per-run", action="store_true", help="also print each run's errors")
    args = parser.parse_args(argv)
    print_cross_validation(load_runs(DATA_FILE), args.fit, args.per_run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
