"""`evaluate` against published mixture-of-experts training runs (issue #26 item 6).

The MoE rows of ``published_runs.yaml`` (``Run.moe``: plans with expert parallelism): the
Megatron-Bridge DGX-H100 Qwen3-30B-A3B and Qwen3-235B-A22B rows (25.09 to 26.06, forced-balance
routing) and the Megatron-MoE-ModelZoo Qwen3-235B-A22B H100 rows, each with its source in the
data file; the ModelZoo "A2A" row has its own tests (``test_moe_published.py``). Issue #26's
thresholds apply to the included ones: at least 8 runs, mean |error| <= 10 %, max <= 20 %.
Every included run's prediction must follow the expert load imbalance: a model that left the
MoE costs out of the critical path (a pipeline paced by a chunk without experts) would pass a
throughput check by luck.

The tests that evaluate the runs are marked slow (``make test-slow``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.helpers.roomy import roomy_preset

from archplace.front import api
from archplace.validation.runs import (
    DEFAULT_VARIANT,
    Outcome,
    Run,
    evaluate_kwargs,
    included,
    load_runs,
    model_argument,
    predict,
    summary,
)

DATA_FILE = Path(__file__).with_name("published_runs.yaml")
RUNS = load_runs(DATA_FILE)
MOE = tuple(run for run in included(RUNS) if run.moe)
MIN_RUNS = 8  # issue #26: at least 8 MoE runs
MEAN_ABS_ERROR_MAX = 0.10  # issue #26: mean |error| <= 10 %
ABS_ERROR_MAX = 0.20  # issue #26: max |error| <= 20 %

SUITE_MISS = (
    "issue #26 thresholds not met: mean |error| 46.8 %, max 221.1 % over 16 evaluated MoE runs "
    "(benchmarks/validate.py). The Megatron-Bridge Qwen3-235B rows with the EP overlap are 41-50 % "
    "too fast and the 25.09 row without it 28 %: NCCL's all-to-all across nodes is priced faster "
    "than these runs' alltoall dispatcher ran. The DeepEP ModelZoo row without the overlap is "
    "14.3 % too slow (DeepEP's kernels are not modelled), its TP 4 row 102 % too fast, and the "
    "Qwen3-30B PP 2 rows 34-221 % too fast")

# A ratchet while the thresholds are missed: the MoE runs' errors as of the commit that set it
# (mean 34.8 %, max 97.8 %, 2 runs out of memory; then mean 34.4 %, max 93.6 % when the rows took
# Megatron-Core's order of the routing weights, expert_weighting activation; raised to mean
# 36.8 %, max 109.4 % when the H100 took the measured throughput-equivalent sustained clocks,
# 1.88 / 1.647 GHz instead of 1.575: see tests/validation/test_validation.py; set to mean 37.1 %,
# max 110.2 % when the loss ran as these runs' Megatron-Core fused cross-entropy runs it, --loss
# fp32-inplace, 12 bytes a logit: faster than the bf16 cross-entropy the head had been traced as,
# and these rows are too fast already); set to mean 46.8 %, max 221.1 %, no run out of memory when
# each row's loss ran as its framework runs it (archplace.workload.loss_traffic): the
# Megatron-Bridge rows run Transformer Engine's cross-entropy, which keeps the gradient in the
# 16-bit logits (2 bytes a logit, not 4), so the two MBS 2 Qwen3-30B rows fit in 80 GB as they did
# when they trained, and their errors (+34.1 %, and +221.1 % for the 25.11 row, which publishes half
# the 25.09 row's throughput on the same plan) now count. Lower these as the model improves.
RATCHET_MEAN_ABS_ERROR = 0.469
RATCHET_ABS_ERROR = 2.22
RATCHET_MISSING = 0


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    directory = tmp_path_factory.mktemp("moe-validation-models")
    return {run.case: predict(run, directory, DEFAULT_VARIANT) for run in MOE}


def test_at_least_8_included_moe_runs_each_cited() -> None:
    assert len(MOE) >= MIN_RUNS
    for run in MOE:
        assert run.source.strip() and run.plan.ep > 1


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=SUITE_MISS)
def test_moe_suite_meets_issue_thresholds(outcomes: dict[str, Outcome]) -> None:
    results = [outcomes[run.case] for run in MOE]
    mean, worst, missing = summary(results)
    print(f"\n{DEFAULT_VARIANT}: MoE mean |error| {mean:.1%}, max |error| {worst:.1%} over "
          f"{len(results) - missing} runs, {missing} without a prediction")
    assert missing == 0, [o.run.case for o in results if o.error is None]
    assert mean <= MEAN_ABS_ERROR_MAX
    assert worst <= ABS_ERROR_MAX


@pytest.mark.slow
def test_moe_errors_do_not_grow(outcomes: dict[str, Outcome]) -> None:
    mean, worst, missing = summary([outcomes[run.case] for run in MOE])
    assert missing <= RATCHET_MISSING
    assert mean <= RATCHET_MEAN_ABS_ERROR and worst <= RATCHET_ABS_ERROR, (mean, worst)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """A hardware preset's file with 1 TiB of HBM, so that a plan's time is reported whatever
    memory the skewed routing's extra rows take (the capacity only gates the memory check)."""
    folder = tmp_path_factory.mktemp("roomy-hardware")
    return lambda preset: roomy_preset(folder, preset)


@pytest.mark.slow
@pytest.mark.parametrize("run", [pytest.param(run, id=run.case) for run in MOE])
def test_prediction_follows_the_expert_load_imbalance(run: Run, roomy: Callable[[str], str],
                                                      tmp_path: Path) -> None:
    """The busiest expert-parallel rank taking 1.5x the mean tokens makes every included MoE
    run's iteration longer (its expert GEMMs and all-to-alls are on the critical path), on the
    run's chip with room for the extra rows."""
    kwargs = {**evaluate_kwargs(run, model_argument(run, tmp_path)), "hardware": roomy(run.hardware)}
    balanced = api.evaluate(**kwargs)
    skewed = api.evaluate(**kwargs, expert_load_imbalance=1.5)
    assert skewed.iteration_time_s > 1.02 * balanced.iteration_time_s, run.case
