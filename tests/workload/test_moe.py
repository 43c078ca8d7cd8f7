"""Mixture-of-experts models traced with grouped-GEMM experts: counts, FLOP, activations, CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archplace.cli import main
from archplace.errors import ConfigError
from archplace.workload.extract import ExtractOptions, check_tp, extract_chain
from archplace.workload.graph import OpKind
from archplace.workload.summary import chain_summary
from archplace.workload.zoo import ModelSpec, load_model

# A small Mixtral-architecture model: 2 layers, hidden 256, 4 experts of width 512, top-2.
SMALL: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def small(**changes: Any) -> ModelSpec:
    return ModelSpec("small-moe", json.dumps(dict(SMALL, **changes), sort_keys=True), 256)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_mixtral_total_and_active_parameters_are_the_published_ones():
    """Mixtral of Experts (Jiang et al. 2024, sec. 2; model card): 46.7 B parameters, 12.9 B
    active per token."""
    chain = extract_chain(load_model("mixtral-8x7b"), ExtractOptions(micro_batch=1, seq_len=64))
    assert chain.model_params == pytest.approx(46.7e9, rel=5e-3)
    assert chain.active_params == pytest.approx(12.9e9, rel=5e-3)


def test_small_moe_block_exact_counts_and_flop():
    h, inner, experts, top_k, b, s = 256, 512, 4, 2, 2, 128
    chain = extract_chain(small(), ExtractOptions(micro_batch=b, seq_len=s))
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
    block = extract_chain(load_model("mixtral-8x7b"), ExtractOptions(micro_batch=b, seq_len=s)).layers[1]
    h, inner = 4096, 14336
    assert block.active_params == 4 * h * h - 2 * h * (h - 1024) + 2 * 3 * h * inner + 8 * h + 2 * h
    fused = sum(op.flop for op in block.fwd.ops if op.kind is OpKind.ATTENTION)
    assert block.fwd.flop == pytest.approx(2 * block.active_params * b * s + fused, rel=0.02)


def test_tensor_parallel_moe_is_refused():
    check_tp(small(), 1)
    with pytest.raises(ConfigError, match="tensor parallelism of the mixture-of-experts blocks"):
        check_tp(small(), 2)


def test_graph_shows_experts_and_tokens_per_expert():
    chain = extract_chain(small(), ExtractOptions(micro_batch=1, seq_len=64))
    summary = chain_summary(chain)
    block = summary["layers"][1]
    assert (block["experts"], block["experts_per_token"], block["tokens_per_expert"]) == (4, 2, 32)
    assert "experts" not in summary["layers"][0]
    assert summary["total"]["active_params"] == chain.active_params < chain.model_params


def test_small_moe_graph_estimate_plan_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    code, out, err = run(["graph", "--model", str(path), "--seq-len", "256"], capsys)
    assert code == 0, err
    assert "4 (top 2), 128 tokens each" in out
    code, out, err = run(["estimate", "--model", str(path), "--hardware", "h100-80gb", "--seq-len", "256",
                          "--json"], capsys)
    assert code == 0, err
    code, out, err = run(["plan", "--model", str(path), "--hardware", "h100-80gb", "--devices", "4",
                          "--global-batch", "8", "--seq-len", "256", "--json"], capsys)
    assert code == 0, err
    plans = json.loads(out)
    assert plans
    code, _, err = run(["plan", "--model", str(path), "--hardware", "h100-80gb", "--devices", "4",
                        "--global-batch", "8", "--seq-len", "256", "--tp", "2"], capsys)
    assert code == 2 and "tensor parallelism of the mixture-of-experts blocks" in err
