"""archplace calibrate: a round trip on synthetic runs (known parameters recovered), bounds, the
written hardware file, cross-validation, and refusals of bad input (exit 2, one line)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from archplace.base.errors import ConfigError
from archplace.calibration import PARAMETERS, calibrate, calibrated_yaml, cross_validate, read_runs
from archplace.calibration.crossval import source_group
from archplace.front import api
from archplace.front.specs.resolved import ResolvedHardware
from archplace.hw.presets import accelerator_preset_names, load_accelerator
from archplace.validation.runs import evaluate_kwargs, load_runs, write_model_config
from calibration_runs import RUNS, TRUTH, write_runs
from cli_helpers import run as run_cli

DAY = datetime.date(2026, 11, 27)


def _runs_file(tmp_path: Path, hardware: str = "a100-80gb") -> Path:
    """One run (narrow, eager attention) measured at 1 s."""
    entry = {**RUNS[1], "hardware": hardware}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [entry]}))
    return path


@pytest.mark.slow
def test_round_trip_recovers_the_known_parameters_and_the_file_reproduces_the_fit(
        synthetic_runs: Path, tmp_path: Path) -> None:
    result = api.calibrate(synthetic_runs, "a100-80gb", out=tmp_path / "mine.yaml")
    for name, value in TRUTH.items():
        assert result.values[name] == pytest.approx(value, rel=1e-5), name
    start = load_accelerator("a100-80gb").efficiency
    assert start is not None
    assert [p.start for p in result.parameters] == [start.sustained_clock_hz, start.kernel_floor_s]
    for residual in result.residuals:
        assert residual.after_s == pytest.approx(residual.measured_s, rel=1e-6)
        assert abs(residual.error_before) > 0.02  # the preset's values were really off
    # the written file is a hardware file every command reads, with the fitted values ...
    written = tmp_path / "mine.yaml"
    chip = load_accelerator(written)
    assert chip.efficiency is not None
    assert chip.efficiency.sustained_clock_hz == result.values["sustained_clock"]
    # ... whose evaluations give the fitted predictions exactly
    for run, residual in zip(load_runs(synthetic_runs), result.residuals, strict=True):
        kwargs = evaluate_kwargs(run, str(write_model_config(run, tmp_path)))
        assert api.evaluate(**{**kwargs, "hardware": str(written)}).iteration_time_s == pytest.approx(
            residual.after_s, rel=1e-12)
    data = yaml.safe_load(written.read_text())
    assert "calibrated by archplace calibrate on" in data["efficiency"]["sustained_clock"]["source"]
    floor_source = data["efficiency"]["kernel_floor"]["source"]
    assert "3 runs of runs.yaml (cases wide, narrow-eager, tp2)" in floor_source
    record = data["calibration"]
    assert [p["name"] for p in record["parameters"]] == ["sustained_clock", "kernel_floor"]
    assert [r["case"] for r in record["runs"]] == ["wide", "narrow-eager", "tp2"]
    assert record["parameters"][0]["low"] == PARAMETERS["sustained_clock"].low
    # unfitted figures keep their preset values and sources
    assert data["efficiency"]["attention_fwd"]["value"] == 0.73


@pytest.mark.slow
def test_a_value_outside_the_bounds_ends_on_the_bound(tmp_path: Path) -> None:
    low = PARAMETERS["sustained_clock"].low
    path = write_runs(tmp_path / "runs.yaml", {"sustained_clock": low / 2}, RUNS[:1])
    result = calibrate(read_runs(path), "a100-80gb", fit_parameters="sustained_clock", date=DAY)
    fitted = result.parameters[0]
    assert fitted.value == pytest.approx(low, rel=1e-9) and fitted.value >= low
    assert fitted.at_bound
    assert any(note.startswith("sustained_clock: the fit ended on its bound") for note in result.notes)
    assert result.residuals[0].error_after > 0.05  # the bound keeps it too fast
    assert result.date == "2026-11-27"


@pytest.mark.slow
def test_cross_validation_of_exact_runs_predicts_each_held_out_run(synthetic_runs: Path) -> None:
    # the synthetic runs follow the model exactly, so any two of them recover the truth and
    # predict the third: every out-of-sample error is ~0, while the preset's are not
    result = cross_validate(read_runs(synthetic_runs), "a100-80gb", "sustained_clock,kernel_floor")
    assert result.cases == ("wide", "narrow-eager", "tp2")
    for kind in ("in_sample", "loo", "loso"):
        mean, worst, count = result.summary(kind)
        assert count == 3 and worst < 1e-5, kind
    assert result.summary("uncalibrated")[0] > 0.02


@pytest.mark.slow
def test_a_parameter_no_run_depends_on_is_left_at_its_start(tmp_path: Path) -> None:
    # one eager-attention run: the FlashAttention figure enters no prediction
    runs = read_runs(_runs_file(tmp_path))
    result = calibrate(runs, "a100-80gb", fit_parameters=["attention_bwd"], date=DAY)
    assert result.values == {"attention_bwd": 0.63}
    assert result.notes == ("attention_bwd: no fitted run depends on it; kept at its start value",)


def test_every_parameter_reads_back_what_it_writes_and_every_preset_lies_in_its_bounds() -> None:
    hardware = ResolvedHardware.load("a100-80gb")
    with pytest.raises(TypeError):
        PARAMETERS["hbm"] = PARAMETERS["gemm_sustained"]  # type: ignore[index]
    for parameter in PARAMETERS.values():
        middle = (parameter.low + parameter.high) / 2
        assert parameter.read(parameter.write(hardware, middle)) == middle, parameter.name
        assert 0 <= parameter.low < parameter.high, parameter.name
        assert parameter.unit != "" or parameter.high <= 1, parameter.name  # a fraction or share
    for name in accelerator_preset_names():
        chip = ResolvedHardware.load(name)
        if chip.accelerator.efficiency is None:
            continue
        for parameter in PARAMETERS.values():
            assert parameter.low <= parameter.read(chip) <= parameter.high, (name, parameter.name)


def test_a_written_link_efficiency_reaches_the_cluster_of_any_size() -> None:
    hardware = PARAMETERS["inter_node_collective"].write(ResolvedHardware.load("a100-80gb"), 0.5)
    links = hardware.links_of(64)
    assert links.inter_node_efficiency == 0.5
    assert (links.devices, links.devices_per_node) == (64, 8)
    assert hardware.links_of(4).devices_per_node == 4


@pytest.mark.slow
def test_the_yaml_of_a_calibration_loads(tmp_path: Path) -> None:
    runs = read_runs(_runs_file(tmp_path))
    result = calibrate(runs, "a100-80gb", fit_parameters=["attention_bwd"], date=DAY,
                       runs_file="runs.yaml")
    path = tmp_path / "mine.yaml"
    path.write_text(calibrated_yaml(result))
    assert load_accelerator(path).efficiency == load_accelerator("a100-80gb").efficiency
    assert yaml.safe_load(path.read_text())["calibration"]["date"] == "2026-11-27"


def test_source_groups_are_publications() -> None:
    runs = load_runs(Path(__file__).parents[1] / "validation" / "published_runs.yaml")
    assert sorted({source_group(r) for r in runs if r.hardware == "a100-80gb"}) == [
        "Korthikanti et al. 2022", "Narayanan et al. SC 2021", "llm-foundry benchmarking README"]


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("argv", "expected"), [
    (["--fit", "gemm_sustained,warp_speed"], "unknown parameter 'warp_speed'; choose from: gemm_sustained"),
    (["--fit", ","], "--fit: name at least one parameter"),
    (["--variant", "fastest"], "unknown variant 'fastest'"),
])
def test_bad_options_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          argv: list[str], expected: str) -> None:
    status, out, err = run_cli(["calibrate", str(_runs_file(tmp_path)), "--hardware", "a100-80gb",
                                *argv], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and expected in err


def test_runs_on_other_hardware_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _runs_file(tmp_path, "h100-80gb")
    status, _, err = run_cli(["calibrate", str(path), "--hardware", "a100-80gb"], capsys)
    assert status == 2 and err.count("\n") == 1
    assert "no run was measured on a100-80gb (a100-80gb); the runs are on h100-80gb" in err


@pytest.mark.parametrize(("text", "expected"), [
    ("runs: []\n", "no runs"),
    ("runs:\n  - {case: x}\n", "a run lacks the field 'source'"),
    ("runs: [\n", "runs.yaml: not valid YAML"),
    ("[1, 2]\n", "runs.yaml: expected a mapping of fields at the top level, got a list"),
    ("runs: {a: 1}\n", "runs.yaml: "),
    ("runs:\n  - {case: x, source: s, hardware: a100-80gb, model: [1], plan: {}, published: {}}\n",
     "runs.yaml: "),
])
def test_bad_runs_files_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             text: str, expected: str) -> None:
    path = tmp_path / "runs.yaml"
    path.write_text(text)
    status, out, err = run_cli(["calibrate", str(path), "--hardware", "a100-80gb"], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and expected in err


def test_missing_runs_file_and_hardware_without_efficiency_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_cli(["calibrate", str(tmp_path / "none.yaml"), "--hardware", "a100-80gb"], capsys)
    assert status == 2 and "none.yaml" in err and err.count("\n") == 1
    status, _, err = run_cli(["calibrate", str(_runs_file(tmp_path)), "--hardware", "tpuv4"], capsys)
    assert status == 2 and err.count("\n") == 1
    assert "tpuv4: no efficiency section, so no gemm_sustained to calibrate" in err


def test_outputs_are_checked_before_the_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _runs_file(tmp_path)
    status, _, err = run_cli(["calibrate", str(runs), "--hardware", "a100-80gb", "-o", str(tmp_path)],
                             capsys)
    assert status == 2 and f"--out {tmp_path}: is a directory" in err and err.count("\n") == 1
    status, _, err = run_cli(["calibrate", str(runs), "--hardware", "a100-80gb", "-o", str(runs)], capsys)
    assert status == 2 and "is the runs file, which calibrate only reads" in err


@pytest.mark.slow
def test_too_few_runs_for_the_parameters_are_refused(tmp_path: Path) -> None:
    runs = read_runs(_runs_file(tmp_path))
    with pytest.raises(ConfigError, match="fitting 2 parameters needs at least as many runs, got 1"):
        calibrate(runs, "a100-80gb", fit_parameters="gemm_sustained,hbm")
    with pytest.raises(ConfigError, match="no runs given"):
        calibrate((), "a100-80gb")


def test_a_non_positive_size_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = {**RUNS[1], "plan": {**RUNS[1]["plan"], "gpus": -2}}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [entry]}))
    status, _, err = run_cli(["calibrate", str(path), "--hardware", "a100-80gb"], capsys)
    assert status == 2 and err.count("\n") == 1
    assert "narrow-eager: gpus must be a whole number >= 1, got -2" in err
