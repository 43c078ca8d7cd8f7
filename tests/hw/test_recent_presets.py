"""The 2024-2025 training chips of issue #14: h800-80gb, h200-141gb, b200-192gb, gb200-nvl72
(72 GPUs in one NVLink domain) and tpuv5p; and groups inside an NVLink domain of 72."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from archplace.cli import main
from archplace.cost.collective import cluster_collective_time_s
from archplace.front import api
from archplace.hw.area import area_mm2
from archplace.hw.cluster import Cluster, Topology
from archplace.hw.power import tdp_w
from archplace.hw.presets import (
    efficiency_sources,
    load_accelerator,
    load_cluster,
    preset_datasheet,
)
from archplace.placement.timing import dp_allreduce_cost, group_span

NEW = ["h800-80gb", "h200-141gb", "b200-192gb", "gb200-nvl72", "tpuv5p"]
PRESET_DIR = Path(__file__).resolve().parents[2] / "src" / "archplace" / "hw" / "presets"

# name: (dense bf16 peak of the datasheet in TFLOP/s, HBM bytes, HBM bytes/s)
CITED = {
    "h800-80gb": (989, 80 * 2**30, 3.35e12),     # H100 SXM chip (DeepSeek ISCA 2025)
    "h200-141gb": (989, 141 * 2**30, 4.8e12),    # H200 datasheet: 1,979 sparse, 141GB, 4.8TB/s
    "b200-192gb": (2250, 192 * 2**30, 8e12),     # DGX B200: 36 PF sparse / 8 / 2; 64 TB/s / 8
    "gb200-nvl72": (2500, 186 * 2**30, 8e12),    # NVL72: 360 PF sparse / 72 / 2; 13.4 TB, 576 TB/s
    "tpuv5p": (459, 95 * 2**30, 2.765e12),       # Cloud TPU v5p: 459 TFLOPs, 95 GiB, 2765 GBps
}

# name: (devices per node, intra-node GB/s, inter-node GB/s, per device and direction)
LINKS = {
    "h800-80gb": (8, 200, 50),     # 400 GB/s NVLink both ways; 8 x 400G IB per node
    "h200-141gb": (8, 450, 50),
    "b200-192gb": (8, 900, 50),    # NVLink 5, 1.8 TB/s both ways
    "gb200-nvl72": (72, 900, 50),
    "tpuv5p": (4, 600, 600),       # ICI 4800 Gbps per chip
}


@pytest.mark.parametrize("name", NEW)
def test_peak_equals_the_dense_bf16_datasheet_figure(name: str) -> None:
    peak_tflops, _, _ = CITED[name]
    assert preset_datasheet(name)["peak_flop_per_s"] == peak_tflops * 1e12
    assert load_accelerator(name).peak_flop_per_s == pytest.approx(peak_tflops * 1e12, rel=0.005)


@pytest.mark.parametrize(("name", "peak"), [
    ("h800-80gb", 2 * 528 * 32 * 16 * 1.83e9),     # 989.36 TFLOP/s
    ("h200-141gb", 2 * 528 * 32 * 16 * 1.83e9),
    ("b200-192gb", 2 * 592 * 32 * 32 * 1.856e9),   # 2,250.24 TFLOP/s
    ("gb200-nvl72", 2 * 592 * 32 * 32 * 2.062e9),  # 2,500.00 TFLOP/s
    ("tpuv5p", 2 * 8 * 128 * 128 * 1.751e9),       # 459.01 TFLOP/s: 8 MXUs of 128 x 128
])
def test_peak_by_hand(name: str, peak: float) -> None:
    assert load_accelerator(name).peak_flop_per_s == pytest.approx(peak, rel=1e-12)


@pytest.mark.parametrize("name", NEW)
def test_hbm_as_cited_and_area_power_computed(name: str) -> None:
    _, hbm, bandwidth = CITED[name]
    acc = load_accelerator(name)
    assert acc.name == name
    assert acc.hbm_bytes == hbm
    assert acc.hbm_bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=1e-12)
    assert acc.bytes_per_element == 2
    assert math.isfinite(area_mm2(acc)) and area_mm2(acc) > 0
    assert math.isfinite(tdp_w(acc)) and tdp_w(acc) > 0


@pytest.mark.parametrize("name", NEW)
def test_cluster_links(name: str) -> None:
    per_node, intra, inter = LINKS[name]
    cluster = load_cluster(name, 1152)
    assert cluster.devices_per_node == per_node
    assert cluster.intra_node_bandwidth_bytes_per_s == pytest.approx(intra * 1e9)
    assert cluster.inter_node_bandwidth_bytes_per_s == pytest.approx(inter * 1e9)
    assert cluster.topology is (Topology.TORUS_3D if name == "tpuv5p" else Topology.SWITCHED)


def test_h800_nvlink_efficiency_is_deepseeks_measured_160_gbps() -> None:
    cluster = load_cluster("h800-80gb", 2048)
    _, nvlink = cluster.link(8)
    _, ib = cluster.link(9)
    assert nvlink == pytest.approx(160e9)           # DeepSeek-V3 report, sec. 3.2.2
    assert nvlink / ib == pytest.approx(160 / 48)   # IB at NCCL's 0.96 of 50 GB/s
    assert "3.2.2" in efficiency_sources("h800-80gb")["intra_node_collective"]


def test_h800_and_h200_keep_the_h100_chip() -> None:
    h100 = load_accelerator("h100-80gb")
    for name in ("h800-80gb", "h200-141gb"):
        acc = load_accelerator(name)
        assert (acc.tensor_cores, acc.array_rows, acc.array_cols, acc.clock_hz) == \
            (h100.tensor_cores, h100.array_rows, h100.array_cols, h100.clock_hz)
        assert acc.efficiency is not None and h100.efficiency is not None
        assert acc.efficiency.gemm_sustained == h100.efficiency.gemm_sustained


@pytest.mark.parametrize(("name", "sms", "sustained"), [
    # MAMF table: B200 1745.0 TFLOP/s at 1792x16128x3072, 882 tiles in 6 waves of 148
    ("b200-192gb", 148, 1745.0e12 / (2 * 592 * 1024 * 1.856e9 * 882 / 888)),
    # GB200 1822.0 TFLOP/s at 4096x9728x2048, 1216 tiles in 9 waves of 148
    ("gb200-nvl72", 148, 1822.0e12 / (2 * 592 * 1024 * 2.062e9 * 1216 / 1332)),
])
def test_blackwell_gemm_efficiency_reproduces_the_measurement(name: str, sms: int,
                                                              sustained: float) -> None:
    efficiency = load_accelerator(name).efficiency
    assert efficiency is not None
    assert efficiency.sms == sms
    assert efficiency.gemm_sustained == pytest.approx(sustained, abs=5e-5)


def test_tpuv5p_keeps_the_cycle_model() -> None:
    assert load_accelerator("tpuv5p").efficiency is None
    assert efficiency_sources("tpuv5p") == {}


def test_every_new_number_has_a_source() -> None:
    for name in NEW:
        data = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
        for section in ("accelerator", "cluster", "datasheet", "efficiency"):
            for key, field in data.get(section, {}).items():
                if key == "name":
                    continue
                assert isinstance(field, dict) and field.get("source", "").strip(), (name, key)


def test_hardware_lists_the_new_presets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["hardware"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None)
    for name in NEW:
        assert name in out


@pytest.mark.parametrize("name", NEW)
def test_evaluate_a_small_model_on_each(name: str) -> None:
    result = api.evaluate("opt-350m", name, devices=8, global_batch=16, tp=2, pp=2, dp=2,
                          micro_batch=2, seq_len=1024)
    assert result.iteration_time_s > 0 and 0 < result.mfu < 1
    assert max(stage.total for stage in result.memory) <= load_accelerator(name).hbm_bytes


# --- NVLink domains of 72 ------------------------------------------------------------------

def nvl72(devices: int) -> Cluster:
    return load_cluster("gb200-nvl72", devices)


def test_a_group_of_up_to_72_consecutive_ranks_uses_nvlink() -> None:
    cluster = nvl72(144)
    nvlink = (3e-6, 900e9 * 0.822)
    ib = (6e-6, 50e9 * 0.96)
    for size in (2, 4, 8, 24, 36, 72):        # divisors of 72: every group inside one rack
        assert cluster.group_link(size) == pytest.approx(nvlink)
    for size in (16, 32, 64):                 # ranks 64-79, 64-95, 64-127 span two racks
        assert cluster.group_link(size) == pytest.approx(ib)
    assert cluster.group_link(73) == pytest.approx(ib)
    # one rack only: every group is inside it
    assert nvl72(72).group_link(64) == pytest.approx(nvlink)


def test_collective_cost_of_a_72_rank_group_is_nvls_in_the_rack() -> None:
    cluster = nvl72(144)
    size_bytes = 1e9
    time_s = cluster_collective_time_s(cluster, "all_reduce", size_bytes, 72)
    # NCCL's NVLS on one NVLink domain: 32 channels (NCCL_MAX_NVLS_ARITY) of 20 GB/s (the fastest
    # sm100 speed with 32 x s <= 18 x 40.1 GB/s), 0.74 efficiency, x 31/32, x 2 for all-reduce,
    # algorithm bandwidth x 72 / 142, latency 25 us
    bus = 32 * min(20 * 0.74 * 31 / 32 * 2, 40.0)
    assert time_s == pytest.approx(25e-6 + size_bytes / (bus * 72 / 142 * 1e9), rel=1e-12)
    # the same group on 8-GPU nodes (b200-192gb links) crosses InfiniBand and is slower
    eight = load_cluster("b200-192gb", 144)
    assert cluster_collective_time_s(eight, "all_reduce", size_bytes, 72) > 2 * time_s


def test_dp_group_of_72_in_one_domain_and_hierarchical_across_domains() -> None:
    alpha, beta = 3e-6, 900e9 * 0.822
    start_s, per_byte_s = dp_allreduce_cost(nvl72(72), tp=1, pp=1, dp=72)
    assert start_s == pytest.approx(2 * 71 * alpha)
    assert per_byte_s == pytest.approx(2 * 71 / 72 / beta)
    # tp 8 x dp 18 on two racks: 9 DP members per rack over NVLink, then 2 racks over IB
    start_s, per_byte_s = dp_allreduce_cost(nvl72(144), tp=8, pp=1, dp=18)
    ib_alpha, ib_beta = 6e-6, 50e9 * 0.96
    assert start_s == pytest.approx(2 * 8 * alpha + 2 * 1 * ib_alpha)
    assert per_byte_s == pytest.approx(2 * 8 / 9 / beta + 2 * 1 / 2 / (9 * ib_beta))


def test_group_link_equals_link_of_the_span_on_8_gpu_nodes() -> None:
    """No number changes for the existing presets: with 8 devices per node and power-of-two
    groups the new rule is the old one."""
    cluster = load_cluster("h100-80gb", 1024)
    for size in (1, 2, 4, 8, 16, 64):
        for stride in (1, 2, 4, 8, 16):
            assert cluster.group_link(size, stride) == cluster.link(group_span(size, stride))


def test_plan_on_two_nvl72_racks_charges_straddling_tp_groups_to_infiniband() -> None:
    common = dict(devices=144, global_batch=144, pp=1, micro_batch=1, seq_len=1024)
    tp8 = api.evaluate("opt-350m", "gb200-nvl72", tp=8, dp=18, **common)
    tp16 = api.evaluate("opt-350m", "gb200-nvl72", tp=16, dp=9, **common)
    # TP 16 groups 64-79 span both racks: their all-reduces run over the NICs of the 8 GPUs on
    # each side (NCCL's ring, one channel per NIC), several times slower than inside the rack
    assert tp16.comm_s["tp"]["total"] > 4 * tp8.comm_s["tp"]["total"]


def test_dp_over_a_72_gpu_domain_beats_8_gpu_nodes(tmp_path: Path) -> None:
    """The same chip and links with 8 GPUs per NVLink domain: a DP group of 72 then crosses
    InfiniBand, so its gradient reduction is slower."""
    data = yaml.safe_load((PRESET_DIR / "gb200-nvl72.yaml").read_text())
    data["cluster"]["devices_per_node"]["value"] = 8
    eight = tmp_path / "gb200-nodes-of-8.yaml"
    eight.write_text(yaml.safe_dump(data))
    common = dict(devices=72, global_batch=72, tp=1, pp=1, dp=72, micro_batch=1, seq_len=1024)
    rack = api.evaluate("opt-350m", "gb200-nvl72", **common)
    nodes = api.evaluate("opt-350m", str(eight), **common)
    assert rack.breakdown_s["compute"] == pytest.approx(nodes.breakdown_s["compute"])
    assert nodes.comm_s["dp"]["total"] > 2 * rack.comm_s["dp"]["total"]
