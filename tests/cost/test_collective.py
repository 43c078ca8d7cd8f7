"""Collective times (archplace.cost.collective) against hand-computed alpha-beta values."""

from __future__ import annotations

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.collective import (
    cluster_collective_time_s,
    collective_kind,
    collective_time_s,
    group_span,
    torus_factors,
)
from archplace.hw.cluster import Cluster, Topology

A, B = 5e-6, 100e9  # alpha 5 us, beta 100 GB/s
N = 1e9  # 1 GB buffer


def test_ring_all_reduce() -> None:
    # 2 (p-1) alpha + 2 (p-1)/p n/beta with p = 8: 14 x 5 us + 1.75 x 10 ms
    expected = 14 * 5e-6 + 2 * 7 / 8 * 1e9 / 100e9
    assert collective_time_s("all_reduce", N, 8, A, B, "ring") == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.01757)


def test_ring_all_gather_and_reduce_scatter() -> None:
    expected = 7 * 5e-6 + 7 / 8 * 0.01
    for kind in ("all_gather", "reduce_scatter"):
        assert collective_time_s(kind, N, 8, A, B, Topology.RING) == pytest.approx(expected, rel=1e-12)


def test_tree_all_reduce() -> None:
    # 2 ceil(log2 p) (alpha + n/beta): p = 8, 1 KB -> 6 x (5 us + 10 ns)
    expected = 6 * (5e-6 + 1e3 / 100e9)
    assert collective_time_s("all_reduce", 1e3, 8, A, B, algorithm="tree") == pytest.approx(expected)
    assert collective_time_s("all_gather", 1e3, 8, A, B, algorithm="tree") == pytest.approx(
        3 * 5e-6 + 7 / 8 * 1e3 / 100e9)


def test_switched_takes_the_faster_algorithm() -> None:
    small, large = 1e3, 1e9
    ring_small = collective_time_s("all_reduce", small, 64, A, B, algorithm="ring")
    tree_small = collective_time_s("all_reduce", small, 64, A, B, algorithm="tree")
    assert tree_small < ring_small
    assert collective_time_s("all_reduce", small, 64, A, B, "switched") == tree_small
    ring_large = collective_time_s("all_reduce", large, 64, A, B, algorithm="ring")
    assert collective_time_s("all_reduce", large, 64, A, B, "switched") == ring_large


def test_torus_all_reduce() -> None:
    # p = 64 on a 3D torus = 4 x 4 x 4: 2 (3 + 3 + 3) alpha + 2 x 63/64 n/beta
    expected = 18 * 5e-6 + 2 * 63 / 64 * 0.01
    assert collective_time_s("all_reduce", N, 64, A, B, "torus3d") == pytest.approx(expected, rel=1e-12)
    # p = 16 on a 2D torus = 4 x 4
    expected_2d = 2 * 6 * 5e-6 + 2 * 15 / 16 * 0.01
    assert collective_time_s("all_reduce", N, 16, A, B, "torus2d") == pytest.approx(expected_2d, rel=1e-12)


def test_send_recv_and_trivial_groups() -> None:
    assert collective_time_s("send_recv", N, 2, A, B) == pytest.approx(5e-6 + 0.01)
    assert collective_time_s("all_reduce", N, 1, A, B) == 0.0
    assert collective_time_s("all_reduce", 0.0, 8, A, B) == 0.0


def test_torus_factors() -> None:
    assert torus_factors(64, 3) == (4, 4, 4)
    assert torus_factors(12, 2) == (4, 3)
    assert torus_factors(7, 3) == (7, 1, 1)
    assert torus_factors(1, 3) == (1, 1, 1)


def test_collective_kind() -> None:
    assert collective_kind("_c10d_functional.all_reduce.default") == "all_reduce"
    assert collective_kind("all_gather_into_tensor") == "all_gather"
    assert collective_kind("reduce_scatter") == "reduce_scatter"
    assert collective_kind("aten.recv") == "send_recv"
    with pytest.raises(ConfigError, match="unknown collective"):
        collective_kind("aten.broadcast")


def test_cluster_link_choice() -> None:
    cluster = Cluster(devices=64, devices_per_node=8, intra_node_bandwidth_bytes_per_s=300e9,
                      inter_node_bandwidth_bytes_per_s=25e9, intra_node_latency_s=3e-6,
                      inter_node_latency_s=6e-6, topology=Topology.RING)
    intra = cluster_collective_time_s(cluster, "all_reduce", N, 8)
    assert intra == pytest.approx(14 * 3e-6 + 1.75 * 1e9 / 300e9)
    inter = cluster_collective_time_s(cluster, "all_reduce", N, 8, stride=8)  # spans 57 ranks
    assert inter == pytest.approx(14 * 6e-6 + 1.75 * 1e9 / 25e9)
    assert group_span(8, 8) == 57


@pytest.mark.parametrize(("args", "message"), [
    (("broadcast", N, 8, A, B), "unknown collective"),
    (("all_reduce", -1.0, 8, A, B), "bytes"),
    (("all_reduce", N, 0, A, B), "group size"),
    (("all_reduce", N, 8, -1e-6, B), "latency"),
    (("all_reduce", N, 8, A, 0.0), "bandwidth"),
    (("all_reduce", N, 8, A, B, "hypercube"), "unknown topology"),
])
def test_bad_input(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        collective_time_s(*args)


def test_bad_algorithm() -> None:
    with pytest.raises(ConfigError, match="algorithm"):
        collective_time_s("all_reduce", N, 8, A, B, algorithm="butterfly")
