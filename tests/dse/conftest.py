"""Fixtures of the search tests: small model configurations as files."""

from __future__ import annotations

import json

import pytest

GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "n_positions": 512,
       "vocab_size": 4096}
MOE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
       "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
       "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
       "tie_word_embeddings": False}


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Paths of a 2-layer GPT-2 (``gpt``) and a 2-layer, 4-expert Mixtral (``moe``) config."""
    directory = tmp_path_factory.mktemp("models")
    out = {}
    for name, config in (("gpt", GPT), ("moe", MOE)):
        path = directory / f"{name}.json"
        path.write_text(json.dumps(config))
        out[name] = str(path)
    return out
