"""Context parallelism in the traced workload: one rank's share of a sequence split over cp ranks."""

from __future__ import annotations

import json

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.attention import BLOCK
from archplace.cost.model import SystolicCostModel
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.placement.costs import layer_costs
from archplace.workload.attention_blocks import computed_area
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import Operator, OpKind
from archplace.workload.layers import Layer, LayerChain, LayerKind
from archplace.workload.zoo import LoadedModel

# hidden 320 differs from every s/cp here (the input filter of full recompute keys on the hidden size)
GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 320, "n_head": 4, "n_positions": 1024,
        "vocab_size": 2048, "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
        "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5}
SEQ, BATCH, HEADS, HEAD_DIM = 1024, 2, 4, 80

# A DeepSeek-V3-architecture block (multi-head latent attention): Q/K head dim 32 + 16 = 48,
# V head dim 32; one dense layer.
MLA = {"model_type": "deepseek_v3", "num_hidden_layers": 1, "first_k_dense_replace": 1,
       "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
       "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
       "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
       "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
       "v_head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 1024, "hidden_act": "silu",
       "rms_norm_eps": 1e-6, "tie_word_embeddings": False}


def gpt2(**options: object) -> LayerChain:
    spec = LoadedModel("gpt2-tiny", json.dumps(GPT2, sort_keys=True), SEQ)
    return extract_chain(spec, ExtractOptions.of(BATCH, SEQ, **options))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def chains() -> dict[tuple[int, int], LayerChain]:
    return {(cp, tp): gpt2(cp=cp, tp=tp, sp=tp > 1) for cp, tp in ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2))}


def attention(layer: Layer, backward: bool = False) -> Operator:
    graph = layer.bwd if backward else layer.fwd
    (op,) = [op for op in graph.ops if op.kind is OpKind.ATTENTION]
    return op


@pytest.mark.parametrize("cp", [2, 4])
def test_block_flop_per_rank_is_one_cp_th(chains, cp: int):
    """Every GEMM works on s/cp tokens, and the load-balanced causal attention does 1/cp of the
    whole sequence's blocks (chunks of 1024 / (2 cp) = 256 or 128 tokens, whole blocks): the block's
    forward and backward FLOP, matmuls and attention, are exactly 1/cp of cp = 1's."""
    whole, part = chains[(1, 1)].layers[1], chains[(cp, 1)].layers[1]
    for phase in ("fwd", "bwd"):
        assert getattr(part, phase).flop * cp == getattr(whole, phase).flop
        assert getattr(part, phase).matmul_flop() * cp == getattr(whole, phase).matmul_flop()
    for backward in (False, True):
        assert attention(part, backward).flop * cp == attention(whole, backward).flop
    # and the attention is the causal area of the whole sequence by hand: T(T + 1)/2 blocks
    blocks = SEQ // BLOCK
    assert attention(part).flop * cp == 4 * BATCH * HEADS * HEAD_DIM * blocks * (blocks + 1) // 2 * BLOCK**2
    # the embedding and head: their GEMMs exactly, their vector work up to the scalar loss
    for index in (0, -1):
        w, p = chains[(1, 1)].layers[index], chains[(cp, 1)].layers[index]
        assert p.fwd.matmul_flop() * cp == w.fwd.matmul_flop()
        assert p.fwd.flop * cp == pytest.approx(w.fwd.flop, rel=1e-5)
        assert p.params == w.params


@pytest.mark.parametrize("cp", [2, 4])
def test_activations_per_rank_are_one_cp_th(chains, cp: int):
    """FlashAttention keeps Q, K, V, O and the log-sum-exp of the rank's own tokens only: every
    saved tensor of a GPT block is [b, s/cp, ...], so the block saves exactly 1/cp of cp = 1; the
    embedding and head too, but for the loss's few scalars."""
    for whole, part in zip(chains[(1, 1)].layers, chains[(cp, 1)].layers, strict=True):
        for field in ("activation_bytes", "input_bytes", "boundary_bytes", "selective_activation_bytes"):
            got, want = getattr(part, field) * cp, getattr(whole, field)
            if whole.kind is LayerKind.BLOCK:
                assert got == want, (whole.name, field)
            else:
                assert got == pytest.approx(want, rel=1e-5, abs=0), (whole.name, field)
    assert chains[(cp, 1)].layers[1].activation_bytes > 0


def test_attention_operator_is_the_ranks_queries_against_the_whole_sequence(chains):
    chain = chains[(4, 1)]
    assert (chain.cp, chain.seq_len) == (4, SEQ)
    for backward in (False, True):
        op = attention(chain.layers[1], backward)
        assert (op.batch, op.m, op.k, op.n, op.v_dim) == (BATCH * HEADS, SEQ // 4, HEAD_DIM, SEQ, 0)
        assert (op.cp, op.cp_stride) == (4, 1)
        # K and V of the rank's 256 tokens, bf16
        assert op.ring_bytes == 2 * BATCH * (SEQ // 4) * HEADS * HEAD_DIM * 2
    plain = attention(chains[(1, 1)].layers[1])
    assert (plain.cp, plain.cp_stride, plain.ring_bytes, plain.n) == (1, 1, 0.0, SEQ)


def test_sequence_parallelism_composes_with_cp(chains):
    """tp = 2 with SP and cp = 2: each rank's s/2 tokens sharded over the 2 TP ranks in the SP
    regions; the block is cp = 1's (tp = 2, SP) halved, its collectives carry half the bytes,
    and the CP group's ranks are tp = 2 apart."""
    whole, part = chains[(1, 2)].layers[1], chains[(2, 2)].layers[1]
    assert part.fwd.collectives() == whole.fwd.collectives() != {}
    assert sorted(op.bytes_read * 2 for op in part.fwd.ops if op.kind is OpKind.COLLECTIVE) == \
        sorted(op.bytes_read for op in whole.fwd.ops if op.kind is OpKind.COLLECTIVE)
    assert part.fwd.flop * 2 == whole.fwd.flop and part.bwd.flop * 2 == whole.bwd.flop
    assert part.activation_bytes * 2 == whole.activation_bytes
    op = attention(part)
    assert (op.batch, op.m, op.n, op.cp, op.cp_stride) == (BATCH * HEADS // 2, SEQ // 2, SEQ, 2, 2)
    assert op.ring_bytes == 2 * BATCH * (SEQ // 2) * (HEADS // 2) * HEAD_DIM * 2


def test_sequence_length_must_split_into_2cp_chunks():
    with pytest.raises(ConfigError, match=r"sequence length 1000 must be a multiple of 2 x cp = 16"):
        ExtractOptions.of(1, 1000, cp=8)
    with pytest.raises(ConfigError, match="needs a fused attention"):
        ExtractOptions.of(1, 1024, cp=2, attention="eager")
    assert ExtractOptions.of(1, 1000, cp=1).cp == 1  # no chunks without CP


def test_mla_value_head_in_the_attention_flop():
    """DeepSeek-V3's attention: Q, K head dim 48, V head dim 32. On 128 tokens (one causal block,
    computed whole), forward 2·B·s²·(48 + 32), backward 2·B·s²·(3·48 + 2·32); under cp = 2 the
    ring passes K (48) and V (32) of the rank's 64 tokens."""
    b, s, heads = 2, 128, 4
    spec = LoadedModel("tiny-mla", json.dumps(MLA, sort_keys=True), s)
    block = extract_chain(spec, ExtractOptions.of(b, s)).layers[1]
    fwd, bwd = attention(block), attention(block, backward=True)
    assert (fwd.k, fwd.v_dim, bwd.k, bwd.v_dim) == (48, 32, 48, 32)
    area = computed_area(s, s, True, True)[0]
    assert area == s * s
    assert fwd.flop == 2 * b * heads * area * (48 + 32)
    assert bwd.flop == 2 * b * heads * area * (3 * 48 + 2 * 32)
    ring = attention(extract_chain(spec, ExtractOptions.of(b, s, cp=2)).layers[1])
    assert (ring.m, ring.n, ring.v_dim) == (s // 2, s, 32)
    assert ring.ring_bytes == b * (s // 2) * heads * (48 + 32) * 2


def test_layer_costs_report_the_exposed_ring(chains):
    """``LayerCost.cp_comm_*_s``: the exposed ring transfers of the block's attention, within its
    time; 0 without CP. A slow inter-node link (tp x cp > devices per node) exposes more."""
    acc = load_accelerator("a100-80gb")

    def cluster(per_node: int) -> Cluster:
        return Cluster(devices=8, devices_per_node=per_node, intra_node_bandwidth_bytes_per_s=3e11,
                       inter_node_bandwidth_bytes_per_s=1e8, intra_node_latency_s=1e-5,
                       inter_node_latency_s=1e-4)

    model = SystolicCostModel(cluster=cluster(1))
    costs = layer_costs(chains[(2, 1)], acc, model)
    block = costs[1]
    expected = [model.estimate(attention(chains[(2, 1)].layers[1], bwd), acc).communication_s
                for bwd in (False, True)]
    assert [block.cp_comm_fwd_s, block.cp_comm_bwd_s] == expected
    assert 0 < block.cp_comm_fwd_s <= block.fwd_s and 0 < block.cp_comm_bwd_s <= block.bwd_s
    assert all(c.cp_comm_fwd_s == c.cp_comm_bwd_s == 0 for c in (costs[0], costs[-1]))
    near = layer_costs(chains[(2, 1)], acc, SystolicCostModel(cluster=cluster(8)))[1]
    assert near.cp_comm_fwd_s < block.cp_comm_fwd_s and near.fwd_s < block.fwd_s
    plain = layer_costs(chains[(1, 1)], acc, SystolicCostModel(cluster=cluster(1)))[1]
    assert plain.cp_comm_fwd_s == plain.cp_comm_bwd_s == 0
