"""Cross-validated calibration error on the published runs (issue #24 item 5), per hardware preset.

For each preset with included runs in tests/validation/published_runs.yaml (those without an
``excluded_reason``, the runs the validation thresholds apply to): mean and max |error| with the
preset's own values (uncalibrated), calibrated to every run (in sample), leave-one-out (LOO) and
leave-one-source-out (LOSO), with ``archplace.calibration.cross_validate``, fitting ``--fit`` or
each preset's default (``archplace.calibration.parameters.default_fit``: sustained_clock and
kernel_floor on a chip with measured kernel tables, gemm_sustained and hbm otherwise). Errors are
relative throughput errors as validate.py prints them. Called by ``validate.py --cross-validate``.

Run: .venv/bin/python benchmarks/cross_validate.py [--fit NAMES] [--per-run]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from archplace.calibration import CrossValidation, cross_validate
from archplace.calibration.parameters import default_fit
from archplace.front.specs.resolved import ResolvedHardware
from archplace.validation.runs import Run, included, load_runs

DATA_FILE = Path(__file__).resolve().parents[1] / "tests" / "validation" / "published_runs.yaml"

KINDS = (("uncalibrated", "preset"), ("in_sample", "in sample"), ("loo", "LOO"), ("loso", "LOSO"))


def _cell(result: CrossValidation, kind: str) -> str:
    mean, worst, count = result.summary(kind)
    if not count:
        return f"{'-':>17}"
    return f"{mean:6.1%} / {worst:6.1%}{'' if count == len(result.cases) else '*':1}"


def print_cross_validation(runs: Sequence[Run], fit: str | None = None, per_run: bool = False) -> None:
    """Print, per hardware preset of the included ``runs``, mean / max |error| uncalibrated, in
    sample, LOO and LOSO of calibrating ``fit`` (None: each preset's default)."""
    runs = included(runs)
    print("cross-validated calibration (mean / max |error|; * some runs without a fit)")
    print(f"{'hardware':<11} {'runs':>4} " + " ".join(f"{label:>17}" for _, label in KINDS)
          + "   time  fitted")
    for hardware in dict.fromkeys(run.hardware for run in runs):
        start = time.perf_counter()
        chosen = fit if fit is not None else ",".join(default_fit(ResolvedHardware.load(hardware)))
        result = cross_validate([run for run in runs if run.hardware == hardware], hardware, chosen)
        cells = " ".join(_cell(result, kind) for kind, _ in KINDS)
        print(f"{hardware:<11} {len(result.cases):>4} {cells} {time.perf_counter() - start:5.0f} s  {chosen}")
        for line in result.skipped:
            print(f"    {line}")
        if per_run:
            for i, case in enumerate(result.cases):
                values = [getattr(result, kind)[i] for kind, _ in KINDS]
                print(f"    {case:<20} {result.groups[i][:28]:<28} "
                      + " ".join("       -" if v is None else f"{v:+8.1%}" for v in values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", default=None,
                        help="parameters to calibrate (default: each preset's, see the docstring)")
    parser.add_argument("--per-run", action="store_true", help="also print each run's errors")
    args = parser.parse_args(argv)
    print_cross_validation(load_runs(DATA_FILE), args.fit, args.per_run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
