"""Ring attention (context parallelism) and MLA's value head in the fused attention operator."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from archplace.base.errors import ConfigError
from archplace.cost.attention import (
    BLOCK,
    attention_flop,
    computed_area,
    hbm_traffic_bytes,
    ring_exposed_s,
    ring_transfer_s,
    with_ring,
)
from archplace.cost.configs import CoreConfigArray
from archplace.cost.model import RooflineCostModel, SystolicCostModel
from archplace.cost.types import Bound, OpEstimate
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.workload.attention_blocks import op_area, ring_steps
from archplace.workload.graph import Operator, OpKind, Phase

# 16 devices, 8 per node; intra-node 1 GB/s with 1 ms start-up, inter-node 0.1 GB/s with 10 ms.
CLUSTER = Cluster(devices=16, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e9,
                  inter_node_bandwidth_bytes_per_s=1e8, intra_node_latency_s=1e-3,
                  inter_node_latency_s=1e-2)


def op(b: int, s_q: int, d: int, s_kv: int, *, backward: bool = False, causal: bool = True,
       skip: bool = True, v_dim: int = 0, cp: int = 1, stride: int = 1,
       ring_bytes: float = 0.0) -> Operator:
    target = "archplace.attention_backward.default" if backward else "archplace.attention.default"
    return Operator(id=0, name="attention", target=target, kind=OpKind.ATTENTION,
                    phase=Phase.BWD if backward else Phase.FWD, batch=b, m=s_q, k=d, n=s_kv,
                    elements=b * s_q * d, flop=0.0, bytes_read=0.0, bytes_written=0.0,
                    causal=causal, skip_masked_blocks=skip, dtype_bytes=2, v_dim=v_dim, cp=cp,
                    cp_stride=stride, ring_bytes=ring_bytes)


def ring(b: int, s: int, d: int, c: int, **kw: object) -> Operator:
    """One rank's attention operator of a sequence of s tokens split over c ranks."""
    return op(b, s // c, d, s, cp=c, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ load-balanced causal work
def test_ring_steps_by_hand():
    """c = 2, s = 1024: chunks of q = 256 (2 x 2 blocks of 128). Step 0: one chunk pair in full
    and two diagonal chunks of 3 blocks each; step 1: two chunk pairs in full."""
    steps = ring_steps(ring(1, 1024, 64, 2))
    q, tri = 256, 3 * BLOCK * BLOCK
    assert steps == ((q * q + 2 * tri, 4 + 2 * 3), (2 * q * q, 2 * 4))
    assert sum(a for a, _ in steps) == computed_area(1024, 1024, True, True)[0] // 2


@pytest.mark.parametrize("c", [1, 2, 4, 8])
@pytest.mark.parametrize("backward", [False, True])
def test_rank_does_one_cp_th_of_the_causal_work(c: int, backward: bool):
    """Chunks a multiple of the block edge: every rank computes exactly 1/c of the score blocks,
    area and FLOP of the whole sequence's causal attention (FlashAttention-2's skipping)."""
    s, b, d = 2 * c * 2 * BLOCK, 3, 64
    whole = op(b, s, d, s, backward=backward)
    part = ring(b, s, d, c, backward=backward)
    area, count = op_area(part)
    assert (area * c, count * c) == computed_area(s, s, True, True)
    assert attention_flop(part) * c == attention_flop(whole)
    # without a causal mask, the rank's s/c queries against all s keys
    full = op(b, s, d, s, backward=backward, causal=False)
    assert attention_flop(ring(b, s, d, c, backward=backward, causal=False)) * c == attention_flop(full)


def test_sdpa_ring_computes_every_block_of_its_chunk_pairs():
    """Without skipping, the diagonal chunks are computed whole: (2c - 1)·q² + 2·q² per rank."""
    c, q = 4, 96
    assert op_area(ring(1, 2 * c * q, 64, c, skip=False))[0] == (2 * c + 1) * q * q


# ------------------------------------------------------------------ exposed communication
def kernel(seconds: float) -> OpEstimate:
    return OpEstimate(seconds, seconds, seconds, seconds, 0.0, 0.0, 0.0, 0.0,
                      Bound.COMPUTE, Bound.COMPUTE)


# c = 4, chunks of one block: step 0 holds 1 + 2 x 1 = 3 chunk areas, steps 1-3 two each (9).
FOUR = ring(1, 8 * BLOCK, 64, 4, ring_bytes=1e9)


def test_transfer_is_a_send_receive_of_k_and_v_on_the_cp_link():
    assert ring_transfer_s(FOUR, CLUSTER) == pytest.approx(1e-3 + 1.0)
    backward = dataclasses.replace(FOUR, phase=Phase.BWD,
                                   target="archplace.attention_backward.default")
    assert ring_transfer_s(backward, CLUSTER) == pytest.approx(1e-3 + 2.0)  # K, V and dK, dV
    assert ring_transfer_s(dataclasses.replace(FOUR, cp=1), CLUSTER) == 0.0


def test_comm_bound_ring_exposes_the_transfers_beyond_each_step():
    """T = 0.9 s over steps of 3/9, 2/9, 2/9, 2/9: 0.3, 0.2, 0.2, 0.2 s; three 1.001 s transfers."""
    got = with_ring(FOUR, kernel(0.9), CLUSTER)
    exposed = (1.001 - 0.3) + 2 * (1.001 - 0.2)
    assert got.communication_s == pytest.approx(exposed)
    assert got.all_cores_s == pytest.approx(0.9 + exposed)
    assert got.single_core_s == pytest.approx(0.9 + exposed)
    assert got.bound_all is Bound.COMMUNICATION


def test_compute_bound_ring_hides_the_transfers():
    """T = 9.009 s: steps of 3.003 and 2.002 s, each longer than a 1.001 s transfer."""
    got = with_ring(FOUR, kernel(9.009), CLUSTER)
    assert (got.all_cores_s, got.communication_s, got.bound_all) == (9.009, 0.0, Bound.COMPUTE)


def test_partly_hidden_ring_and_the_last_step_sends_nothing():
    """T = 4.5 s: steps 1.5, 1, 1, 1 s against 1.001 s transfers at steps 0-2 only."""
    assert ring_exposed_s(FOUR, np.array([4.5]), 1.001)[0] == pytest.approx(2 * 0.001)
    # one step later the transfer of the last step would be exposed too: it is not counted
    two = ring(1, 4 * BLOCK, 64, 2, ring_bytes=1e9)
    assert ring_exposed_s(two, np.array([0.0]), 5.0)[0] == 5.0


def test_link_is_intra_node_while_tp_times_cp_fits_a_node():
    """Ranks ordered TP -> CP: a CP group of 4 at stride 2 spans 7 ranks (one node of 8), at
    stride 4 it spans 13 (two nodes): the inter-node link."""
    inside = dataclasses.replace(FOUR, cp_stride=2)
    across = dataclasses.replace(FOUR, cp_stride=4)
    assert ring_transfer_s(inside, CLUSTER) == pytest.approx(1e-3 + 1e9 / 1e9)
    assert ring_transfer_s(across, CLUSTER) == pytest.approx(1e-2 + 1e9 / 1e8)


def test_ring_needs_the_cluster():
    with pytest.raises(ConfigError, match="ring attention over 4 context-parallel ranks"):
        SystolicCostModel().estimate(FOUR, load_accelerator("a100-80gb"))
    assert with_ring(dataclasses.replace(FOUR, cp=1), kernel(1.0), None) == kernel(1.0)


@pytest.mark.parametrize("model_class", [SystolicCostModel, RooflineCostModel])
def test_cost_models_add_the_exposed_ring_to_the_kernel(model_class: type):
    """The estimate of a ring operator is its kernel's (the same operator with nothing to send on
    a link without start-up) with the exposed transfers added (:func:`with_ring`)."""
    acc = load_accelerator("a100-80gb")
    free = dataclasses.replace(CLUSTER, intra_node_latency_s=0.0)
    for backward in (False, True):
        part = ring(8, 8192, 128, 4, backward=backward, ring_bytes=2 * 8 * 2048 * 128 * 2)
        kernel_only = model_class(cluster=free).estimate(dataclasses.replace(part, ring_bytes=0.0), acc)
        assert kernel_only.communication_s == 0.0
        got = model_class(cluster=CLUSTER).estimate(part, acc)
        assert got == with_ring(part, kernel_only, CLUSTER)
        assert got.communication_s > 0  # a 1 GB/s link: communication-bound


def test_vectorised_ring_equals_scalar():
    model = SystolicCostModel(cluster=CLUSTER)
    base = load_accelerator("a100-80gb")
    accs = [base, load_accelerator("tpuv4"), load_accelerator("h100-80gb"),
            dataclasses.replace(base, tensor_cores=3, array_rows=7, array_cols=5)]
    for backward in (False, True):
        part = ring(8, 4096, 128, 4, backward=backward, ring_bytes=4e6, stride=2)
        many = model.estimate_many(part, CoreConfigArray.from_accelerators(accs))
        for i, acc in enumerate(accs):
            one = model.estimate(part, acc)
            assert (one.single_core_s, one.all_cores_s) == (many.single_core_s[i], many.all_cores_s[i])


# ------------------------------------------------------------------ MLA's value head
def test_mla_flop_by_hand():
    """d = 48 (Q, K), d_v = 32 (V, O), non-causal s = 256: forward S = QKᵀ over 48 and O = PV over
    32; backward S, dQ, dK over 48 and dP, dV over 32."""
    b, s, d, d_v = 3, 256, 48, 32
    assert attention_flop(op(b, s, d, s, causal=False, v_dim=d_v)) == 2 * b * s * s * (d + d_v)
    assert attention_flop(op(b, s, d, s, causal=False, v_dim=d_v, backward=True)) == \
        2 * b * s * s * (3 * d + 2 * d_v)
    # standard attention unchanged: 4·B·d·s² and 2.5x backward, whether v_dim is 0 or d
    for v_dim in (0, d):
        assert attention_flop(op(b, s, d, s, causal=False, v_dim=v_dim)) == 4 * b * d * s * s
        assert attention_flop(op(b, s, d, s, causal=False, v_dim=v_dim, backward=True)) == 10 * b * d * s * s


def test_mla_traffic_and_cost():
    """Forward with the whole K and V in SRAM: Q read and O written once, K and V once each,
    the log-sum-exp: e·B·(s·(d + d_v) + s·(d + d_v)) + 4·B·s."""
    b, s, d, d_v, e = 2, 512, 192, 128, 2
    forward = op(b, s, d, s, causal=False, v_dim=d_v)
    got = hbm_traffic_bytes(forward, np.array([math.inf]), 1.0)[0]
    assert got == e * b * (s * (d + d_v) + s * (d + d_v)) + 4 * b * s
    backward = op(b, s, d, s, causal=False, v_dim=d_v, backward=True)
    assert hbm_traffic_bytes(backward, np.array([math.inf]), 1.0)[0] == \
        e * b * (2 * s * (d + d_v) + s * (3 * d + d_v)) + 8 * b * s
    acc, model = load_accelerator("a100-80gb"), SystolicCostModel()
    for backward_ in (False, True):
        narrow = model.estimate(op(16, 4096, 192, 4096, v_dim=128, backward=backward_), acc)
        wide = model.estimate(op(16, 4096, 192, 4096, backward=backward_), acc)
        same = model.estimate(op(16, 4096, 192, 4096, v_dim=192, backward=backward_), acc)
        assert narrow.all_cores_s < wide.all_cores_s and narrow.hbm_bytes < wide.hbm_bytes
        assert same == wide  # v_dim = d is standard attention, to the bit


def test_ring_transfers_energy_and_operator_checks():
    """Three forward transfers of 1 GB read and written: 6e9 bytes on the HBM path."""
    from archplace.hw.power import HBM_PATH_ENERGY_J_PER_BYTE

    assert with_ring(FOUR, kernel(9.009), CLUSTER).energy_j == pytest.approx(6e9 * HBM_PATH_ENERGY_J_PER_BYTE)
    with pytest.raises(ConfigError, match="n = m x cp"):
        op(1, 256, 64, 256, cp=2)
    with pytest.raises(ConfigError, match="even m"):
        op(1, 255, 64, 510, cp=2)
    assert op(1, 255, 64, 510, cp=2, causal=False).cp == 2
