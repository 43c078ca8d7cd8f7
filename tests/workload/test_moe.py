"""Mixture-of-experts models traced with grouped-GEMM experts: counts, FLOP, activations, CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from archplace.base.errors import ConfigError
from archplace.schemas import load_schema
from archplace.workload.extract import ExtractOptions, check_tp, extract_chain
from archplace.workload.graph import OpKind
from archplace.workload.summary import chain_summary
from archplace.workload.zoo import LoadedModel, load_model
from cli_helpers import run

# A small Mixtral-architecture model: 2 layers, hidden 256, 4 experts of width 512, top-2.
SMALL: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def small(**changes: Any) -> LoadedModel:
    return LoadedModel("small-moe", json.dumps(dict(SMALL, **changes), sort_keys=True), 256)


def valid(kind: str, document: object) -> bool:
    return not list(Draft202012Validator(load_schema(kind)).iter_errors(document))


def test_mixtral_total_and_active_parameters_are_the_published_ones():
    """Mixtral of Experts (Jiang et al. 2024, sec. 2; model card): 46.7 B parameters, 12.9 B
    active per token."""
    chain = extract_chain(load_model("mixtral-8x7b"), ExtractOptions.of(micro_batch=1, seq_len=64))
    assert chain.model_params == pytest.approx(46.7e9, rel=5e-3)
    assert chain.active_params == pytest.approx(12.9e9, rel=5e-3)


def test_small_moe_block_exact_counts_and_flop():
    h, inner, experts, top_k, b, s = 256, 512, 4, 2, 2, 128
    chain = extract_chain(small(), ExtractOptions.of(micro_batch=b, seq_len=s))
    block = chain.layers[1]
    attention = 2 * h * h + 2 * h * (h // 2)  # q, o: h x h; k, v: h x (kv heads x head dim)
    expert = 3 * h * inner
    router, norms = experts * h, 2 * h
    assert block.params == attention + experts * expert + router + norms
    assert (block.experts, block.experts_per_token, block.expert_params) == (experts, top_k, experts * expert)
    assert block.tokens_per_expert == b * s * top_k // experts
    assert block.active_params == attention + top_k * expert + router + norms
    # forward FLOP = 2 x active parameters x tokens + attention, within 2 %
    fused = sum(op.flop for op in block.fwd.ops if op.kind is OpKind.ATTENTION)
    assert block.fwd.flop == pytest.approx(2 * block.active_params * b * s + fused, rel=0.02)
    # each expert GEMM exactly 2 x routed tokens x its weights, forward; data + weight gradients
    grouped = [op for op in block.fwd.ops if "grouped_mm" in op.target]
    assert sum(op.flop for op in grouped) == 2 * b * s * top_k * expert
    grouped_bwd = [op for op in block.bwd.ops if "grouped_mm" in op.target]
    assert len(grouped_bwd) == 4 and sum(op.flop for op in grouped_bwd) == 4 * b * s * top_k * expert
    assert block.bwd.flop == pytest.approx(2 * block.fwd.flop, rel=0.03)
    # the routed tokens (bf16 [b s k, h]) and the experts' gate/up and inner results are saved
    routed = b * s * top_k
    assert block.activation_bytes >= 2 * routed * (h + 2 * inner + inner)


def test_mixtral_block_formula():
    b, s = 1, 512
    block = extract_chain(load_model("mixtral-8x7b"), ExtractOptions.of(micro_batch=b, seq_len=s)).layers[1]
    h, inner = 4096, 14336
    assert block.active_params == 4 * h * h - 2 * h * (h - 1024) + 2 * 3 * h * inner + 8 * h + 2 * h
    fused = sum(op.flop for op in block.fwd.ops if op.kind is OpKind.ATTENTION)
    assert block.fwd.flop == pytest.approx(2 * block.active_params * b * s + fused, rel=0.02)


def test_tensor_parallel_moe_needs_sequence_parallelism():
    check_tp(small(), 1)
    check_tp(small(), 2, sp=True)
    with pytest.raises(ConfigError, match="needs sp with tp > 1"):
        check_tp(small(), 2)


def test_graph_shows_experts_and_tokens_per_expert():
    chain = extract_chain(small(), ExtractOptions.of(micro_batch=1, seq_len=64))
    summary = chain_summary(chain)
    block = summary["layers"][1]
    assert (block["experts"], block["experts_per_token"], block["tokens_per_expert"]) == (4, 2, 32)
    assert "experts" not in summary["layers"][0]
    assert summary["total"]["active_params"] == chain.active_params < chain.model_params


@pytest.mark.slow
def test_small_moe_graph_estimate_plan_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    code, out, err = run(["graph", "--model", str(path), "--seq-len", "256"], capsys)
    assert code == 0, err
    assert "4 (top 2), 128 tokens each" in out
    code, out, err = run(["graph", "--model", str(path), "--seq-len", "256", "--json"], capsys)
    assert code == 0, err
    graph = json.loads(out)
    assert graph["layers"][1]["tokens_per_expert"] == 128 and valid("graph", graph)
    code, out, err = run(["estimate", "--model", str(path), "--hardware", "h100-80gb", "--seq-len", "256",
                          "--json"], capsys)
    assert code == 0, err
    assert valid("estimate", json.loads(out))
    code, out, err = run(["plan", "--model", str(path), "--hardware", "h100-80gb", "--devices", "4",
                          "--global-batch", "8", "--seq-len", "256", "--json"], capsys)
    assert code == 0, err
    plans = json.loads(out)
    assert valid("plan", plans)
    assert all(p["plan"]["sp"] for p in plans["plans"] if p["plan"]["tp"] > 1)  # Megatron-Core's rule
    code, out, err = run(["plan", "--model", str(path), "--hardware", "h100-80gb", "--devices", "4",
                          "--global-batch", "8", "--seq-len", "256", "--tp", "2", "--json"], capsys)
    assert code == 0, err
    assert {(p["plan"]["tp"], p["plan"]["sp"]) for p in json.loads(out)["plans"]} == {(2, True)}
    code, _, err = run(["evaluate", "--model", str(path), "--hardware", "h100-80gb", "--devices", "4",
                        "--global-batch", "8", "--seq-len", "256", "--tp", "2", "--pp", "1", "--dp", "2",
                        "--micro-batch", "1"], capsys)
    assert code == 2 and "needs sequence parallelism" in err and len(err.strip().splitlines()) == 1


def test_qwen3_moe_total_parameters():
    """Qwen3-30B-A3B model card: 30.5 B parameters; 128 experts, 8 per token."""
    chain = extract_chain(load_model("qwen3-30b-a3b"), ExtractOptions.of(micro_batch=1, seq_len=64))
    assert chain.model_params == pytest.approx(30.5e9, rel=5e-3)
    block = chain.layers[1]
    assert (block.experts, block.experts_per_token, block.tokens_per_expert) == (128, 8, 4)


def test_deepseek_v3_total_and_active_parameters():
    """DeepSeek-V3 technical report (sec. 1, Table 1 of sec. 4.5.1): 671 B total, 37 B activated per
    token. The total is the architecture's to 0.01 %; the activated figure is rounded to whole
    billions: the architecture gives 36.63 B without the input embedding table (a lookup, no
    GEMM), 37.55 B with it -- so 37 B is met within its rounding (1.1 %), not within 0.5 %."""
    chain = extract_chain(load_model("deepseek-v3"), ExtractOptions.of(micro_batch=1, seq_len=64))
    assert chain.model_params == pytest.approx(671e9, rel=5e-3)
    embedding = chain.layers[0].params
    assert embedding == 129_280 * 7168
    assert chain.active_params - embedding == pytest.approx(37e9, rel=0.011)
    # exact per-block architecture: MLA + 3 dense layers (FFN 18,432), 58 MoE layers with one shared
    # and 8 of 256 routed experts of width 2,048, router 256 x 7,168
    h = 7168
    mla = (h * 1536 + 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 + 512 * 128 * (128 + 128)
           + 128 * 128 * h)
    dense, moe = chain.layers[1], chain.layers[4]
    assert dense.params == mla + 3 * h * 18432 + 2 * h and not dense.experts
    assert moe.params == mla + 257 * 3 * h * 2048 + 256 * h + 2 * h
    assert moe.active_params == mla + 9 * 3 * h * 2048 + 256 * h + 2 * h
    assert [layer.experts for layer in chain.layers[1:-1]] == [0] * 3 + [256] * 58


# A small DeepSeek-V3-architecture model: MLA, 1 dense block then 2 MoE blocks (1 shared + 8 routed
# experts, top-2 in 1 of 2 groups).
SMALL_DEEPSEEK: dict[str, Any] = {
    "model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 1, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_group": 2, "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 1024,
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}


def test_chain_mixes_dense_and_moe_blocks():
    b, s = 2, 128
    spec = LoadedModel("small-deepseek", json.dumps(SMALL_DEEPSEEK, sort_keys=True), 256)
    assert spec.block_runs == (1, 2)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=b, seq_len=s))
    dense, moe = chain.layers[1], chain.layers[2]
    assert [layer.name for layer in chain.layers] == ["embedding", "block.0", "block.1", "block.2", "head"]
    assert chain.layers[3] == dataclasses.replace(moe, name="block.2")
    assert (dense.experts, moe.experts, moe.experts_per_token) == (0, 8, 2)
    assert moe.tokens_per_expert == b * s * 2 // 8
    h = 256
    mla = h * 64 + 64 + 64 * 4 * 48 + h * (32 + 16) + 32 + 32 * 4 * (32 + 32) + 4 * 32 * h
    assert dense.params == mla + 3 * h * 512 + 2 * h
    assert moe.active_params == mla + 3 * 3 * h * 64 + 8 * h + 2 * h
    for block in (dense, moe):
        fused = sum(op.flop for op in block.fwd.ops if op.kind is OpKind.ATTENTION)
        assert block.fwd.flop == pytest.approx(2 * block.active_params * b * s + fused, rel=0.02)
    layers = chain_summary(chain)["layers"]
    assert "experts" not in layers[1] and layers[2]["experts"] == layers[3]["experts"] == 8


def test_qwen2_moe_shared_expert_is_dense_and_always_active():
    """Qwen2-MoE: 4 routed experts (top 2) of width 64 and a gated shared expert of width 128."""
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256,
              "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128, "num_experts": 4,
              "num_experts_per_tok": 2, "vocab_size": 500, "max_position_embeddings": 512,
              "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    b, s, h = 1, 64, 128
    chain = extract_chain(LoadedModel("small-qwen2-moe", json.dumps(config, sort_keys=True), 64),
                          ExtractOptions.of(micro_batch=b, seq_len=s))
    block = chain.layers[1]
    attention = 4 * h * h + 3 * h  # q, k, v with biases, o
    shared = 3 * h * 128 + h  # and its 1-output gate
    assert block.expert_params == 4 * 3 * h * 64
    assert block.active_params == attention + 2 * 3 * h * 64 + shared + 4 * h + 2 * h
    fused = sum(op.flop for op in block.fwd.ops if op.kind is OpKind.ATTENTION)
    assert block.fwd.flop == pytest.approx(2 * block.active_params * b * s + fused, rel=0.02)
