"""Issue #15's acceptance test: on 1,000 designs sampled (fixed seed) from PHAZE's space, the
pruned exhaustive search's optimum and the top rows it proves equal ``exhaustive-all``'s, for
four models searched jointly (the geometric mean of their throughputs)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from archplace.dse.request import SearchRequest
from archplace.dse.runner import run_search
from archplace.dse.strategies import make_strategy
from archplace.front import api

SAMPLE = 1000
KEEP = 5
SMALL_MODELS: dict[str, dict[str, Any]] = {
    "gpt2-small4": {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_inner": 1024,
                    "vocab_size": 8000, "n_positions": 1024, "bos_token_id": 0, "eos_token_id": 0},
    "llama-small4": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 688,
                     "vocab_size": 8000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
                     "hidden_act": "silu", "tie_word_embeddings": False},
    "bert-small4": {"model_type": "bert", "num_hidden_layers": 4, "hidden_size": 256,
                    "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 8000,
                    "max_position_embeddings": 512},
    "opt-small4": {"model_type": "opt", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                   "ffn_dim": 1024, "vocab_size": 8000, "max_position_embeddings": 1024,
                   "word_embed_proj_dim": 256, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1},
}
"""Four small models of PHAZE's four families (GPT-2, Llama, BERT, OPT)."""


def sampled(request: SearchRequest, size: int = SAMPLE, seed: int = 0) -> SearchRequest:
    """``request`` over ``size`` of its designs drawn with ``seed`` (in the space's order)."""
    chosen = sorted(random.Random(seed).sample(range(len(request.designs)), size))
    return dataclasses.replace(request, designs=tuple(request.designs[i] for i in chosen))


def check_pruning_is_lossless(request: SearchRequest) -> None:
    pruned = run_search(request, make_strategy("exhaustive"), keep=KEEP)
    plain = run_search(request, make_strategy("exhaustive-all"))
    assert len(plain.evaluated) == SAMPLE and plain.best is not None and pruned.best is not None
    assert pruned.pruned > 0 and len(pruned.evaluated) + pruned.pruned == SAMPLE
    assert pruned.best.to_dict() == plain.best.to_dict()  # same design, plans and figures
    assert [r.to_dict() for r in pruned.evaluated[:KEEP]] == [r.to_dict() for r in plain.evaluated[:KEEP]]


PLAN: dict[str, Any] = dict(micro_batch_sizes=(1, 2), recomputes=("none",), tps=(1,), schedules=("1f1b",),
                            zero_stages="1", baseline=None)
"""A small plan space: the searches evaluate every design for every model (a 1,000-design
exhaustive-all run takes about 4 minutes on 2 loaded cores with the small models)."""


@pytest.mark.slow  # PHAZE's 88,080 designs loaded in ~10 s, the two searches ~4 min on 2 loaded cores
def test_pruned_equals_exhaustive_all_on_a_phaze_sample_four_small_models(tmp_path: Path) -> None:
    paths = []
    for name, config in SMALL_MODELS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        paths.append(str(path))
    request = api.search_request(paths, space="phaze", devices=64, global_batch=256, seq_len=256, **PLAN)
    assert len(request.designs) == 88080
    check_pruning_is_lossless(sampled(request))


@pytest.mark.slow  # PHAZE's four models: 1,000 designs at ~1.5 designs/s, some 15 minutes on 2 cores
def test_pruned_equals_exhaustive_all_on_a_phaze_sample_phaze_models() -> None:
    request = api.search_request(["bert-large", "gpt2-xl", "opt-350m", "llama2-7b"], space="phaze",
                                 devices=1024, global_batch=4096, **PLAN)
    check_pruning_is_lossless(sampled(request))
