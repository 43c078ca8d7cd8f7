"""The runs measured on one H200 (tests/validation/one_gpu/, tools/train_step_gpu.py): the
figures in published_runs.yaml are the data files' own, and the profiled steps are consistent
with the timed ones (docs/validation.md, "One GPU, measured here")."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from archplace.validation.runs import load_runs

HERE = Path(__file__).parent
RUNS = {run.case: run for run in load_runs(HERE / "published_runs.yaml")}
MEASURED = {"h200run-llama3.2-1b": ("one_gpu_1b.json", "ops_1b.json"),
            "h200run-llama3.1-8b-8layers": ("one_gpu_8b8l.json", "ops_8b8l.json")}


def _load(name: str) -> dict[str, Any]:
    data = json.loads((HERE / "one_gpu" / name).read_text(encoding="utf-8"))
    assert isinstance(data, list) and len(data) == 1
    return dict(data[0])


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_the_run_s_figure_is_its_data_file_s(case: str) -> None:
    timed, _ = MEASURED[case]
    data = _load(timed)
    run = RUNS[case]
    steps = data["steps"]
    late = steps[len(steps) // 2:]
    step_s = (statistics.median(s["fwd_bwd_s"] for s in late)
              + statistics.median(s["optimizer_s"] for s in late))
    assert run.published.unit == "iteration_time_s"
    assert run.published.value == pytest.approx(step_s, abs=5e-5)  # the YAML rounds to 0.1 ms
    assert (run.plan.micro_batch, run.plan.global_batch) == (data["micro_batch"], data["global_batch"])
    assert run.plan.gpus == 1 and run.hardware == "h200-141gb"
    assert len(steps) >= 10 and data["device"] == "NVIDIA H200"
    # 30 s of steps: the second half ran at the power limit (NVML board power within 5 % of 700 W)
    assert statistics.median(s["power_w"] for s in late) > 665.0


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_the_profiled_step_matches_the_timed_ones(case: str) -> None:
    timed, profiled = MEASURED[case]
    step_s = _load(timed)["fwd_bwd_s_median_second_half"] + _load(timed)["optimizer_s_median_second_half"]
    kernels = _load(profiled)["kernels"]
    # the GPU was busy through the step (no host launch gaps to model) and the step took what
    # the timed steps took
    assert kernels["device_s"] == pytest.approx(kernels["step_wall_s"], rel=0.03)
    assert kernels["step_wall_s"] == pytest.approx(step_s, rel=0.03)
    assert set(kernels["by_kind"]) == {"attention", "gemm", "other"}
