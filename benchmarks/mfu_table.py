"""The best plan's predicted MFU of common models next to published training MFUs of their class.

For each row: ``archplace plan`` (the Python API, default plan space) of a bundled model on a
hardware preset, and the MFU of that best plan, printed beside the published MFU of the nearest
published run of the same class (same GPU, similar size), read from
``tests/validation/published_runs.yaml`` (each run cited there). A prediction above every
published figure of its class says the model is still too fast (issue #24); nothing here caps it.

Published comparators (the ``published.mfu_percent`` or ``value`` of each case):

* ``mpt-7b-a100``: llm-foundry, MPT-7B on 8 A100-80GB, 2k tokens, 64.23 % MFU (its best A100 row
  of the 7B class);
* ``mpt-13b-2k-a100``: llm-foundry, MPT-13B on A100, 2k tokens, 59.57 %;
* ``mpt-7b-h100``: llm-foundry, MPT-7B on 8 H100, 2k tokens, 46.44 % (the best published H100
  BF16 figure found; llm-foundry ran a Triton FlashAttention-1 there);
* ``korthikanti-175b``: Megatron-LM GPT-3 175B on 64 A100, 51.4 % MFU (Korthikanti et al. 2022,
  Table 5).

Run: ``.venv/bin/python benchmarks/mfu_table.py`` (traces the models on first use: minutes cold).
"""
# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import argparse
from pathlib import Path

from archplace.front import api
from archplace.validation.runs import Run, load_runs

DATA_FILE = Path(__file__).resolve().parents[1] / "tests" / "validation" / "published_runs.yaml"

# (model preset, hardware preset, devices, global batch, comparator cases)
ROWS: tuple[tuple[str, str, int, int, tuple[str, ...]], ...] = (
    ("llama2-7b", "a100-80gb", 64, 512, ("mpt-7b-a100",)),
    ("llama2-13b", "a100-80gb", 64, 512, ("mpt-13b-2k-a100",)),
    ("llama3.1-8b", "h100-80gb", 64, 512, ("mpt-7b-h100",)),
    ("gpt3-175b", "a100-80gb", 64, 64, ("korthikanti-175b",)),
)


def published_mfu_percent(run: Run) -> float:
    """The run's published MFU in percent (its value, or its ``mfu_percent`` column)."""
    if run.published.unit == "mfu_percent":
        return float(run.published.value)
    if run.published.mfu_percent is None:
        raise ValueError(f"{run.case}: no published MFU")
    return float(run.published.mfu_percent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None, help="only this model (repeatable)")
    args = parser.parse_args(argv)
    by_case = {run.case: run for run in load_runs(DATA_FILE)}
    print(f"{'model':<13} {'hardware':<10} {'GPUs':>5} {'batch':>6}  {'predicted MFU':>13}  "
          f"{'plan':<40} published (case)")
    for model, hardware, devices, global_batch, cases in ROWS:
        if args.model and model not in args.model:
            continue
        best = api.plan(model, hardware, devices=devices, global_batch=global_batch)[0]
        plan = best.plan
        label = (f"tp{plan.tp} pp{plan.pp} dp{plan.dp} mb{plan.micro_batch} "
                 f"{plan.recompute.value} z{plan.zero_stage}")
        published = ", ".join(f"{published_mfu_percent(by_case[c]):.2f} % ({c})" for c in cases)
        print(f"{model:<13} {hardware:<10} {devices:>5} {global_batch:>6}  {100 * best.mfu:>12.1f}%  "
              f"{label:<40} {published}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
