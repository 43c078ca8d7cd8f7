"""The expert-parallel all-to-all (archplace.cost.collective) against hand-computed alpha-beta values."""

from __future__ import annotations

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.collective import (
    cluster_all_to_all_time_s,
    cluster_collective_time_s,
    collective_kind,
    collective_time_s,
    same_node_peers,
)
from archplace.cost.model import RooflineCostModel
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase

A, B = 5e-6, 100e9  # alpha 5 us, beta 100 GB/s
N = 1e9  # 1 GB sent by each rank (its own share included)
INTRA_A, INTRA_B, INTER_A, INTER_B = 1e-6, 400e9, 4e-6, 50e9


def nodes(devices: int, per_node: int = 8, intra_efficiency: float = 1.0) -> Cluster:
    return Cluster(devices, per_node, INTRA_B, INTER_B, INTRA_A, INTER_A,
                   intra_node_efficiency=intra_efficiency)


def test_pairwise_exchange_on_one_link() -> None:
    # (p-1) alpha + (p-1)/p n/beta, p = 8: 7 x 5 us + 7/8 x 10 ms, on every topology
    expected = 7 * 5e-6 + 7 / 8 * 1e9 / 100e9
    assert expected == pytest.approx(0.008785)
    for topology in ("switched", "ring", "torus2d", "torus3d"):
        assert collective_time_s("all_to_all", N, 8, A, B, topology) == pytest.approx(expected, rel=1e-12)
    assert collective_time_s("all_to_all", N, 1, A, B) == 0.0
    assert collective_time_s("all_to_all", 0.0, 8, A, B) == 0.0


def test_group_inside_a_node_uses_the_intra_node_link() -> None:
    # EP 8 on 8-GPU nodes: 7 peers on NVLink, 7 x 1 us + 7/8 x 1 GB / 400 GB/s = 2.1945 ms
    expected = 7 * 1e-6 + 7 / 8 * 1e9 / 400e9
    assert cluster_all_to_all_time_s(nodes(64), N, 8) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(2.1945e-3)
    # EP 4: 3 peers
    assert cluster_all_to_all_time_s(nodes(64), N, 4) == pytest.approx(3e-6 + 3 / 4 * 2.5e-3, rel=1e-12)
    # the kind dispatches here from the generic entry point
    assert cluster_collective_time_s(nodes(64), "all_to_all", N, 8) == pytest.approx(expected, rel=1e-12)


def test_group_across_nodes_is_hierarchical() -> None:
    # EP 16 on 8-GPU nodes: 7 peers on NVLink (7/16 of the buffer), 8 on the network (8/16), at once:
    # max(7 x 1 us + 7/16 x 2.5 ms, 8 x 4 us + 8/16 x 20 ms) = 10.032 ms
    intra = 7 * 1e-6 + 7 / 16 * 1e9 / 400e9
    inter = 8 * 4e-6 + 8 / 16 * 1e9 / 50e9
    assert cluster_all_to_all_time_s(nodes(64), N, 16) == pytest.approx(max(intra, inter), rel=1e-12)
    assert max(intra, inter) == pytest.approx(10.032e-3)
    # EP 64 over 8 nodes (DeepSeek-V3's layout): 56 of 63 peers off the node
    inter64 = 56 * 4e-6 + 56 / 64 * 1e9 / 50e9
    assert cluster_all_to_all_time_s(nodes(64), N, 64) == pytest.approx(inter64, rel=1e-12)
    # a slow NVLink can be the bottleneck: intra efficiency 0.01 -> 7/16 GB at 4 GB/s
    slow = 7 * 1e-6 + 7 / 16 * 1e9 / 4e9
    slow_nvlink = nodes(64, intra_efficiency=0.01)
    assert cluster_all_to_all_time_s(slow_nvlink, N, 16) == pytest.approx(slow, rel=1e-12)


def test_groups_straddling_nodes_charge_the_worst_rank() -> None:
    # EP 12 on 8-GPU nodes: group 0 = ranks 0-7 (node 0) + 8-11 (node 1), group 1 = 12-15 + 16-23:
    # a rank has 3 or 7 peers on its node
    assert same_node_peers(nodes(48), 12) == (3, 7)
    intra = 7 * 1e-6 + 7 / 12 * 2.5e-3
    inter = 8 * 4e-6 + 8 / 12 * 20e-3
    assert cluster_all_to_all_time_s(nodes(48), N, 12) == pytest.approx(max(intra, inter), rel=1e-12)
    # EP 3 on 8-GPU nodes: ranks 6-8 straddle nodes 0 and 1, so some rank has no peer on its node
    assert same_node_peers(nodes(48), 3) == (0, 2)
    assert cluster_all_to_all_time_s(nodes(48), N, 3) == pytest.approx(
        max(2e-6 + 2 / 3 * 2.5e-3, 2 * 4e-6 + 2 / 3 * 20e-3), rel=1e-12)
    # one node: every peer on NVLink, whatever the group size
    assert same_node_peers(nodes(8), 3) == (2, 2)
    assert same_node_peers(nodes(64), 16) == (7, 7)


def test_all_to_all_operator_costed_on_the_cluster() -> None:
    op = Operator(id=0, name="all_to_all_dispatch", target="all_to_all", kind=OpKind.COLLECTIVE,
                  phase=Phase.FWD, batch=0, m=0, k=0, n=0, elements=500_000_000, flop=0.0, bytes_read=N,
                  bytes_written=N, group=16)
    estimate = RooflineCostModel(nodes(64)).estimate(op, load_accelerator("h100-80gb"))
    assert estimate.single_core_s == estimate.communication_s == pytest.approx(10.032e-3)


def test_collective_kind_and_bad_input() -> None:
    assert collective_kind("all_to_all") == "all_to_all"
    assert collective_kind("_c10d_functional.all_to_all_single.default") == "all_to_all"
    assert collective_kind("alltoall") == "all_to_all"
    with pytest.raises(ConfigError, match="group size"):
        cluster_all_to_all_time_s(nodes(64), N, 0)
    with pytest.raises(ConfigError, match="bytes"):
        cluster_all_to_all_time_s(nodes(64), -1.0, 8)
