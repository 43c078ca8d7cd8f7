"""benchmarks/reproduce_phaze.py: its core function on a 3-design space, both link settings."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    path = ROOT / "benchmarks" / "reproduce_phaze.py"
    spec = importlib.util.spec_from_file_location("reproduce_phaze", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproduce_phaze"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


repro = _script()

# tpuv4's base with 2, 4 or 8 of its 128x128 arrays: the 8-array design is the tpuv4 preset itself
# (2 vector cores of 128 x 8 lanes, 128 MiB, 32 GiB), under another name.
SPACE = ("base: tpuv4\ntensor_cores: [2, 4, 8]\narray_dim: [128]\nvector_cores: [2]\nbuffer: [128 MiB]\n"
         "hbm: [32 GiB]\nvector_lanes_per_col: 8\narea_min_fraction: 0.0\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, Path]:
    where = tmp_path_factory.mktemp("phaze-repro")
    (where / "space.yaml").write_text(SPACE)
    store = where / "runs.db"
    rows, runs = repro.reproduce(["bert-large", "opt-350m"], space=str(where / "space.yaml"), jobs=1,
                                 store=str(store), devices=64, global_batch=256,
                                 options={"micro_batch_sizes": (1,)})
    return rows, runs, store


@pytest.mark.slow  # about 15 s of tracing and searching on an idle machine, 45 s on a busy one
def test_rows_cover_both_link_settings_joint_and_per_model(run: tuple[list, list, Path]) -> None:
    rows, runs, _ = run
    assert [(r.links, r.search, r.model) for r in rows] == [
        (links, search, model) for links in ("realistic", "phaze-paper")
        for search, model in (("joint", "bert-large"), ("joint", "opt-350m"), ("per model", "bert-large"),
                              ("per model", "opt-350m"))]
    assert [(r.links, r.search, r.models) for r in runs] == [
        (links, search, models) for links in ("realistic", "phaze-paper")
        for search, models in (("joint", ("bert-large", "opt-350m")), ("per model", ("bert-large",)),
                               ("per model", ("opt-350m",)))]
    # PHAZE's 4 GiB/s links are two orders of magnitude slower than TPUv4's ICI: no model is faster
    by_key = {(r.links, r.search, r.model): r for r in rows}
    for (links, search, model), row in by_key.items():
        if links == "phaze-paper":
            assert row.samples_per_s <= by_key["realistic", search, model].samples_per_s


@pytest.mark.slow  # about 15 s of tracing and searching on an idle machine, 45 s on a busy one
def test_tpuv4_against_itself_is_one_and_best_is_the_argmax(run: tuple[list, list, Path]) -> None:
    rows, runs, _ = run
    for r in runs:
        result = r.result
        feasible = [d for d in result.evaluated if d.best is not None]
        assert feasible and result.best is max(feasible, key=lambda d: d.throughput_samples_per_s)
        assert result.best.accelerator.tensor_cores == 8  # the tpuv4 design: the most arrays wins
    for row in rows:
        assert row.design == "tc8-128x128-vc2-buf128MiB-hbm32GiB"
        assert row.relative == 1.0
        assert row.samples_per_s == row.baseline_samples_per_s > 0
        assert row.plan.startswith("tp1 ")
    table = repro.markdown(rows).splitlines()
    assert len(table) == 2 + len(rows) and all(line.endswith("| 1.00× |") for line in table[2:])


@pytest.mark.slow  # about 15 s of tracing and searching on an idle machine, 45 s on a busy one
def test_a_second_run_reads_the_store_back(run: tuple[list, list, Path]) -> None:
    rows, _, store = run
    again, _ = repro.reproduce(["bert-large", "opt-350m"], space=str(store.parent / "space.yaml"),
                               jobs=1, store=str(store), devices=64, global_batch=256,
                               options={"micro_batch_sizes": (1,)})
    assert again == rows


def test_models_are_grouped_by_phaze_tp_widths() -> None:
    assert repro.groups(list(repro.PHAZE_MODELS)) == [
        ((1,), ("bert-large", "gpt2-xl", "opt-350m", "llama2-7b")), ((4, 8), ("gpt3-175b",))]
    with pytest.raises(repro.ConfigError, match="choose from"):
        repro.reproduce(["gpt2"], space="tiny")
