"""Expert parallelism (archplace.workload.expert_parallel): one rank's share of the MoE layers derived
from the traced ep = 1 chain, its all-to-alls, capacity factor and load imbalance, its costs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from jsonschema import Draft202012Validator

from archplace.base.errors import ConfigError
from archplace.cost.collective import cluster_all_to_all_time_s
from archplace.cost.model import RooflineCostModel
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.placement.costs import layer_costs
from archplace.schemas import load_schema
from archplace.workload.cache import GraphCache
from archplace.workload.expert_parallel import check_ep, shard_experts, shared_experts
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import OpGraph, OpKind
from archplace.workload.layers import Layer, LayerChain
from archplace.workload.zoo import LoadedModel, load_model
from cli_helpers import run

# A small Mixtral-architecture model: 2 layers, hidden 256, 4 experts of width 512, top-2.
SMALL: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
H, INNER, EXPERTS, TOP_K, B, S = 256, 512, 4, 2, 2, 32
ROUTED = B * S * TOP_K  # 128 token copies per micro-batch
EXPERT = 3 * H * INNER  # gate, up, down weights of one expert


def small() -> LoadedModel:
    return LoadedModel("small-moe", json.dumps(SMALL, sort_keys=True), 256)


@pytest.fixture(scope="module")
def traced() -> LayerChain:
    return extract_chain(small(), ExtractOptions.of(micro_batch=B, seq_len=S))


def grouped(graph: OpGraph) -> list[Any]:
    return [op for op in graph.ops if "grouped_mm" in op.target]


def all_to_alls(graph: OpGraph) -> list[Any]:
    return [op for op in graph.ops if op.kind is OpKind.COLLECTIVE and op.target == "all_to_all"]


@pytest.mark.parametrize("ep", [2, 4])
def test_balanced_ep_keeps_flop_and_shards_the_experts(traced: LayerChain, ep: int) -> None:
    chain = shard_experts(traced, ep)
    base, block = traced.layers[1], chain.layers[1]
    assert chain.ep == ep and block.ep == ep
    # the same FLOP per rank: E/ep experts of ep x S/E rows each
    assert block.fwd.flop == base.fwd.flop and block.bwd.flop == base.bwd.flop
    assert sum(op.flop for op in grouped(block.fwd)) == 2 * ROUTED * EXPERT
    assert sum(op.flop for op in grouped(block.bwd)) == 4 * ROUTED * EXPERT
    assert {(op.batch, op.m) for op in grouped(block.fwd)} == {(EXPERTS // ep, ep * ROUTED // EXPERTS)}
    assert block.tokens_per_expert == ep * ROUTED // EXPERTS
    # parameters per rank: dense part + routed / ep; the model's active parameters unchanged
    dense = base.params - EXPERTS * EXPERT
    assert base.expert_params == EXPERTS * EXPERT
    assert block.params == dense + EXPERTS * EXPERT // ep and block.expert_params == EXPERTS * EXPERT // ep
    assert block.active_params == base.active_params
    assert chain.active_params == traced.active_params
    # expert weights read by the grouped GEMMs: 1/ep of them
    first, first_base = grouped(block.fwd)[0], grouped(base.fwd)[0]
    weights = EXPERTS * H * 2 * INNER * 2
    assert first_base.bytes_read - first.bytes_read == pytest.approx(weights * (1 - 1 / ep))
    # activations unchanged under balanced routing; the blocks share the graphs; other layers untouched
    assert block.activation_bytes == base.activation_bytes
    assert chain.layers[2].fwd is block.fwd and chain.layers[2].name == "block.1"
    assert chain.layers[0] == traced.layers[0] and chain.layers[-1] == traced.layers[-1]


def test_two_all_to_alls_per_pass_in_the_right_places(traced: LayerChain) -> None:
    block = shard_experts(traced, 2).layers[1]
    buffer = ROUTED * H * 2  # token copies x hidden x bf16
    assert block.all_to_all_bytes == buffer
    for graph, names in ((block.fwd, ["all_to_all_dispatch", "all_to_all_combine"]),
                         (block.bwd, ["all_to_all_combine_grad", "all_to_all_dispatch_grad"])):
        ops = all_to_alls(graph)
        assert [op.name for op in ops] == names
        assert graph.collectives() == {"all_to_all": 2}
        assert all((op.group, op.bytes_read, op.bytes_written) == (2, buffer, buffer) for op in ops)
        first_in, last_in = ops
        experts = grouped(graph)
        # every grouped GEMM runs after the incoming all-to-all; the outgoing one after the experts
        # that feed the token side, and the token side reads the experts only through it
        assert all(first_in.id in _ancestors(graph, op.id) for op in experts)
        assert last_in.preds and all(graph.ops[p] in experts for p in last_in.preds)
        readers = [op for op in graph.ops if last_in.id in op.preds]
        assert readers and all(op not in experts for op in readers)
        assert not any(p in {e.id for e in experts} for op in readers for p in op.preds)
    assert traced.layers[1].fwd.collectives() == {}


def _ancestors(graph: OpGraph, op_id: int) -> set[int]:
    dag = nx.DiGraph((p, op.id) for op in graph.ops for p in op.preds)
    return nx.ancestors(dag, op_id) if op_id in dag else set()


def test_capacity_factor_pads_every_expert(traced: LayerChain) -> None:
    base = traced.layers[1]
    block = shard_experts(traced, 2, capacity_factor=1.25).layers[1]
    rows = 5 * 2 * ROUTED // (4 * EXPERTS)  # 1.25 x ep x S / E = 80 rows per local expert
    assert block.tokens_per_expert == rows == 80
    assert sum(op.flop for op in grouped(block.fwd)) == 2 * (EXPERTS // 2) * rows * EXPERT
    assert sum(op.flop for op in grouped(block.fwd)) == 1.25 * sum(op.flop for op in grouped(base.fwd))
    assert block.all_to_all_bytes == 1.25 * ROUTED * H * 2
    assert all(op.bytes_read == 1.25 * ROUTED * H * 2 for op in all_to_alls(block.bwd))
    # the received rows' saved tensors: input (h), gate/up result (2 x inner), down input (inner)
    extra = 0.25 * ROUTED * (H + 2 * INNER + INNER) * 2
    assert block.activation_bytes == pytest.approx(base.activation_bytes + extra)
    # a capacity factor pads at ep = 1 too (no all-to-all there); the imbalance then does not matter
    alone = shard_experts(traced, 1, capacity_factor=2.0).layers[1]
    assert sum(op.flop for op in grouped(alone.fwd)) == 2 * sum(op.flop for op in grouped(base.fwd))
    assert alone.fwd.collectives() == {} and alone.params == base.params
    assert shard_experts(traced, 2, capacity_factor=1.25, load_imbalance=3.0).layers[1] == block


def test_load_imbalance_sets_the_busiest_rank(traced: LayerChain) -> None:
    base = traced.layers[1]
    block = shard_experts(traced, 4, load_imbalance=1.5).layers[1]
    assert block.tokens_per_expert == 3 * 4 * ROUTED // (2 * EXPERTS)
    assert block.fwd.flop > base.fwd.flop
    assert sum(op.flop for op in grouped(block.bwd)) == 1.5 * sum(op.flop for op in grouped(base.bwd))
    assert block.all_to_all_bytes == 1.5 * ROUTED * H * 2
    # one rank holds every expert at ep = 1: an imbalance between ranks changes nothing
    assert shard_experts(traced, 1, load_imbalance=1.5).layers[1].fwd.flop == base.fwd.flop


def test_bad_degrees_and_options_are_refused(traced: LayerChain) -> None:
    check_ep(small(), 4)
    with pytest.raises(ConfigError, match="EP degree 3 does not divide the 4 routed experts of small-moe"):
        check_ep(small(), 3)
    with pytest.raises(ConfigError, match="EP degree 8 does not divide the 4 routed experts"):
        shard_experts(traced, 8)
    with pytest.raises(ConfigError, match="EP degree 2: .* is a dense model"):
        check_ep(load_model("opt-350m"), 2)
    with pytest.raises(ConfigError, match="EP degree 3 does not divide"):
        extract_chain(small(), ExtractOptions.of(micro_batch=1, seq_len=64, ep=3))
    for field, value in (("capacity_factor", 0.5), ("expert_load_imbalance", float("nan")),
                         ("capacity_factor", float("inf")), ("expert_load_imbalance", True)):
        with pytest.raises(ConfigError, match="must be a finite number >= 1"):
            ExtractOptions.of(micro_batch=1, seq_len=64, **{field: value})
    with pytest.raises(ConfigError, match="already sharded"):
        shard_experts(shard_experts(traced, 2), 2)


def test_extract_and_cache_derive_the_ep_chain_from_the_traced_one(tmp_path: Path) -> None:
    options = ExtractOptions.of(micro_batch=1, seq_len=64)
    sharded = dataclasses.replace(options.with_key(ep=2), capacity_factor=1.5)
    cache = GraphCache(tmp_path)
    base = cache.chain(small(), options)
    derived = cache.chain(small(), sharded)
    # the sharded chain, with the padded rows' FLOP recorded (hardware FLOP, not model FLOP)
    plain = tuple(dataclasses.replace(layer, padding_fwd_flop=0.0, padding_bwd_flop=0.0)
                  for layer in derived.layers)
    assert dataclasses.replace(derived, layers=plain) == shard_experts(base, 2, capacity_factor=1.5)
    assert [layer.padding_fwd_flop > 0 for layer in derived.layers] == [False, True, True, False]
    assert [p.name for p in tmp_path.iterdir()] == [cache.path(small(), options).name]  # ep chain not stored
    assert extract_chain(small(), sharded) == derived


def test_shared_experts_are_counted_and_not_sharded() -> None:
    """DeepSeek-V3: 1 shared expert per MoE block, 3 dense blocks; the shared expert stays whole."""
    deepseek = load_model("deepseek-v3")
    assert (shared_experts(deepseek), shared_experts(load_model("mixtral-8x7b"))) == (1, 0)
    assert shared_experts(load_model("opt-350m")) == 0
    qwen2 = {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 256, "moe_intermediate_size": 64,
             "shared_expert_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2,
             "vocab_size": 500, "max_position_embeddings": 512}
    assert shared_experts(LoadedModel("small-qwen2-moe", json.dumps(qwen2), 64)) == 1
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 1,
              "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
              "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
              "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
              "v_head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 1024, "hidden_act": "silu",
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    spec = LoadedModel("small-deepseek", json.dumps(config, sort_keys=True), 256)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    sharded = shard_experts(chain, 8)
    dense, moe = sharded.layers[1], sharded.layers[2]
    assert dense == chain.layers[1] and not all_to_alls(dense.fwd)
    routed = 8 * 3 * 256 * 64
    assert chain.layers[2].expert_params == routed
    assert moe.params == chain.layers[2].params - routed + routed // 8  # one routed expert + the shared one
    assert moe.fwd.flop == chain.layers[2].fwd.flop
    assert moe.fwd.collectives() == moe.bwd.collectives() == {"all_to_all": 2}


def test_layer_costs_attribute_the_all_to_alls_to_ep(traced: LayerChain) -> None:
    cluster = Cluster(16, 8, 400e9, 50e9, 1e-6, 4e-6)
    acc = load_accelerator("h100-80gb")
    for ep in (2, 4):
        chain = shard_experts(traced, ep)
        costs = layer_costs(chain, acc, RooflineCostModel(cluster))
        block: Layer = chain.layers[1]
        one = cluster_all_to_all_time_s(cluster, block.all_to_all_bytes, ep)
        cost = costs[1]
        assert cost.ep_comm_fwd_s == pytest.approx(2 * one) and cost.ep_comm_bwd_s == pytest.approx(2 * one)
        assert cost.tp_comm_fwd_s == cost.tp_comm_bwd_s == 0.0
        assert cost.expert_params == block.expert_params == EXPERTS * EXPERT // ep
        assert cost.params == block.params
        assert costs[0].expert_params == costs[0].ep_comm_fwd_s == 0
    base = layer_costs(traced, acc, RooflineCostModel(cluster))[1]
    assert base.expert_params == EXPERTS * EXPERT and base.ep_comm_fwd_s == 0.0


def test_graph_cli_shows_ep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    code, out, err = run(["graph", "--model", str(path), "--seq-len", "256", "--ep", "2", "--json"], capsys)
    assert code == 0, err
    graph = json.loads(out)
    assert not list(Draft202012Validator(load_schema("graph")).iter_errors(graph))
    block = graph["layers"][1]
    assert graph["ep"] == 2 and block["collectives"] == {"all_to_all": 4}
    assert (block["local_experts"], block["shared_experts"], block["tokens_per_expert"]) == (2, 0, 256)
    assert block["all_to_all_bytes"] == 256 * 2 * H * 2
    code, out, err = run(["graph", "--model", str(path), "--seq-len", "256", "--ep", "2"], capsys)
    assert code == 0, err
    assert "TP 1, EP 2 (per device)" in out
    assert "4 (top 2), 2 per rank, 256 tokens each;" in out and "all-to-all 0.25 MiB" in out
    code, _, err = run(["graph", "--model", str(path), "--seq-len", "256", "--ep", "3"], capsys)
    assert code == 2 and "EP degree 3 does not divide the 4 routed experts" in err


def test_fused_epilogues_keep_their_flop() -> None:
    """With ``--fuse`` the gating activation (and the combine's sum) run in the grouped GEMMs'
    epilogues; their element-wise FLOP survive the transform."""
    chain = extract_chain(small(), ExtractOptions.of(micro_batch=1, seq_len=64, fuse=True))
    base, block = chain.layers[1], shard_experts(chain, 2).layers[1]
    assert any(op.fused_elements for op in grouped(block.fwd))
    assert (block.fwd.flop, block.bwd.flop) == (base.fwd.flop, base.bwd.flop)
    assert block.fwd.collectives() == block.bwd.collectives() == {"all_to_all": 2}


@pytest.mark.slow
def test_deepseek_v3_at_ep64() -> None:
    """DeepSeek-V3's published layout (EP64, technical report sec. 3.2): 4 of the 256 routed experts
    per rank, the same FLOP per rank, 4,096 tokens x top-8 copies of 7,168 bf16 values per all-to-all."""
    chain = extract_chain(load_model("deepseek-v3"), ExtractOptions.of(micro_batch=1, seq_len=4096, ep=64))
    traced = extract_chain(load_model("deepseek-v3"), ExtractOptions.of(micro_batch=1, seq_len=4096))
    moe, base = chain.layers[4], traced.layers[4]
    expert = 3 * 7168 * 2048
    assert moe.expert_params == 4 * expert and moe.params == base.params - 252 * expert
    assert (moe.fwd.flop, moe.bwd.flop) == (base.fwd.flop, base.bwd.flop)
    assert moe.tokens_per_expert == 64 * 4096 * 8 // 256 == 8192
    assert moe.all_to_all_bytes == 4096 * 8 * 7168 * 2
    assert chain.layers[1] == traced.layers[1]  # the 3 dense blocks are not sharded
    assert chain.active_params == traced.active_params
