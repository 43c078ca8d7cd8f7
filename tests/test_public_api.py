"""The package's front door: what ``import archplace`` exports, that it stays cheap, and that
every result class reads back what it writes (``from_dict(to_dict())``, also through JSON)."""

from __future__ import annotations

import inspect
import json
import pickle
import pydoc
import subprocess
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import archplace
from archplace.base.errors import ConfigError, InfeasibleError, MissingSectionError, OutOfMemoryError
from archplace.cost.estimate import ModelEstimate
from archplace.dse.request import SearchResult
from archplace.dse.store import StoredResult
from archplace.front import api
from archplace.front.specs.search import SearchSpec
from archplace.hw.presets import load_cluster
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.ranked import PlanReport
from archplace.placement.result import PlanResult
from archplace.placement.search import Variant
from archplace.placement.solver import Closest
from archplace.scheduling.base import ScheduleResult
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.solve import solve_problem

TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 256,
            "vocab_size": 1024}
SPACE = ("base: tpuv4\ntensor_cores: [2, 8]\narray_dim: [128]\nvector_cores: [2]\nbuffer: [32 MiB]\n"
         "hbm: [32 GiB]\narea_min_fraction: 0.0\n")
SPEC_CLASSES = {"ModelSpec", "HardwareSpec", "ClusterSpec", "PlanSpace", "Plan"}  # archplace.front.specs


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("api") / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_GPT))
    return str(path)


def through_json(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))


def test_import_is_cheap() -> None:
    code = ("import sys, archplace; heavy = [m for m in "
            "('torch', 'numpy', 'archplace.front.api', 'transformers') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_exports() -> None:
    assert archplace.__version__ == version("archplace")
    for name in archplace.__all__:
        assert getattr(archplace, name) is not None, name
    assert set(dir(archplace)) >= set(archplace.__all__)
    assert archplace.evaluate is api.evaluate and archplace.results is api.results
    assert archplace.SearchResult is SearchResult and archplace.OutOfMemoryError is OutOfMemoryError
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        archplace.nothing  # noqa: B018


def test_no_public_name_is_a_subpackage() -> None:
    """No public function shares its name with a subpackage or module of the package, so importing
    any of them leaves the public functions as they are (issue #25: the subpackages were renamed,
    and ``__init__`` swaps no module class)."""
    import archplace.dse.runner
    import archplace.hw.presets
    import archplace.reporting.html
    import archplace.scheduling.solve  # noqa: F401

    root = Path(archplace.__file__).parent
    modules = {p.stem for p in root.glob("*.py")}
    modules |= {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    assert not set(archplace.__all__) & modules
    assert archplace.search is api.search and archplace.hardware is api.hardware
    assert archplace.schedule is api.schedule_layer and archplace.report is api.report
    assert sys.modules["archplace.dse.runner"].Tick is archplace.Tick
    assert type(sys.modules["archplace"]) is types.ModuleType


def test_help_shows_the_plan_options() -> None:
    """``archplace.plan`` has :func:`api.plan`'s parameters (``help()`` shows them) and returns
    one report."""
    signature = inspect.signature(archplace.plan)
    assert list(signature.parameters) == list(inspect.signature(api.plan).parameters)
    assert signature.return_annotation == "PlanReport"
    assert "top_k" in pydoc.render_doc(archplace.plan)


def test_plan_returns_one_report(model: str) -> None:
    options: dict[str, Any] = dict(devices=8, global_batch=16, micro_batch_sizes=(1, 2), top_k=3)
    report = archplace.plan(model, "tpuv4", **options)
    ranked = api.plan(model, "tpuv4", **options)
    assert isinstance(report, PlanReport) and list(report) == ranked and len(report) == 3
    assert report.plan == ranked[0].plan and report.mfu == ranked[0].mfu
    assert report.iteration_time_s == ranked[0].iteration_time_s and report.best == ranked[0]
    assert PlanReport.from_dict(through_json(report.to_dict())) == report
    for result in ranked:
        assert PlanResult.from_dict(through_json(result.to_dict())) == result
    with pytest.raises(ConfigError, match="at least one plan"):
        PlanReport(())


def test_a_found_plan_is_the_public_plan_and_scores_the_same(model: str) -> None:
    """One Plan class (issue #25): the plan ``plan`` returns is an ``archplace.Plan``, a plan
    file's plan; scored again by ``evaluate`` (from its JSON form, as a plan file) it gives the
    same iteration."""
    report = archplace.plan(model, "tpuv4", devices=8, global_batch=16, micro_batch_sizes=(1, 2), top_k=1)
    assert type(report.plan) is archplace.Plan
    plan = archplace.Plan.from_dict(through_json(report.plan.to_dict()))
    assert plan == report.plan
    run = archplace.EvaluateRun(archplace.ModelSpec(model), archplace.HardwareSpec("tpuv4"),
                                archplace.ClusterSpec(devices=8, global_batch=16), plan)
    again = api.evaluate_run(run)
    assert again.plan == report.plan
    assert again.iteration_time_s == pytest.approx(report.iteration_time_s, rel=1e-12)


def test_nothing_fits_is_out_of_memory(model: str) -> None:
    with pytest.raises(OutOfMemoryError, match="no plan fits in") as exc:
        api.plan("llama2-7b", "tpuv4", devices=1, global_batch=1, seq_len=128, micro_batch_sizes=(1,))
    assert isinstance(exc.value, InfeasibleError)


def test_a_missing_section_is_a_type_not_a_message(tmp_path: Path) -> None:
    preset = Path(archplace.__file__).parent / "hw" / "presets" / "tpuv4.yaml"
    data = yaml.safe_load(preset.read_text())
    del data["cluster"]
    chip = tmp_path / "chip.yaml"
    chip.write_text(yaml.safe_dump(data))
    with pytest.raises(MissingSectionError, match="missing section 'cluster'") as exc:
        load_cluster(chip, 8)
    assert exc.value.section == "cluster"
    copy = pickle.loads(pickle.dumps(exc.value))  # crosses to and from worker processes
    assert (type(copy), str(copy), copy.section) == (MissingSectionError, str(exc.value), "cluster")
    # estimate falls back to no cluster (TP 1 needs none)
    assert api.estimate_model(_tiny(tmp_path), str(chip)).hardware == data["accelerator"]["name"]


def _tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(TINY_GPT))
    return str(path)


variants = st.builds(Variant, st.sampled_from(list(SEARCHED_SCHEDULES)), st.integers(1, 8), st.integers(0, 3),
                     st.booleans())


@given(st.floats(0, 1e15, allow_nan=False), st.integers(1, 2**20), st.integers(1, 1024), st.integers(0, 50),
       st.integers(1, 2**20), st.integers(1, 4096), variants)
def test_closest_round_trip(peak: float, devices: int, pp: int, family: int, dp: int, count: int,
                            variant: Variant) -> None:
    closest = Closest(peak, devices, pp, family, dp, count, variant)
    assert Closest.from_dict(through_json(closest.to_dict())) == closest
    assert closest.order == (peak, devices, pp, family, dp, count)


def test_closest_refuses_bad_input() -> None:
    with pytest.raises(ConfigError, match="invalid closest candidate"):
        Closest.from_dict({"peak_bytes": 1.0})


def test_schedule_result_round_trip() -> None:
    problem = ScheduleProblem.from_dict({
        "tensor_cores": 2, "vector_cores": 1,
        "ops": [{"id": 0, "core_type": "tensor", "single_s": 0.004, "all_s": 0.002, "preds": []},
                {"id": 1, "core_type": "vector", "single_s": 0.001, "all_s": 0.001, "preds": [0]},
                {"id": 2, "core_type": "fused", "single_s": 0.002, "all_s": 0.001, "preds": [0]}]})
    result = solve_problem(problem, "list")
    assert ScheduleResult.from_dict(through_json(result.to_dict())) == result
    with pytest.raises(ConfigError, match="invalid schedule result"):
        ScheduleResult.from_dict({**result.to_dict(), "optimal": "yes"})


def test_model_estimate_round_trip(model: str) -> None:
    estimate = api.estimate_model(model, "tpuv4", micro_batch=2)
    assert isinstance(estimate, ModelEstimate)
    assert ModelEstimate.from_dict(through_json(estimate.to_dict())) == estimate
    with pytest.raises(ConfigError, match="invalid model estimate"):
        ModelEstimate.from_dict({"model": "m"})


def test_search_and_stored_results_round_trip(model: str, tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    store = tmp_path / "run.db"
    spec = SearchSpec(models=(model,), devices=8, global_batch=16, space=str(space), micro_batch_sizes=(1,),
                      objective="pareto", jobs=1, store=str(store), exact_top=1, top=2)
    result = api.search(spec)
    assert result.best is not None and result.exact and result.baseline is not None
    assert SearchResult.from_dict(through_json(result.to_dict())) == result
    rows = api.results(store)
    assert [row.design for row in rows] == [r.accelerator.name for r in result.evaluated]
    for row in rows:
        assert StoredResult.from_dict(through_json(row.to_dict())) == row
    with pytest.raises(ConfigError, match="invalid search result: missing field 'evaluated'"):
        SearchResult.from_dict({"model": "m"})


def test_results_rank_by_the_searchs_own_objective(model: str, tmp_path: Path) -> None:
    """A per-watt search's stored designs come back in per-watt order, not by throughput."""
    store = tmp_path / "run.db"
    spec = SearchSpec(models=(model,), devices=8, global_batch=16, micro_batch_sizes=(1,), recomputes="none",
                      zero_stages=(0,), objective="throughput-per-watt", strategy="exhaustive-all",
                      baseline=None, jobs=1, exact_top=0, store=str(store))
    result = api.search(spec)
    by_watt = [r.accelerator.name for r in result.evaluated]
    by_speed = [r.accelerator.name
                for r in api.search(spec.replace(objective="throughput", store=None)).evaluated]
    assert by_watt != by_speed  # the space ranks differently by the two objectives
    assert [row.design for row in api.results(store)] == by_watt


def test_python_and_cli_agree_on_how_many_plans() -> None:
    """``top_k`` (api.plan, PlanSpace) and ``plan --top`` default to the same count (issue #25):
    the option is derived from PlanSpace.top_k, leaves it at its default unless given, and shows
    that default."""
    import typer.main

    from archplace.cli import app
    from archplace.cli.derived import cli_options
    from archplace.cli.runs import PLAN_SPECS
    from archplace.front.specs import PlanSpace
    from archplace.front.specs.plan import TOP_K

    command = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    top = next(p for p in command.params if p.name == "top")
    assert top.default is None and top.help is not None and top.help.endswith(f"[{TOP_K}].")
    assert cli_options(*PLAN_SPECS)["top"].field.name == "top_k"
    python = inspect.signature(api.plan).parameters["top_k"].default
    assert python == PlanSpace().top_k == TOP_K
