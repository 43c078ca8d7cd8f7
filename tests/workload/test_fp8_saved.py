"""FP8 training saves the linear GEMMs' inputs in FP8 (archplace.workload.fp8_saved): the
saving per block, by hand, in units of s·b·h bytes.

A GPT-2 block with FlashAttention saves for its weight-gradient GEMMs the first layer norm's
output (QKV input, s·b·h elements), the attention output (projection input, s·b·h), the second
layer norm's output (FC1 input, s·b·h) and the GeLU output (FC2 input, 4·s·b·h). Under FP8 the
GEMM-only ones drop from 2 B to 1 B per element (s·b·h + s·b·h + 4·s·b·h fewer bytes), while the
attention output, which the fused attention's backward also reads, keeps its bf16 copy and gains
an FP8 one (s·b·h more): 5·s·b·h. With eager attention the scores' backward does not read the
attention output, so it is a GEMM-only input too: 7·s·b·h. With TP t the layer norms' outputs
are whole on every rank, the rest split: (2 + 4/t - 1/t)·s·b·h; sequence parallelism splits the
layer norms' outputs too: 5/t·s·b·h. A Llama block (SwiGLU, FFN width f) saves the two RMSNorm
outputs, the attention output and the SwiGLU product (down-projection input, s·b·f):
(1 + 1 - 1)·s·b·h + s·b·f.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.layers import LayerKind
from archplace.workload.zoo import LoadedModel, load_model

H, A, S, B, F = 64, 4, 48, 2, 176  # hidden, heads, sequence, micro-batch, Llama FFN width
SBH = S * B * H


def _model(root: Path, name: str, config: dict[str, object]) -> LoadedModel:
    path = root / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return load_model(str(path))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return _model(tmp_path_factory.mktemp("gpt"), "tiny-gpt", {
        "model_type": "gpt2", "n_layer": 1, "n_embd": H, "n_head": A, "n_positions": 64, "vocab_size": 128})


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return _model(tmp_path_factory.mktemp("llama"), "tiny-llama", {
        "model_type": "llama", "num_hidden_layers": 1, "hidden_size": H, "num_attention_heads": A,
        "num_key_value_heads": 2, "intermediate_size": F, "max_position_embeddings": 64, "vocab_size": 128})


def _saving(spec: LoadedModel, **options: object) -> float:
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=B, seq_len=S, **options))  # type: ignore[arg-type]
    (block,) = [layer for layer in chain.layers if layer.kind is LayerKind.BLOCK]
    return block.fp8_activation_saving_bytes


@pytest.mark.parametrize(("options", "units"), [
    ({"attention": "flash", "kernels": "fused"}, 5.0),
    ({"attention": "flash", "kernels": "unfused"}, 5.0),
    ({"attention": "eager", "kernels": "fused"}, 7.0),
    ({"attention": "flash", "kernels": "fused", "tp": 2}, 2 + 4 / 2 - 1 / 2),
    ({"attention": "flash", "kernels": "fused", "tp": 2, "sp": True}, 5 / 2),
])
def test_gpt_block_saving_by_hand(gpt: LoadedModel, options: dict[str, object], units: float) -> None:
    assert _saving(gpt, **options) == units * SBH


@pytest.mark.parametrize("kernels", ["fused", "unfused"])
def test_llama_block_saving_by_hand(llama: LoadedModel, kernels: str) -> None:
    assert _saving(llama, attention="flash", kernels=kernels) == SBH + S * B * F


def test_saving_is_within_the_saved_bytes(gpt: LoadedModel) -> None:
    chain = extract_chain(gpt, ExtractOptions.of(micro_batch=B, seq_len=S))
    for layer in chain.layers:
        assert 0 <= layer.fp8_activation_saving_bytes < layer.selective_activation_bytes or \
            layer.fp8_activation_saving_bytes == 0
