"""Plausibility ranges of the hardware files (issue #23: a negative datasheet TDP, HBM at
1e-30 TB/s and a 1 Hz clock were accepted): a value just outside either bound of every numeric
field of a preset, a cluster preset and a search space is refused in one line naming the file
and the field; every bundled preset and space still loads."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from archplace.base.errors import ConfigError
from archplace.hw._config import PLAUSIBLE, Plausible, shown
from archplace.hw.presets import (
    accelerator_preset_names,
    cluster_preset_names,
    load_accelerator,
    load_cluster,
    preset_datasheet,
)
from archplace.hw.space import load_space, space_names
from cli_helpers import run

CITED = "a test figure"
PRESET: dict[str, Any] = {
    "source": "test fixture",
    "accelerator": {"name": "chip", "tensor_cores": 4, "array_rows": 64, "array_cols": 32, "vector_cores": 2,
                    "vector_lanes": 32, "buffer": "16 MiB", "hbm": "40 GiB", "hbm_bandwidth": "2 TB/s",
                    "clock": "1.5 GHz", "bytes_per_element": 2, "fp8_speedup": 2},
    "cluster": {"devices_per_node": 8, "intra_node_bandwidth": "300 GB/s", "inter_node_bandwidth": "25 GB/s",
                "intra_node_latency": "1 us", "inter_node_latency": "5 us", "topology": "switched"},
    "datasheet": {"peak_tflop_per_s": 300, "tdp_w": 400},
    "efficiency": {key: {"value": value, "source": CITED} for key, value in (
        ("sms", 108), ("gemm_tiles", ["256x128"]), ("gemm_sustained", 0.85), ("hbm", 0.9),
        ("attention_fwd", 0.7), ("attention_bwd", 0.6), ("intra_node_collective", 0.8),
        ("inter_node_collective", 0.9))},
}
SPACE: dict[str, Any] = {"base": "tpuv4", "tensor_cores": [1, 8], "array_dim": [128], "vector_cores": [2],
                         "buffer": ["8 MiB"], "hbm": ["32 GiB"], "area_min_fraction": 0.0}

# (section, field as written, key of PLAUSIBLE); values are written bare, in SI base units
PRESET_FIELDS = [("accelerator", f, f) for f in ("tensor_cores", "array_rows", "array_cols", "vector_cores",
                                                 "vector_lanes", "buffer", "hbm", "hbm_bandwidth", "clock",
                                                 "bytes_per_element", "fp8_speedup")]
PRESET_FIELDS += [("cluster", f, f) for f in ("devices_per_node", "intra_node_bandwidth",
                                              "inter_node_bandwidth", "intra_node_latency",
                                              "inter_node_latency")]
PRESET_FIELDS += [("datasheet", "peak_tflop_per_s", "peak_tflop_per_s"), ("datasheet", "tdp_w", "tdp_w")]
PRESET_FIELDS += [("efficiency", "sms", "sms"), ("efficiency", "gemm_tiles", "gemm_tiles"),
                  ("efficiency", "hbm", "hbm_fraction")]
PRESET_FIELDS += [("efficiency", f, f) for f in ("gemm_sustained", "attention_fwd", "attention_bwd",
                                                 "intra_node_collective", "inter_node_collective")]
SPACE_FIELDS = ["tensor_cores", "array_dim", "vector_cores", "buffer", "hbm", "area_max_mm2",
                "vector_lanes_per_col", "fp8_speedup"]
WHOLE = {"tensor_cores", "array_rows", "array_cols", "array_dim", "vector_cores", "vector_lanes",
         "vector_lanes_per_col", "bytes_per_element", "devices_per_node", "sms", "gemm_tiles"}
LISTS = {"tensor_cores", "array_dim", "vector_cores", "buffer", "hbm"}


def outside(key: str) -> list[float]:
    """A value just below the low bound and one just above the high one."""
    bounds = PLAUSIBLE[key]
    if key in WHOLE:
        return [bounds.low - 1, bounds.high + 1]
    below = bounds.low * (1 - 1e-6) if bounds.low > 0 else -1e-9
    return [below, bounds.high * (1 + 1e-6)]


def written(key: str, value: float) -> Any:
    if key in WHOLE:
        return int(value)
    return value


def write(tmp_path: Path, data: dict[str, Any], name: str) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def refused(call: Any, file: str, field: str) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    message = str(info.value)
    assert message.startswith(file) and f"{field}" in message and "\n" not in message
    return message


@pytest.mark.parametrize(("section", "field", "key"), PRESET_FIELDS)
def test_a_preset_field_just_outside_its_range_is_refused(tmp_path: Path, section: str, field: str,
                                                          key: str) -> None:
    for i, value in enumerate(outside(key)):
        data = copy.deepcopy(PRESET)
        raw: Any = written(key, value)
        if key == "gemm_tiles":
            raw = [f"{max(raw, 0)}x128"]
        data[section][field] = {"value": raw, "source": CITED} if section == "efficiency" else raw
        file = write(tmp_path, data, f"chip{i}.yaml")
        if section == "cluster":
            message = refused(lambda f=file: load_cluster(f, 16), file, f"cluster.{field}")
        else:
            message = refused(lambda f=file: load_accelerator(f), file, f"{section}.{field}")
        if section == "datasheet":
            refused(lambda f=file: preset_datasheet(f), file, f"datasheet.{field}")
        if section == "cluster":  # the chip of a file with impossible links is refused too
            refused(lambda f=file: load_accelerator(f), file, f"cluster.{field}")
        if PLAUSIBLE[key].low_open:  # fractions: "expected a fraction in (0, 1]"
            assert "(0, 1]" in message
        elif value > PLAUSIBLE[key].high:  # above: the plausibility message, with the range and unit
            assert f"is outside the plausible range {PLAUSIBLE[key].text()} (" in message


@pytest.mark.parametrize("field", SPACE_FIELDS)
def test_a_space_value_just_outside_its_range_is_refused(tmp_path: Path, field: str) -> None:
    for i, value in enumerate(outside(field)):
        raw: Any = written(field, value)
        file = write(tmp_path, dict(SPACE, **{field: [raw] if field in LISTS else raw}), f"space{i}.yaml")
        message = refused(lambda f=file: load_space(f), file, field)
        if value > PLAUSIBLE[field].high:
            assert "is outside the plausible range" in message


def test_the_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    data = copy.deepcopy(PRESET)
    data["accelerator"].update(clock=PLAUSIBLE["clock"].high, hbm_bandwidth=PLAUSIBLE["hbm_bandwidth"].low,
                               buffer=PLAUSIBLE["buffer"].low,
                               tensor_cores=int(PLAUSIBLE["tensor_cores"].high))
    data["cluster"].update(intra_node_latency=0, inter_node_latency=PLAUSIBLE["inter_node_latency"].high)
    data["datasheet"]["tdp_w"] = PLAUSIBLE["tdp_w"].high
    file = write(tmp_path, data, "edge.yaml")
    assert load_accelerator(file).clock_hz == 1e10
    assert load_cluster(file, 16).inter_node_latency_s == 1e-3


def test_the_issue_examples_are_refused(tmp_path: Path) -> None:
    cases = (("accelerator", "hbm_bandwidth", "1e-30 TB/s", "accelerator.hbm_bandwidth"),
             ("accelerator", "clock", "1 Hz",
              "accelerator.clock: 1 Hz is outside the plausible range 50 MHz to 10 GHz"),
             ("datasheet", "tdp_w", -192, "datasheet.tdp_w: must be positive"))
    for section, field, value, text in cases:
        data = copy.deepcopy(PRESET)
        data[section][field] = value
        file = write(tmp_path, data, "issue.yaml")
        assert text in refused(lambda f=file: load_accelerator(f), file, field)


def test_every_bundled_preset_and_space_is_plausible() -> None:
    for name in accelerator_preset_names():
        load_accelerator(name)
        load_cluster(name, 1024)
        preset_datasheet(name)
    for name in cluster_preset_names():
        load_cluster(name, 1024)
    for name in space_names():
        assert load_space(name).designs()


def test_shown_writes_the_unit() -> None:
    assert shown(2.0**24, "B") == "16 MiB"
    assert shown(5e7, "Hz") == "50 MHz" and shown(3e-6, "s") == "3 µs" and shown(0.0, "s") == "0 s"
    assert shown(65_536, "") == "65,536" and shown(0.001, "TFLOP/s") == "0.001 TFLOP/s"
    assert Plausible(0.0, 1.0, "", "x", low_open=True).text() == "above 0 to 1"


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--clock", "1 Hz", "clock"), ("--clock", "20 GHz", "clock"),
    ("--hbm-bandwidth", "1e-30 TB/s", "hbm_bandwidth"), ("--hbm-bandwidth", "1000 TB/s", "hbm_bandwidth"),
    ("--buffer", "1 B", "buffer"), ("--buffer", "1 TiB", "buffer"),
    ("--cores", "100000", "tensor_cores"), ("--array", "8192x128", "array_rows"),
    ("--array", "128x8192", "array_cols"),
])
def test_estimate_matmul_options_outside_their_range_are_refused(option: str, value: str, field: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "matmul", "--m", "64", "--k", "64", "--n", "64", "--array", "128x128"]
    code, _, err = run([*argv, option, value], capsys)
    where = {"--array": f"--array {field.removeprefix('array_')}"}.get(option, option)
    assert code == 2
    assert err.startswith(f"archplace: error: {where}: ") and PLAUSIBLE[field].text() in err
    assert run(argv, capsys)[0] == 0
