"""NCCL's cost model (archplace.cost.nccl): hand-computed cases, invariants, measured logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost import nccl, nccl_pipeline
from archplace.cost.collective import (
    cluster_all_to_all_time_s,
    cluster_collective_time_s,
    cluster_send_recv_time_s,
    nccl_communicator,
)
from archplace.cost.nccl_constants import GENERATIONS
from archplace.cost.nccl_logs import compare, read_log
from archplace.hw.cluster import Cluster, Topology
from archplace.hw.presets import load_cluster

DATA = Path(__file__).resolve().parent.parent / "data" / "nccl"
MIB = 2**20


def comm(gen: str, per_node: int, nodes: int, links: int, nic_gbps: float,
         nics: int = 8) -> nccl.Communicator:
    g = GENERATIONS[gen]
    return nccl.Communicator(g, per_node, nodes, links * g.nvlink_gbps, nic_gbps, nics)


A100_NODE = comm("ampere", 8, 1, 12, 25)
A100_TWO = comm("ampere", 8, 2, 12, 25)
H100_NODE = comm("hopper", 8, 1, 18, 50)
B200_FOUR = comm("blackwell", 8, 4, 18, 50)


# --- graphs, by hand from NCCL's search (module docstring) ---------------------------------

def test_ring_graph_of_one_a100_node() -> None:
    # 12 NVLinks x 20 GB/s = 240: 6 channels of 40, doubled to 12 of 20 (40 >= 25, Ampere);
    # 30 GB/s x 12 does not fit 240, so pass 2 keeps 20
    assert nccl.ring_graph(A100_NODE) == nccl.Graph(12, 20.0, 20.0)


def test_ring_graph_of_one_h100_node() -> None:
    # 18 x 20.6 = 370.8: 6 channels of 60 (sm90 speeds), doubled (60 >= 50) to 12 of 30
    assert nccl.ring_graph(H100_NODE) == nccl.Graph(12, 30.0, 30.0)


def test_ring_graph_across_a100_nodes_is_one_channel_per_nic() -> None:
    # NIC path min(25 HDR, 24 PCIe Gen4 x16) = 24: one 24 GB/s channel per NIC, 8 NICs; not
    # doubled (24 < 25)
    assert nccl.ring_graph(A100_TWO) == nccl.Graph(8, 24.0, 24.0)
    # 4 NICs for the node: 4 channels
    assert nccl.ring_graph(comm("ampere", 8, 2, 12, 25, nics=4)).channels == 4


def test_nvls_graph_of_one_h100_node() -> None:
    # 8 channels (one per GPU); 40 GB/s is the fastest sm90 speed with 8 s <= 370.8; the
    # inter speed climbs to 60 (the list's top, below 2 x 40)
    assert nccl.nvls_graph(H100_NODE) == nccl.Graph(8, 40.0, 60.0)
    assert nccl.nvls_graph(A100_NODE) is None          # Ampere has no NVLink SHARP
    assert nccl.nvls_graph(comm("hopper", 8, 2, 18, 50)) is None  # one node only


# --- times, by hand from ncclTopoTuneModel and ncclTopoGetAlgoTime ---------------------------

def test_a100_ring_simple_all_reduce_of_1_gb() -> None:
    t, choice = nccl.best("all_reduce", 1e9, A100_NODE)
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    # latency 8.4 + 14 x 3.4 us; algorithm bandwidth 12 x 20 x 8/14 GB/s
    assert t == pytest.approx((8.4 + 14 * 3.4) * 1e-6 + 1e9 / (240e9 * 8 / 14), rel=1e-12)
    # nccl-tests' bus bandwidth of that time
    assert nccl.bus_bandwidth_gbps("all_reduce", 1e9, A100_NODE) == pytest.approx(
        1e9 / t / 1e9 * 14 / 8, rel=1e-12)


def test_a100_small_all_reduce_is_ring_ll() -> None:
    t, choice = nccl.best("all_reduce", 1024, A100_NODE)
    assert (choice.algorithm, choice.protocol) == ("ring", "LL")
    # LL: min(llMax 87.7, 240 / 2) = 87.7 bus; latency 6.6 + 14 x 0.6
    assert t == pytest.approx((6.6 + 14 * 0.6) * 1e-6 + 1024 / (87.7e9 * 8 / 14), rel=1e-12)


def test_multi_node_tree_ll_latency() -> None:
    sixteen = comm("ampere", 8, 16, 12, 25)
    tree_ll = next(c for c in nccl.choices("all_reduce", sixteen)
                   if (c.algorithm, c.protocol) == ("tree", "LL"))
    # 6.8 + 2 ((8 - 1) 0.6 + log2(16) 5.0)
    assert tree_ll.latency_us == pytest.approx(6.8 + 2 * (7 * 0.6 + 4 * 5.0))
    # bus: min(0.92 x 8 x 24, 8 x 17.8) = 142.4; LL: / 3.8, capped by llMax 20.4; x 1/2
    assert tree_ll.bandwidth_gbps == pytest.approx(min(142.4 / 3.8, 20.4) * 0.5)


def test_h100_large_all_reduce_is_nvls() -> None:
    t, choice = nccl.best("all_reduce", 2**30, H100_NODE)
    assert (choice.algorithm, choice.protocol) == ("nvls", "Simple")
    bus = 8 * min(40 * 0.85 * 7 / 8 * 2, 60.0)
    assert t == pytest.approx(25e-6 + 2**30 / (bus * 8 / 14 * 1e9), rel=1e-12)


def test_all_gather_is_ring_with_p_minus_1_steps() -> None:
    t, choice = nccl.best("all_gather", 1e9, A100_NODE)
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    assert t == pytest.approx((8.4 + 7 * 3.4) * 1e-6 + 1e9 / (240e9 * 8 / 7), rel=1e-12)


def test_tree_correction_and_ring_plateau() -> None:
    ring = next(c for c in nccl.choices("all_reduce", A100_TWO)
                if (c.algorithm, c.protocol) == ("ring", "Simple"))
    # 1 GB / (8 channels x 16 ranks) >= 64 B: the latency x 1.4
    assert ring.time_s(1e9, "all_reduce", A100_TWO) == pytest.approx(
        ring.latency_us * 1.4e-6 + 1e9 / (ring.bandwidth_gbps * 1e9), rel=1e-12)
    tree = next(c for c in nccl.choices("all_reduce", A100_TWO)
                if (c.algorithm, c.protocol) == ("tree", "Simple"))
    # 1 MiB: log2(2^20 / 64) = 14, Simple factor 0.5
    assert tree.time_s(MIB, "all_reduce", A100_TWO) == pytest.approx(
        tree.latency_us * 1e-6 + MIB / (tree.bandwidth_gbps * 0.5 * 1e9), rel=1e-12)


# --- the cluster wiring -------------------------------------------------------------------

def test_tp_group_across_two_nodes_uses_every_nic() -> None:
    cluster = load_cluster("a100-80gb", 16)
    c = nccl_communicator(cluster, 16)
    assert c is not None and (c.per_node, c.nodes, c.nics) == (8, 2, 8)
    assert c.nvlink_gbps == pytest.approx(240.0)
    t = cluster_collective_time_s(cluster, "all_reduce", 2**30, 16)
    # the old charge: every hop on one 25 GB/s x 0.96 link
    old = 2 * 15 / 16 * 2**30 / (25e9 * 0.96)
    assert old / t > 3.0


def test_dp_group_one_rank_per_node_uses_one_nic() -> None:
    cluster = load_cluster("a100-80gb", 64)
    c = nccl_communicator(cluster, 8, stride=8)
    assert c is not None and (c.per_node, c.nodes, c.nics) == (1, 8, 1)
    assert nccl.ring_graph(c) == nccl.Graph(1, 24.0, 24.0)


def test_nics_per_node_spreads_over_the_gpus() -> None:
    base = load_cluster("a100-80gb", 16)
    fewer = Cluster(16, 8, base.intra_node_bandwidth_bytes_per_s, base.inter_node_bandwidth_bytes_per_s,
                    0.0, 0.0, Topology.SWITCHED, nics_per_node=4, nccl_generation="ampere")
    assert fewer.nic_bandwidth_bytes_per_s == pytest.approx(50e9)
    c = nccl_communicator(fewer, 4)  # GPUs 0-3 in one node own NICs 0 and 1
    assert c is not None and c.nics == 2
    assert nccl_communicator(fewer, 16) is not None


def test_torus_and_unknown_generation_keep_the_alpha_beta_model() -> None:
    tpu = load_cluster("tpuv4", 64)
    assert nccl_communicator(tpu, 16) is None
    with pytest.raises(ConfigError, match="nccl_generation"):
        Cluster(8, 8, 1e9, 1e9, 0.0, 0.0, nccl_generation="kepler")
    with pytest.raises(ConfigError, match="nics_per_node"):
        Cluster(8, 8, 1e9, 1e9, 0.0, 0.0, nics_per_node=0)


def test_send_recv_and_all_to_all() -> None:
    cluster = load_cluster("h100-80gb", 16)
    # same node: one NVLink Simple step of latency, the GPU's 18 x 20.6 GB/s
    assert cluster_send_recv_time_s(cluster, 1e9, 1) == pytest.approx(
        (8.4 + 3.4) * 1e-6 + 1e9 / 370.8e9, rel=1e-12)
    # next node: the GPU's NIC path min(50, 48) GB/s
    assert cluster_send_recv_time_s(cluster, 1e9, 8) == pytest.approx(
        (8.4 + 14.0) * 1e-6 + 1e9 / 48e9, rel=1e-12)
    # all-to-all of 16 over two nodes: 7/16 of the buffer on NVLink, 8/16 over the NIC
    t = cluster_all_to_all_time_s(cluster, 1.6e9, 16)
    assert t == pytest.approx((8.4 + 14.0) * 1e-6 + 0.8e9 / 48e9, rel=1e-12)


# --- invariants ----------------------------------------------------------------------------

COMMS = st.builds(
    comm, st.sampled_from(sorted(GENERATIONS)), st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 3, 4, 16]), st.sampled_from([8, 12, 18]),
    st.sampled_from([12.5, 25.0, 50.0]))


@settings(max_examples=60, deadline=None)
@given(COMMS, st.sampled_from(nccl.KINDS), st.floats(1.0, 1e10), st.floats(1.0, 1e10))
def test_time_is_monotone_in_bytes(c: nccl.Communicator, kind: str, a: float, b: float) -> None:
    if c.ranks < 2:
        return
    lo, hi = sorted((a, b))
    assert nccl.collective_time_s(kind, lo, c) <= nccl.collective_time_s(kind, hi, c)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(GENERATIONS)), st.sampled_from([2, 4, 8]), st.sampled_from([2, 3, 4, 16]),
       st.sampled_from([12.5, 25.0, 50.0]), st.floats(2**20, 2**34))
def test_multi_node_busbw_never_beats_the_nics(gen: str, per_node: int, nodes: int, nic: float,
                                               nbytes: float) -> None:
    c = comm(gen, per_node, nodes, 12, nic, nics=per_node)
    # all-reduce across nodes: the ring's bus bandwidth is at most the NICs the ranks own, and
    # a tree's carries half the bytes at most as fast
    assert nccl.bus_bandwidth_gbps("all_reduce", nbytes, c) <= per_node * c.nic_path_gbps * 1.0001


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(GENERATIONS)), st.sampled_from([2, 3, 4, 8]), st.floats(2**10, 2**34))
def test_more_nodes_are_never_faster(gen: str, nodes: int, nbytes: float) -> None:
    fewer = comm(gen, 8, nodes, 18, 50)
    more = comm(gen, 8, 2 * nodes, 18, 50)
    assert nccl.collective_time_s("all_reduce", nbytes, more) >= \
        nccl.collective_time_s("all_reduce", nbytes, fewer)


# --- measured logs (tests/data/nccl) --------------------------------------------------------

# Logs on which NCCL's tuner model holds at large messages (>= 512 MiB), where its bandwidth
# term dominates, and the sizes asserted.
HOLDS = ("echo_a100_azure_4gpu", "echo_a100_azure_8gpu", "mle_a100_1node", "mle_b200_p6_1node",
         "mle_b200_p6_4node", "mle_h200_1node")


@pytest.mark.parametrize("name", HOLDS)
def test_large_message_busbw_within_15_percent(name: str) -> None:
    table = compare(read_log(DATA / f"{name}.csv"))
    large = table[table["size_bytes"] >= 512 * MIB]
    assert len(large) >= 2
    worst = large.loc[large["error"].abs().idxmax()]
    assert abs(worst["error"]) <= 0.15, worst.to_dict()


@pytest.mark.xfail(strict=True, reason=(
    "NCCL's tuner is optimistic from 1 MiB to ~256 MiB (+25 % to +330 %); charging NCCL's own "
    "chunk/loop/step pipeline (nccl.pipelined_time_s) is faster still: the logs show a fixed "
    "cost per collective 2-4x NCCL's latency, not fill/drain; and the Azure ND A100 v4 logs of Echo "
    "plateau at ~125 GB/s over 8 HDR NICs where NCCL's graph gives 192 (+50 %); see "
    "benchmarks/bench_nccl.py"))
def test_every_log_within_15_percent_from_1_mib() -> None:
    for path in sorted(DATA.glob("*.csv")):
        table = compare(read_log(path))
        big = table[table["size_bytes"] >= MIB]
        assert (big["error"].abs() <= 0.15).all(), path.name


def test_every_log_has_provenance_and_reads() -> None:
    paths = sorted(DATA.glob("*.csv"))
    assert len(paths) >= 10
    for path in paths:
        head = path.read_text(encoding="utf-8").split("size_bytes")[0]
        assert "source:" in head and "commit" in head and "hardware:" in head, path.name
        log = read_log(path)
        assert (log.rows["busbw_gbps"] >= 0).all()
        assert log.communicator().ranks == int(log.machine["ranks"])


# --- the pipelined charge (archplace.cost.nccl_pipeline), by hand from NCCL's source ---------

def test_comm_channels_double_the_graph() -> None:
    # connect.cc l. 460: twice the graph's; l. 480-483: twice again on Hopper+ across nodes
    assert nccl_pipeline.comm_channels(12, 80, 1, 20.0) == 24
    assert nccl_pipeline.comm_channels(4, 90, 2, 48.0) == 16
    assert nccl_pipeline.comm_channels(4, 80, 2, 48.0) == 8
    assert nccl_pipeline.comm_channels(8, 90, 2, 48.0) == 16
    assert nccl_pipeline.comm_channels(32, 80, 1, 20.0) == 64


def test_run_channels_are_cut_for_small_messages() -> None:
    # ring LL: 512 threads x 8 B x 8 ranks = 32 KiB per channel (enqueue.cc l. 2093)
    assert nccl_pipeline.run_channels("ring", "LL", 100_000, 12, 8, 240.0) == 3
    assert nccl_pipeline.run_channels("ring", "LL", 2**20, 12, 8, 240.0) == 12
    # ring Simple on a ring graph of at most PCI_BW (12 GB/s): 256 threads x 64 B
    assert nccl_pipeline.run_channels("ring", "Simple", 3 * 16384, 4, 8, 12.0) == 3


def test_chunk_sizes() -> None:
    assert nccl_pipeline.chunk_bytes("ring", "Simple", 2**30, 12, 1, 8) == 2 * MIB
    assert nccl_pipeline.chunk_bytes("ring", "LL", 2**30, 12, 1, 8) == 32768
    assert nccl_pipeline.chunk_bytes("ring", "LL128", 2**30, 12, 1, 8) == 576000
    # tree LL128, 2 nodes of 8, 8 channels, 1 MiB: 576000 halved to 72000 (< 22.4 chunks per
    # channel), then to 18000 (< 5.6), whole 1920 B grains: 17280
    assert nccl_pipeline.chunk_bytes("tree", "LL128", MIB, 8, 2, 16) == 17280


def test_pipelined_ring_ll_overlaps_the_hop_latency() -> None:
    ll = next(c for c in nccl.choices("all_reduce", A100_NODE)
              if (c.algorithm, c.protocol) == ("ring", "LL"))
    # 24 channels (twice the graph's 12; 1 MiB >= 24 x 32 KiB keeps them all), one loop, 14
    # steps of 1 MiB / 24 / 8 at 87.7 / 24 GB/s each (1.49 us, more than the 0.6 us hop):
    # base 6.6 + 14 transfers + the last receive's hop
    t = nccl.pipelined_time_s(ll, "all_reduce", MIB, A100_NODE)
    assert t == pytest.approx(6.6e-6 + 14 * MIB / (8 * 87.7e9) + 0.6e-6, rel=1e-12)
    assert t < ll.time_s(MIB, "all_reduce", A100_NODE)


@settings(max_examples=60, deadline=None)
@given(COMMS, st.sampled_from(nccl.KINDS), st.floats(1.0, 1e10))
def test_pipelined_time_is_at_least_the_bandwidth_term(c: nccl.Communicator, kind: str,
                                                       nbytes: float) -> None:
    if c.ranks < 2:
        return
    for choice in nccl.choices(kind, c):
        if choice.algorithm == "nvls":
            continue
        floor = choice.base_us * 1e-6 + nbytes / (choice.bandwidth_gbps * 1e9)
        assert nccl.pipelined_time_s(choice, kind, nbytes, c) >= floor * (1 - 1e-9)
