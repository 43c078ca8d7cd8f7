"""`evaluate` against published training runs (issue #12 item 6, issue #24 item 7).

Every run of ``published_runs.yaml`` (Narayanan et al. SC 2021 Table 1, Korthikanti et al. 2022
Table 5, MosaicML llm-foundry's A100 / H100 BF16 tables, NVIDIA NeMo 24.07 and Megatron-Bridge
DGX-H100 / DGX-B200 FP8 tables, TorchTitan's H100 benchmarks; sources in the data file) is
evaluated as trained (each run's attention and kernels as published: the default variant of
``archplace.validation.runs``), and its relative throughput error is printed (pytest -s).
Issue #24's thresholds apply to the included dense runs (those without an ``excluded_reason``;
the mixture-of-experts runs have issue #26's, in ``test_moe_validation.py``):
mean |error| <= 8 %, max |error| <= 20 %, median signed error within +-3 %, over >= 40 runs,
every one evaluated (a plan that trained on real GPUs must fit). Each included run also has its
own test with a looser sanity bound, so a report names the runs that miss. The per-group table
is printed by ``benchmarks/validate.py``.

The tests that evaluate every run are marked slow: with the tests' private (cold) graph cache,
tracing the suite's ~40 distinct models and shapes takes about 40 s of CPU (``make test-slow``
runs them; ``pytest tests/validation`` runs everything).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from archplace.validation.runs import (
    DEFAULT_VARIANT,
    Outcome,
    Run,
    included,
    load_runs,
    predict,
    summary,
)

DATA_FILE = Path(__file__).with_name("published_runs.yaml")
RUNS = load_runs(DATA_FILE)
INCLUDED = tuple(run for run in included(RUNS) if not run.moe)
MEAN_ABS_ERROR_MAX = 0.08  # issue #24, "Done when": mean |error| <= 8 %
ABS_ERROR_MAX = 0.20  # issue #24: max |error| <= 20 %
MEDIAN_ERROR_MAX = 0.03  # issue #24: median signed error within +-3 %
MIN_RUNS = 40  # issue #24: over >= 40 runs
SANITY_ABS_ERROR_MAX = 0.25  # per run: a looser bound that flags a broken case on its own

OOM = ("archplace's memory model puts this plan over the HBM capacity (85.9 GiB > 80), yet the run "
       "trained: the memory model overestimates for it (the resident FP8 weight and transpose cache?)")
KNOWN_MISSES = {"nemo2407-nemotron-340b": OOM}
# GPT-3 20B, GPT-3 175B on 512 GPUs and Llama 3 8B (CP 2) left this list when their rows took the
# bf16 gradient reduction of NeMo-Framework-Launcher's FP8 example scripts (published_runs.yaml).
# The llm-foundry A100 rows left this list when they ran as trained with the triton-flash1
# attention table and the presets took measured kernel tables and sustained clocks (issue #24);
# the eight deep-interleaving NeMo and Megatron-Bridge H100 rows (25-74 % too slow) when a
# device's pace became the mean of its chunks, not its slowest chunk in every slot
# (archplace.placement.pipeline), their attention Transformer Engine's cuDNN kernel and their TP
# collectives the userbuffers overlap their configurations turn on (archplace.placement.tp_overlap)
# and their pipeline sends overlapped (overlap_p2p_comm);
# the B200 row left the included runs (no measured B200 FP8 GEMM or attention speed: excluded_reason).
"""Included runs beyond the sanity bound, kept visible as strict expected failures (a fix makes
them fail loudly, so the list shrinks with the model)."""
SUITE_MISS = ("issue #24 thresholds not met: mean |error| 7.8 %, max 21.1 %, median +3.03 % over 47 "
              "evaluated runs, 1 fails on memory (see KNOWN_MISSES and benchmarks/validate.py); the "
              "llm-foundry A100 rows with full recomputation at 4-16k tokens are 14-21 % too slow, "
              "the NeMo H100 FP8 rows 6-16 % too fast at the measured sustained clocks")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    directory = tmp_path_factory.mktemp("validation-models")
    return {run.case: predict(run, directory, DEFAULT_VARIANT) for run in INCLUDED}


def _line(outcome: Outcome) -> str:
    run = outcome.run
    if outcome.error is None:
        return f"{run.case:<32} {run.plan.describe():<34} fails: {outcome.failure}"
    return (f"{run.case:<32} {run.plan.describe():<34} published {run.published.value:>8g} "
            f"{run.published.unit:<20} predicted {outcome.predicted:>8.4g}  error {outcome.error:+.1%}")


def test_at_least_40_included_runs() -> None:
    assert len(INCLUDED) >= MIN_RUNS
    assert set(KNOWN_MISSES) <= {run.case for run in INCLUDED}


@pytest.mark.slow
@pytest.mark.parametrize("run", [
    pytest.param(run, id=run.case, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[run.case]))
    if run.case in KNOWN_MISSES else pytest.param(run, id=run.case) for run in INCLUDED])
def test_run_within_sanity_bound(run: Run, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[run.case]
    print(_line(outcome))
    assert outcome.failure is None, outcome.failure
    assert outcome.error is not None and abs(outcome.error) <= SANITY_ABS_ERROR_MAX


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=SUITE_MISS)
def test_suite_meets_issue_thresholds(outcomes: dict[str, Outcome]) -> None:
    results = [outcomes[run.case] for run in INCLUDED]
    mean, worst, missing = summary(results)
    print(f"\n{DEFAULT_VARIANT}: mean |error| {mean:.1%}, max |error| {worst:.1%} over "
          f"{len(results) - missing} runs, {missing} without a prediction")
    assert missing == 0, [o.run.case for o in results if o.error is None]
    assert len(results) >= MIN_RUNS
    assert mean <= MEAN_ABS_ERROR_MAX
    assert worst <= ABS_ERROR_MAX
    assert abs(statistics.median(o.error for o in results if o.error is not None)) <= MEDIAN_ERROR_MAX


# A ratchet while the issue's thresholds are missed (the strict expected failures above only
# notice an improvement): the errors over the included runs as of the commit that last set it,
# so a model change that makes the predictions worse fails here. Lower these as the model
# improves; they are not targets. Written at mean 19.8 %, max 68.7 %, 4 runs out of memory; set to
# mean 14.0 %, max 73.9 % (benchmarks/validate.py) when the known chips took measured kernel
# tables, NCCL collectives, overlap that costs and sustained clocks (issue #24): the A100 BF16
# groups improved from 7-26 % to 4-10 % mean, and the max grew on nemotron-22b (deep
# interleaving, -68.7 -> -73.9 %: GEMMs at the sustained clock make its over-charged pipeline
# slower still); set to mean 7.1 %, max 21.2 % when an interleaved device's pace became the mean
# of its chunks, the NeMo / Megatron-Bridge H100 rows took Transformer Engine's cuDNN attention and
# their configurations' TP and pipeline-send overlap, and the B200 rows left the included runs;
# missing set to 1 (mean 7.3 % over 45 runs, max 21.2 %) when three NeMo rows fitted with the bf16
# gradient reduction their launcher scripts set; raised to mean 8.5 %, max 24.1 % when the H100 and
# H800 presets took the GH100's throughput-equivalent sustained clocks measured on an H200 (1.88 GHz
# bf16, 1.647 GHz FP8, archplace/cost/measured/h200_runs/) instead of NVML's 1.575 GHz: the die's
# GEMM throughput falls 5 % (bf16) and 17 % (FP8) under load, not the 20 % the NVML clock implied,
# so the H100 rows are now predicted 0-24 % too fast (NeMo median +12 %): the time the old clock
# stood in for is another in-situ mechanism, not yet modelled; mean 8.7 % when two runs measured
# on one H200 joined (tests/validation/one_gpu/: +14.9 and +13.0 % too fast, the miss in HF's
# element-wise and copy kernels, docs/validation.md "One GPU, measured here"); set to mean 8.6 %,
# max 24.8 % when the loss ran as each framework runs it (the logits upcast to float32, in
# Megatron-LM's float32 buffer or out of place as Hugging Face's; --loss): the H200 rows fell to
# +8.5 / +8.7 %, and the max grew on Nemotron 8B (+24.1 -> +24.7 %) because the gather of the
# targets now reads one value a row instead of the whole logits tensor, a cost that had hidden
# part of that row's miss (and its float32 buffer made the row need 78.1 GiB, inside 80); the
# mean is 8.54 %: Megatron-LM's loss costed as its fused form (12 bytes a logit) is faster than the
# bf16 cross-entropy the head had been traced as; set to mean 7.96 %, max 21.1 %, when the loss's
# passes were counted as each framework makes them (archplace.workload.loss_traffic: Megatron-LM's
# unfused cross-entropy 52 bytes a logit, Megatron-Core's compiled one 32, Transformer Engine's 10,
# against the 12 of the fused form all Megatron rows had been costed as; the rows state which they
# ran) and the H100's FP8 GEMMs took the FP8 table measured on the same die in an H200 instead of
# twice the bf16 rate: the NeMo rows fell from 12.8 to 11.3 % (Nemotron 8B +24.7 -> +21.1 %); mean
# 7.8 % when ReLU and squared ReLU ran unfused under fused kernels, as Megatron-Core runs every
# activation but GeLU and SwiGLU (Nemotron 8B +16.2 %, 22B +10.3 %).
RATCHET_MEAN_ABS_ERROR = 0.079
RATCHET_ABS_ERROR = 0.212
RATCHET_MISSING = 1


@pytest.mark.slow
def test_errors_do_not_grow(outcomes: dict[str, Outcome]) -> None:
    mean, worst, missing = summary([outcomes[run.case] for run in INCLUDED])
    assert missing <= RATCHET_MISSING
    assert mean <= RATCHET_MEAN_ABS_ERROR and worst <= RATCHET_ABS_ERROR, (mean, worst)


def test_harness_writes_the_model_config_it_evaluates(tmp_path: Path) -> None:
    """``predict`` writes the run's HF config under its case name and evaluates that file."""
    run = next(r for r in RUNS if r.case == "narayanan-1.7b")
    outcome = predict(run, tmp_path)
    assert (tmp_path / run.case / "config.json").is_file()
    assert outcome.iteration_time_s is not None and outcome.iteration_time_s > 0
