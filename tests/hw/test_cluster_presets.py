"""Cluster presets: links without a chip (archplace/hw/clusters/*.yaml), e.g. phaze-paper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.collective import cluster_collective_time_s
from archplace.front import api
from archplace.front.specs import ClusterSpec, HardwareSpec, ModelSpec, PlanRun, PlanSpace
from archplace.hw.cluster import Topology
from archplace.hw.presets import (
    accelerator_preset_names,
    cluster_preset_names,
    load_accelerator,
    load_cluster,
)
from archplace.placement.result import PlanResult

GIB = 2**30
TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 256,
            "vocab_size": 1024}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("clusters") / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_GPT))
    return str(path)


def test_names_do_not_clash_with_hardware_presets() -> None:
    assert cluster_preset_names() == ["phaze-paper"]
    assert not set(cluster_preset_names()) & set(accelerator_preset_names())


def test_phaze_paper_links() -> None:
    # PHAZE, Estimator/architecture.py: bandwidth = 4 * 1024**3 for every transfer, no latency
    cluster = load_cluster("phaze-paper", 1024)
    assert cluster.devices == 1024
    assert cluster.devices_per_node == 8
    assert cluster.intra_node_bandwidth_bytes_per_s == cluster.inter_node_bandwidth_bytes_per_s == 4 * GIB
    assert cluster.intra_node_latency_s == cluster.inter_node_latency_s == 0.0
    assert cluster.topology is Topology.RING
    assert cluster.intra_node_efficiency == cluster.inter_node_efficiency == 1.0
    assert load_cluster("phaze-paper", 4).devices_per_node == 4


@pytest.mark.parametrize(("group", "stride"), [(8, 1), (4, 1), (16, 8), (1024, 1)])
def test_phaze_paper_all_reduce_is_phazes(group: int, stride: int) -> None:
    # PHAZE's allreduce_estimator: 2 (p - 1) / p * bytes / bandwidth, inside a node or across
    cluster = load_cluster("phaze-paper", 1024)
    n = 3 * 2**20
    expected = 2 * (group - 1) / group * n / (4 * GIB)
    got = cluster_collective_time_s(cluster, "all_reduce", n, group, stride)
    assert got == pytest.approx(expected, rel=1e-12)
    assert cluster_collective_time_s(cluster, "send_recv", n, 2, stride) == pytest.approx(n / (4 * GIB))


def test_a_cluster_preset_is_no_chip() -> None:
    with pytest.raises(ConfigError, match="unknown hardware preset 'phaze-paper'"):
        load_accelerator("phaze-paper")


def test_unknown_cluster_lists_both_kinds() -> None:
    with pytest.raises(ConfigError) as info:
        load_cluster("ethernet", 8)
    message = str(info.value)
    assert message.startswith("unknown hardware preset 'ethernet'; choose from: a100-80gb, ")
    assert message.endswith("; cluster presets: phaze-paper")


def test_with_any_chip_and_space(model: str) -> None:
    tiny = api.search_request(model, space="tiny", devices=64, global_batch=512, cluster="phaze-paper",
                              micro_batch_sizes=(1,), tps=(1,))
    assert tiny.cluster == load_cluster("phaze-paper", 64)


def test_plan_on_phaze_paper_links_is_slower(model: str) -> None:
    def best(links: str | None) -> PlanResult:
        run = PlanRun(ModelSpec(model), HardwareSpec("tpuv4", links), ClusterSpec(8, 64),
                      PlanSpace(tps=(1,), micro_batch_sizes=(2,), top_k=1))
        (result,) = api.plan_run(run)
        return result
    own, paper = best(None), best("phaze-paper")
    assert paper.iteration_time_s > own.iteration_time_s  # 4 GiB/s against 300 GB/s of ICI
