"""BLOOM's Hugging Face configs are read as transformers reads them (issue #26, item 7): its
aliases, ALiBi positions (no context field, any length), its fixed 4 x hidden FFN, and its
attention, which its code computes itself (traced eager only). gpt-oss is refused with what is
not traced, not as "mixture-of-experts"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.front import api
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.options import Attention
from archplace.workload.zoo import check_attention, load_model

BLOOM_560M = {
    "architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 1024, "n_layer": 24,
    "num_attention_heads": 16, "vocab_size": 250880, "layer_norm_epsilon": 1e-05,
    "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0, "hidden_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "unk_token_id": 0, "slow_but_exact": False,
    "pretraining_tp": 1, "use_cache": True, "initializer_range": 0.02}
"""bigscience/bloom-560m's config.json as published on the Hugging Face hub: older field names
(``n_embed``, ``num_attention_heads``), no FFN width, no context length."""

BLOOM_560M_PARAMS = 559_214_592
"""BLOOM-560m's parameter count (the bigscience/bloom-560m model card); by hand: embedding
250,880 x 1,024 + its layer norm 2 x 1,024, 24 blocks of 12 h^2 + 13 h (QKV, output and the
4h FFN with their biases, two layer norms), the final layer norm 2 h; the head is tied."""


def write(tmp_path: Path, config: dict[str, object], name: str = "bloom-560m") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_bloom_config_is_read_with_its_aliases_and_defaults(tmp_path: Path) -> None:
    model = load_model(write(tmp_path, BLOOM_560M))
    assert (model.num_layers, model.hidden_size, model.heads, model.kv_heads) == (24, 1024, 16, 16)
    assert model.ffn_size == 4 * 1024 and model.seq_len == 2048  # BLOOM's training length
    assert "n_embed" not in model.config and model.config["n_head"] == 16
    longer = model.with_seq_len(8192)  # ALiBi: no position table, so any length
    assert longer.seq_len == 8192 and longer.config["seq_length"] == 8192
    assert load_model(write(tmp_path, {**BLOOM_560M, "seq_length": 4096}, "b2")).seq_len == 4096


def test_bloom_560m_traces_to_its_published_parameter_count(tmp_path: Path) -> None:
    model = load_model(write(tmp_path, BLOOM_560M))
    chain = extract_chain(model, ExtractOptions.of(1, 128, attention=Attention.EAGER))
    h, vocab = 1024, 250_880
    block = 12 * h * h + 13 * h
    assert chain.layers[1].params == block
    assert vocab * h + 2 * h + 24 * block + 2 * h == BLOOM_560M_PARAMS  # the hand count above
    embedding, head = chain.layers[0].params, chain.layers[-1].params
    assert embedding + 24 * block + head - vocab * h == BLOOM_560M_PARAMS  # tied: the table counted once


def test_bloom_attention_runs_eager_only(tmp_path: Path) -> None:
    model = load_model(write(tmp_path, BLOOM_560M))
    check_attention(model, Attention.EAGER)
    for attention in (Attention.FLASH, Attention.SDPA):
        with pytest.raises(ConfigError, match=f"so {attention.value} cannot be traced: use attention eager"):
            check_attention(model, attention)
        with pytest.raises(ConfigError, match="computes its scores itself") as info:
            api.graph(write(tmp_path, BLOOM_560M), attention=attention.value)
        assert info.value.fields == ("attention",)
    with pytest.raises(ConfigError, match="computes its scores itself"):
        extract_chain(model, ExtractOptions.of(1, 128))  # the engine refuses it too


def test_a_bloom_config_naming_a_size_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {**BLOOM_560M, "hidden_size": 2048})
    with pytest.raises(ConfigError, match="fields 'n_embed' \\(1024\\) and 'hidden_size' \\(2048\\) name the "
                                          "same size"):
        load_model(path)
    assert load_model(write(tmp_path, {**BLOOM_560M, "hidden_size": 1024}, "same")).hidden_size == 1024


GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
    "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
    "num_local_experts": 32, "num_experts_per_tok": 4, "max_position_embeddings": 131072,
    "sliding_window": 128, "vocab_size": 201088, "hidden_act": "silu", "rms_norm_eps": 1e-05}
"""The fields of openai/gpt-oss-20b's config.json that matter here."""


def test_gpt_oss_is_refused_for_what_is_not_traced(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write(tmp_path, GPT_OSS_20B, "gpt-oss-20b"))
    message = str(info.value)
    assert "model_type 'gpt_oss' is not supported yet" in message and "sliding-window" in message
    assert "mixture-of-experts" not in message
