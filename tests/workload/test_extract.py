"""Graph extraction on real HF model code (meta device): FLOP, parameters, attribution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import OpKind, Phase
from archplace.workload.layers import LayerKind
from archplace.workload.zoo import load_model, model_preset_names

# HF eager attention and unfused element-wise ops: these tests check tracing and TP sharding
# of the operators as HF writes them, not the kernels production trainers run.
AS_TRACED = {"attention": "eager", "kernels": "unfused"}


@pytest.fixture(scope="module")
def gpt2xl():
    spec = load_model("gpt2-xl")
    return spec, extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=256, **AS_TRACED))


def test_presets_are_the_four_of_the_skeleton():
    assert set(model_preset_names()) >= {"gpt2-xl", "bert-large", "opt-350m", "llama2-7b"}


def test_chain_shape(gpt2xl):
    spec, chain = gpt2xl
    kinds = [layer.kind for layer in chain.layers]
    assert kinds == [LayerKind.EMBEDDING] + [LayerKind.BLOCK] * 48 + [LayerKind.HEAD]
    assert chain.layers[1].fwd is chain.layers[48].fwd  # blocks share one traced graph


def test_gpt2_block_params_and_flop(gpt2xl):
    """GPT-2 block: 12h^2 + 13h params; fwd matmul FLOP = 2*(matmul params)*tokens + 4*b*s^2*h."""
    _, chain = gpt2xl
    h, s, b = 1600, 256, 1
    block = chain.layers[1]
    assert block.params == 12 * h * h + 13 * h
    matmul_params = 12 * h * h
    expected_fwd = 2 * matmul_params * b * s + 4 * b * s * s * h
    assert block.fwd.matmul_flop() == pytest.approx(expected_fwd, rel=0.02)
    # whole forward graph including vector ops stays within 2 % of the analytical count
    assert block.fwd.flop == pytest.approx(2 * block.params * b * s + 4 * b * s * s * h, rel=0.02)
    # backward = data-gradient + weight-gradient GEMMs = 2x forward matmul FLOP
    assert block.bwd.matmul_flop() == pytest.approx(2 * block.fwd.matmul_flop(), rel=0.01)


def test_weight_gradient_matmuls_present(gpt2xl):
    """Every forward weight GEMM [s,h]x[h,n] has a weight-gradient GEMM [h,s]x[s,n] in backward."""
    _, chain = gpt2xl
    block = chain.layers[1]
    fwd_w = sorted((op.k, op.n) for op in block.fwd.ops if op.kind is OpKind.MATMUL and op.batch == 1)
    bwd_wgrad = sorted((op.m, op.n) for op in block.bwd.ops
                       if op.kind is OpKind.MATMUL and op.batch == 1 and op.k == 256)
    assert fwd_w == bwd_wgrad and len(fwd_w) == 4
    assert all(op.phase is Phase.BWD for op in block.bwd.ops)


def test_embedding_and_head_params(gpt2xl):
    _, chain = gpt2xl
    vocab, h, pos = 50257, 1600, 1024
    assert chain.layers[0].params == vocab * h + pos * h
    assert chain.layers[-1].params == vocab * h + 2 * h  # tied lm_head copy + final norm
    head = chain.layers[-1]
    assert head.fwd.matmul_flop() == 2 * 256 * h * vocab


def test_bytes_per_micro_batch(gpt2xl):
    _, chain = gpt2xl
    block = chain.layers[1]
    hidden_bytes = 256 * 1600 * 2  # one bf16 hidden state
    assert block.boundary_bytes == hidden_bytes
    assert block.input_bytes >= hidden_bytes
    # saved activations: between Korthikanti's 34*s*b*h (no attention) and 3x the full formula
    s, b, h, a = 256, 1, 1600, 25
    korthikanti = s * b * h * (34 + 5 * a * s / h)
    assert 34 * s * b * h < block.activation_bytes < 3 * korthikanti


def test_block_forward_matmuls_form_one_dependency_chain(gpt2xl):
    """qkv -> scores -> context -> out-proj -> fc1 -> fc2: six GEMMs on the longest path of the block."""
    _, chain = gpt2xl
    ops = chain.layers[1].fwd.ops
    depth = [0] * len(ops)  # most matmuls on any path ending at op i
    for op in ops:
        assert all(p < op.id for p in op.preds)
        depth[op.id] = max((depth[p] for p in op.preds), default=0) + (op.kind is OpKind.MATMUL)
    assert max(depth) == 6


def test_micro_batch_scales_flop():
    spec = load_model("bert-large")
    one = extract_chain(spec, ExtractOptions.of(1, 128, **AS_TRACED)).layers[1]
    two = extract_chain(spec, ExtractOptions.of(2, 128, **AS_TRACED)).layers[1]
    assert two.fwd.matmul_flop() == 2 * one.fwd.matmul_flop()
    assert two.activation_bytes == pytest.approx(2 * one.activation_bytes, rel=0.01)


def test_llama_block_params():
    spec = load_model("llama2-7b")
    chain = extract_chain(spec, ExtractOptions.of(1, 128, **AS_TRACED))
    h, f = 4096, 11008
    assert chain.layers[1].params == 4 * h * h + 3 * h * f + 2 * h
    assert len(chain.layers) == 34
    total = chain.layers[0].params + 32 * chain.layers[1].params + chain.layers[-1].params
    assert total == pytest.approx(6.738e9, rel=1e-3)  # published 6.74 B


def test_config_json_path(tmp_path: Path):
    cfg = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 64,
           "vocab_size": 1000}
    path = tmp_path / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    spec = load_model(str(path))
    assert spec.name == "tiny-gpt" and spec.seq_len == 64 and spec.num_layers == 2
    chain = extract_chain(spec, ExtractOptions.of(1, 64, **AS_TRACED))
    assert len(chain.layers) == 4
    assert chain.layers[1].params == 12 * 128 * 128 + 13 * 128


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"model_type": "nosuch", "n_layer": 2}', "unknown architecture"),
    ('{"model_type": "gpt2", "n_layer": 0, "n_positions": 64}', "'n_layer' must be a whole number >= 1"),
    ("[1, 2]", "JSON object"),
])
def test_bad_config_files(tmp_path: Path, content: str, message: str):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_model(str(path))


def test_unknown_model_lists_choices():
    with pytest.raises(ConfigError, match="gpt2-xl"):
        load_model("gpt5")
    with pytest.raises(ConfigError, match="not found"):
        load_model("missing/config.json")


def test_bad_options():
    with pytest.raises(ConfigError, match="sequence length"):
        load_model("gpt2-xl").with_seq_len(4096)


def test_other_architecture_through_the_same_path(tmp_path: Path):
    """An architecture outside the family table (Qwen2) traces through the generic field map."""
    cfg = {"model_type": "qwen2", "num_hidden_layers": 3, "hidden_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
           "max_position_embeddings": 64, "architectures": ["Qwen2ForCausalLM"]}
    path = tmp_path / "qwen" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    chain = extract_chain(load_model(str(path)), ExtractOptions.of(1, 64, tp=2, **AS_TRACED))
    assert len(chain.layers) == 5
    assert chain.layers[1].fwd.collectives() == {"all_reduce": 2}
    with pytest.raises(ConfigError, match="key/value heads"):
        extract_chain(load_model(str(path)), ExtractOptions.of(1, 64, tp=4, **AS_TRACED))


def test_typo_in_config_field(tmp_path: Path):
    cfg = {"model_type": "llama", "num_hiden_layers": 2, "num_hidden_layers": 2, "hidden_size": 64,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
           "max_position_embeddings": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    typo = "unknown field 'num_hiden_layers' .did you mean 'num_hidden_layers'"
    with pytest.raises(ConfigError, match=typo):
        load_model(str(path))
