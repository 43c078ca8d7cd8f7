"""`evaluate` against published training runs (issue #12, item 6).

Every run of ``published_runs.yaml`` (Narayanan et al. SC 2021 Table 1, Korthikanti et al. 2022
Table 5, MosaicML llm-foundry's A100 / H100 BF16 tables; sources in the data file) is evaluated
as trained (each run's attention and kernels as published: the default variant of
``archplace.validation.runs``), and its
relative throughput error is printed (pytest -s). The issue's thresholds hold over the suite:
mean |error| <= 8 % and max |error| <= 15 %, with every run evaluated (a plan that trained on
real GPUs must fit). Each run also has its own test with a looser sanity bound, so a report
names the runs that miss. The errors of the PHAZE-style eager + unfused variant are printed by
``benchmarks/validate.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from archplace.validation.runs import DEFAULT_VARIANT, Outcome, Run, load_runs, predict, summary

DATA_FILE = Path(__file__).with_name("published_runs.yaml")
RUNS = load_runs(DATA_FILE)
MEAN_ABS_ERROR_MAX = 0.08  # issue #12, "Validation suite": mean |error| <= 8 %
ABS_ERROR_MAX = 0.15  # issue #12: max |error| <= 15 %
SANITY_ABS_ERROR_MAX = 0.25  # per run: a looser bound that flags a broken case on its own

H100_STACK = ("over-predicted by 41 % (26-59 % for the H100 rows before the sustained clock): "
              "llm-foundry ran these on H100 with its Triton port of "
              "FlashAttention-1 (attn_impl: triton, tested on A100 only; no H100 figure for it was "
              "found, FlashAttention-2 is 1.3-1.5x faster forward and ~2x backward on A100, Dao 2023 "
              "sec. 4.1) on PyTorch 2.1 / CUDA 12.1 (h100new.md image); on that one stack its H100 rows "
              "reach only 0.69-0.72 of the A100 rows' MFU, a Hopper-specific shortfall the h100-80gb "
              "preset's cuBLAS and FlashAttention-2 figures do not describe")
# mpt-7b-h100 (+20.3 %), mpt-70b-h100 (+5.7 %) and mpt-7b-a100 (+12.6 %) came inside the sanity
# bound with the presets' sustained clocks (issue #24 item 4, archplace.cost.clock)
KNOWN_MISSES = {"mpt-13b-h100": H100_STACK}
"""Runs beyond the sanity bound, kept visible as strict expected failures (a fix makes them
fail loudly, so the list shrinks with the model)."""
SUITE_MISS = ("issue #12 thresholds not met: mean |error| 7.4 %, max 41.3 % (mpt-13b-h100, see "
              "KNOWN_MISSES; mpt-7b-h100 +20.3 %, mpt-7b-a100 +12.6 %, korthikanti-22b +11.1 %)")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    directory = tmp_path_factory.mktemp("validation-models")
    return {run.case: predict(run, directory, DEFAULT_VARIANT) for run in RUNS}


def _line(outcome: Outcome) -> str:
    run = outcome.run
    if outcome.error is None:
        return f"{run.case:<18} {run.plan.describe():<28} fails: {outcome.failure}"
    return (f"{run.case:<18} {run.plan.describe():<28} published {run.published.value:>8g} "
            f"{run.published.unit:<16} predicted {outcome.predicted:>8.4g}  error {outcome.error:+.1%}")


@pytest.mark.parametrize("run", [
    pytest.param(run, id=run.case, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[run.case]))
    if run.case in KNOWN_MISSES else pytest.param(run, id=run.case) for run in RUNS])
def test_run_within_sanity_bound(run: Run, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[run.case]
    print(_line(outcome))
    assert outcome.failure is None, outcome.failure
    assert outcome.error is not None and abs(outcome.error) <= SANITY_ABS_ERROR_MAX


@pytest.mark.xfail(strict=True, reason=SUITE_MISS)
def test_suite_meets_issue_thresholds(outcomes: dict[str, Outcome]) -> None:
    results = [outcomes[run.case] for run in RUNS]
    mean, worst, missing = summary(results)
    print(f"\n{DEFAULT_VARIANT}: mean |error| {mean:.1%}, max |error| {worst:.1%} over "
          f"{len(results) - missing} runs, {missing} without a prediction")
    for outcome in results:
        print("  " + _line(outcome))
    assert missing == 0, [o.run.case for o in results if o.error is None]
    assert mean <= MEAN_ABS_ERROR_MAX
    assert worst <= ABS_ERROR_MAX


# A ratchet while the issue's thresholds are missed (the strict expected failures above only
# notice an improvement): the errors as of the commit that wrote it (mean 17.0 %, max 59.5 %,
# benchmarks/validate.py), so a model change that makes the predictions worse fails here.
# Lower these as the model improves; they are not targets.  Raised from 0.18 to 0.20 when the
# A100 and H100 presets took their kernels from measured tables (issue #24 item 1; mean 19.4 %):
# the LLMCompass A100 GEMMs run faster in isolation than the one MAMF figure used before, and
# the in-situ mechanisms that slow them in training are items 3-4 of the same issue.
# Lowered to 0.08 / 0.42 when the A100 and H100 presets declared their sustained clocks (issue #24
# item 4; mean 7.4 %, max 41.3 %): table GEMMs and attention run at the clock held at the power limit.
RATCHET_MEAN_ABS_ERROR = 0.08
RATCHET_ABS_ERROR = 0.42


def test_errors_do_not_grow(outcomes: dict[str, Outcome]) -> None:
    mean, worst, missing = summary([outcomes[run.case] for run in RUNS])
    assert missing == 0
    assert mean <= RATCHET_MEAN_ABS_ERROR and worst <= RATCHET_ABS_ERROR, (mean, worst)


def test_harness_writes_the_model_config_it_evaluates(tmp_path: Path) -> None:
    """``predict`` writes the run's HF config under its case name and evaluates that file."""
    run = next(r for r in RUNS if r.case == "narayanan-1.7b")
    outcome = predict(run, tmp_path)
    assert (tmp_path / run.case / "config.json").is_file()
    assert outcome.iteration_time_s is not None and outcome.iteration_time_s > 0
