"""Objectives, budgets and the baseline comparison of `search`."""

from __future__ import annotations

from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.dse.objective import Objective, score
from archplace.front import api
from archplace.hw.area import area_mm2
from archplace.hw.power import tdp_w

OPTIONS = dict(devices=64, global_batch=128, seq_len=256, micro_batch_sizes=(1, 2))


@pytest.fixture(scope="module")
def space(small_space_file: Path) -> str:
    return str(small_space_file)


def test_objectives_rank_and_baseline(space: str) -> None:
    fast = api.search("gpt2-xl", space=space, **OPTIONS)
    frugal = api.search("gpt2-xl", space=space, objective="throughput-per-watt", **OPTIONS)
    assert fast.best is not None and frugal.best is not None
    for result, objective in ((fast, Objective.THROUGHPUT), (frugal, Objective.PER_WATT)):
        scores = [score(r, objective) for r in result.evaluated]
        assert scores == sorted(scores, reverse=True)
    per_watt = frugal.best.throughput_per_watt
    assert per_watt == pytest.approx(frugal.best.throughput_samples_per_s /
                                     (tdp_w(frugal.best.accelerator) * frugal.best.best.plan.devices))
    assert fast.baseline is not None and fast.baseline.accelerator.name == "tpuv4"
    assert fast.speedup_vs_baseline == pytest.approx(
        fast.best.throughput_samples_per_s / fast.baseline.throughput_samples_per_s)
    assert fast.to_dict()["speedup_vs_baseline"] == fast.speedup_vs_baseline
    assert api.search("gpt2-xl", space=space, baseline=None, **OPTIONS).speedup_vs_baseline is None


def test_budgets_filter_designs(space: str) -> None:
    every = api.search_request("gpt2-xl", space=space, **{k: v for k, v in OPTIONS.items()}).designs
    areas = sorted(area_mm2(d) for d in every)
    powers = sorted(tdp_w(d) for d in every)
    area_limit, power_limit = areas[len(areas) // 2], powers[len(powers) // 3]
    small = api.search_request("gpt2-xl", space=space, area_budget=f"{area_limit} mm2", **OPTIONS).designs
    assert {d.name for d in small} == {d.name for d in every if area_mm2(d) <= area_limit}
    cool = api.search_request("gpt2-xl", space=space, power_budget=f"{power_limit} W", **OPTIONS).designs
    assert {d.name for d in cool} == {d.name for d in every if tdp_w(d) <= power_limit}
    with pytest.raises(ConfigError, match="within the area and power budgets"):
        api.search_request("gpt2-xl", space=space, area_budget="1 mm2", **OPTIONS)
    with pytest.raises(ConfigError, match="unknown objective"):
        api.search_request("gpt2-xl", space=space, objective="speed", **OPTIONS)
    with pytest.raises(ConfigError, match="power_budget: expected a unit"):
        api.search_request("gpt2-xl", space=space, power_budget="300 mm2", **OPTIONS)


