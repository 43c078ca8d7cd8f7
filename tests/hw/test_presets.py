"""Hardware presets (archplace.hw.presets)."""

from __future__ import annotations

import copy
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from archplace.base.errors import ConfigError
from archplace.hw.accelerator import Dataflow
from archplace.hw.area import area_mm2
from archplace.hw.cluster import Topology
from archplace.hw.power import tdp_w
from archplace.hw.presets import (
    accelerator_preset_names,
    load_accelerator,
    load_cluster,
    preset_datasheet,
    preset_summaries,
)

PRESETS = ["a100-80gb", "b200-192gb", "gb200-nvl72", "h100-80gb", "h200-141gb", "h800-80gb",
           "phaze-ref", "tpuv4", "tpuv5p"]

VALID: dict[str, Any] = {
    "source": "test fixture",
    "accelerator": {
        "name": "chip",
        "tensor_cores": 4,
        "array_rows": 64,
        "array_cols": 32,
        "vector_cores": 2,
        "vector_lanes": 32,
        "buffer": "16 MiB",
        "hbm": {"value": "40 GiB", "source": "a datasheet"},
        "hbm_bandwidth": "2 TB/s",
        "clock": "1.5 GHz",
        "bytes_per_element": 2,
    },
    "cluster": {
        "devices_per_node": 8,
        "intra_node_bandwidth": "300 GB/s",
        "inter_node_bandwidth": "200 Gb/s",
        "intra_node_latency": "1 us",
        "inter_node_latency": "5 us",
        "topology": "switched",
    },
}


def write(tmp_path: Path, data: Any, name: str = "chip.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


def test_bundled_names() -> None:
    assert accelerator_preset_names() == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_peak_equals_datasheet(name: str) -> None:
    sheet = preset_datasheet(name)
    assert load_accelerator(name).peak_flop_per_s == pytest.approx(sheet["peak_flop_per_s"], rel=0.002)


@pytest.mark.parametrize(("name", "peak"), [
    ("tpuv4", 2 * 8 * 128 * 128 * 1.05e9),      # 275.25 TFLOP/s (Cloud TPU v4: 275)
    ("phaze-ref", 2 * 8 * 128 * 128 * 1.05e9),
    ("a100-80gb", 2 * 432 * 16 * 16 * 1.41e9),  # 311.87 TFLOP/s (A100 datasheet: 312)
    ("h100-80gb", 2 * 528 * 32 * 16 * 1.83e9),  # 989.43 TFLOP/s (H100 SXM datasheet: 989)
])
def test_peak_by_hand(name: str, peak: float) -> None:
    assert load_accelerator(name).peak_flop_per_s == pytest.approx(peak, rel=1e-12)


def test_gpu_presets() -> None:
    a100, h100 = load_accelerator("a100-80gb"), load_accelerator("h100-80gb")
    assert a100.hbm_bytes == h100.hbm_bytes == 80 * 2**30
    assert a100.hbm_bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    for name, nvlink, ib in (("a100-80gb", 300e9, 25e9), ("h100-80gb", 450e9, 50e9)):
        cluster = load_cluster(name, 1024)
        assert cluster.devices_per_node == 8
        assert cluster.topology is Topology.SWITCHED
        assert cluster.intra_node_bandwidth_bytes_per_s == pytest.approx(nvlink)
        assert cluster.inter_node_bandwidth_bytes_per_s == pytest.approx(ib)


def test_phaze_reference_preset() -> None:
    acc = load_accelerator("phaze-ref")
    assert (acc.tensor_cores, acc.array_rows, acc.vector_cores, acc.vector_lanes) == (8, 128, 2, 128)
    assert acc.buffer_bytes == 128 * 2**20
    assert area_mm2(acc) == pytest.approx(278.8, rel=0.02)


def test_tpuv4_fields() -> None:
    acc = load_accelerator("tpuv4")
    assert (acc.tensor_cores, acc.array_rows, acc.array_cols) == (8, 128, 128)
    assert (acc.vector_cores, acc.vector_lanes) == (2, 128 * 8)  # 128 lanes x 8 sublanes
    assert acc.dataflow is Dataflow.WS
    assert acc.buffer_bytes == 128 * 2**20
    assert acc.hbm_bytes == 32 * 2**30
    assert acc.hbm_bandwidth_bytes_per_s == pytest.approx(1.2e12)
    assert acc.clock_hz == pytest.approx(1.05e9)
    assert acc.bytes_per_element == 2


def test_tpuv4_peak_is_275_tflops() -> None:
    # 2 FLOP x 8 arrays x 128 x 128 MACs x 1.05 GHz = 275.2512 TFLOP/s
    assert load_accelerator("tpuv4").peak_flop_per_s == pytest.approx(275.2512e12, rel=1e-12)


def test_tpuv4_cluster() -> None:
    cluster = load_cluster("tpuv4", 4096)
    assert cluster.devices == 4096
    assert cluster.devices_per_node == 4
    assert cluster.topology is Topology.TORUS_3D
    assert cluster.intra_node_bandwidth_bytes_per_s == pytest.approx(300e9)
    assert cluster.inter_node_bandwidth_bytes_per_s == pytest.approx(300e9)
    assert cluster.intra_node_latency_s == pytest.approx(1e-6)


def test_small_cluster_caps_devices_per_node() -> None:
    assert load_cluster("tpuv4", 2).devices_per_node == 2


def test_every_bundled_number_has_a_source() -> None:
    for name in accelerator_preset_names():
        text = files("archplace.hw").joinpath("presets", f"{name}.yaml").read_text()
        data = yaml.safe_load(text)
        assert isinstance(data["source"], str) and data["source"]
        for section in ("accelerator", "cluster", "datasheet"):
            if section not in data:
                continue
            for key, raw in data[section].items():
                if key == "name":
                    continue
                assert isinstance(raw, dict), f"{name}: {section}.{key} has no source"
                assert str(raw.get("source", "")).strip(), f"{name}: {section}.{key} has no source"


def test_summaries() -> None:
    rows = preset_summaries()
    assert [r["name"] for r in rows] == PRESETS
    by_name = {r["name"]: r for r in rows}
    row = by_name["tpuv4"]
    assert row["peak_tflop_per_s"] == pytest.approx(275.2512)
    assert row["hbm_bytes"] == 32 * 2**30
    assert row["hbm"] == "32.0 GiB"
    assert row["area_mm2"] == pytest.approx(area_mm2(load_accelerator("tpuv4")))
    assert row["tdp_w"] == pytest.approx(tdp_w(load_accelerator("tpuv4")))
    assert row["datasheet_tdp_w"] == 192.0
    assert "ISCA 2023" in row["source"]
    assert by_name["phaze-ref"]["datasheet_tdp_w"] is None  # phaze-ref has no published TDP


def test_load_from_path(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    acc = load_accelerator(path)
    assert acc.name == "chip"
    assert (acc.array_rows, acc.array_cols) == (64, 32)
    assert acc.hbm_bytes == 40 * 2**30
    assert acc.clock_hz == pytest.approx(1.5e9)
    cluster = load_cluster(path, 64)
    assert cluster.inter_node_bandwidth_bytes_per_s == pytest.approx(25e9)
    assert cluster.inter_node_latency_s == pytest.approx(5e-6)
    assert cluster.topology is Topology.SWITCHED


def test_load_from_path_object(tmp_path: Path) -> None:
    assert load_accelerator(Path(write(tmp_path, VALID))).name == "chip"


def test_unknown_name() -> None:
    with pytest.raises(ConfigError) as info:
        load_accelerator("tpuv9")
    assert str(info.value) == ("unknown hardware preset 'tpuv9'; choose from: "
                               "a100-80gb, b200-192gb, gb200-nvl72, h100-80gb, h200-141gb, "
                               "h800-80gb, phaze-ref, tpuv4, tpuv5p")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_accelerator(str(tmp_path / "nope.yaml"))


def test_malformed_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "accelerator: {name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"chip\.yaml: not valid YAML") as info:
        load_accelerator(path)
    assert "\n" not in str(info.value)


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="top level"):
        load_accelerator(write(tmp_path, "- a\n- b\n"))


def mutated(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("accelerator", "hbm"), DELETE, "accelerator: missing field 'hbm'"),
        (("accelerator", "hbm_size"), "1 GiB", "accelerator: unknown field 'hbm_size'"),
        (("accelerator", "buffer"), "-16 MiB", "accelerator.buffer: must be positive"),
        (("accelerator", "buffer"), "0 MiB", "accelerator.buffer: must be positive"),
        (("accelerator", "buffer"), "16 MiX", "accelerator.buffer"),
        (("accelerator", "buffer"), float("inf"), "accelerator.buffer. must be a finite number"),
        (("accelerator", "clock"), "1.5 GB", "accelerator.clock"),
        (("accelerator", "hbm_bandwidth"), None, "accelerator.hbm_bandwidth"),
        (("accelerator", "tensor_cores"), -4, "accelerator.tensor_cores: must be positive"),
        (("accelerator", "tensor_cores"), 0, "accelerator.tensor_cores: must be positive"),
        (("accelerator", "tensor_cores"), 4.5, "accelerator.tensor_cores: expected a whole"),
        (("accelerator", "tensor_cores"), True, "accelerator.tensor_cores: expected a whole"),
        (("accelerator", "tensor_cores"), "4", "accelerator.tensor_cores: expected a whole"),
        (("accelerator", "name"), "", "accelerator.name"),
        (("accelerator", "hbm"), {"value": "4 GiB", "sauce": "x"}, "unknown field 'sauce'"),
        (("accelerator", "hbm"), {"source": "x"}, "missing field 'value'"),
        (("accelerator",), DELETE, "missing field 'accelerator'"),
        (("accelerator",), [1, 2], "accelerator: expected a mapping"),
        (("extra",), 1, "unknown field 'extra'"),
        (("accelerator", "dataflow"), "is", "accelerator.dataflow: unknown dataflow 'is'"),
        (("accelerator", "array_rows"), 2.0, "accelerator.array_rows: expected a whole"),
    ],
)
def test_bad_accelerator_fields(tmp_path: Path, path: tuple[str, ...], value: Any,
                                message: str) -> None:
    file = write(tmp_path, mutated(path, value))
    with pytest.raises(ConfigError, match=message) as info:
        load_accelerator(file)
    assert str(info.value).startswith(file)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("cluster",), DELETE, "missing section 'cluster'"),
        (("cluster", "topology"), "hypercube", "cluster.topology: unknown topology"),
        (("cluster", "intra_node_latency"), "-1 us", "cluster.intra_node_latency: must be >= 0"),
        (("cluster", "devices_per_node"), 0, "cluster.devices_per_node: must be positive"),
        (("cluster", "inter_node_bandwidth"), "0 GB/s", "inter_node_bandwidth: must be positive"),
        (("cluster", "intra_node_bandwidth"), DELETE, "missing field 'intra_node_bandwidth'"),
    ],
)
def test_bad_cluster_fields(tmp_path: Path, path: tuple[str, ...], value: Any,
                            message: str) -> None:
    file = write(tmp_path, mutated(path, value))
    with pytest.raises(ConfigError, match=message):
        load_cluster(file, 16)


def test_dataflow_and_datasheet(tmp_path: Path) -> None:
    data = copy.deepcopy(VALID)
    data["accelerator"]["dataflow"] = "os"
    data["datasheet"] = {"peak_tflop_per_s": {"value": 100, "source": "x"}, "tdp_w": 300}
    file = write(tmp_path, data)
    assert load_accelerator(file).dataflow is Dataflow.OS
    assert preset_datasheet(file) == {"peak_flop_per_s": 1e14, "tdp_w": 300.0}
    assert load_accelerator(write(tmp_path, VALID, "plain.yaml")).dataflow is Dataflow.WS
    assert preset_datasheet(write(tmp_path, VALID, "plain.yaml")) == {}
    data["datasheet"] = {"tdp": 300}
    with pytest.raises(ConfigError, match="datasheet: unknown field 'tdp'"):
        preset_datasheet(write(tmp_path, data, "bad.yaml"))


def test_zero_latency_is_allowed(tmp_path: Path) -> None:
    file = write(tmp_path, mutated(("cluster", "intra_node_latency"), 0))
    assert load_cluster(file, 16).intra_node_latency_s == 0.0


@pytest.mark.parametrize("devices", [0, -8, 2.5, True])
def test_bad_device_count(devices: Any) -> None:
    with pytest.raises(ConfigError, match="devices"):
        load_cluster("tpuv4", devices)
