"""Every bundled preset traces, and its parameter count equals the published one."""

from __future__ import annotations

import pytest

from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model, model_preset_names


def gpt2_params(layers: int, h: int, vocab: int, positions: int) -> int:
    """GPT-2 architecture: 12h^2 + 13h per block, token + position embeddings, final norm (tied head)."""
    return layers * (12 * h * h + 13 * h) + vocab * h + positions * h + 2 * h


# Published counts: the HF model cards / safetensors index (exact totals), or the
# architecture formula of the paper where the paper rounds (GPT-3 "175B" is 174.6 B
# exactly; Megatron's "8.3B" is 8.32 B).
PUBLISHED = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    # the model cards round: Qwen3-30B-A3B "30.5B", Qwen3-235B-A22B "235B", DeepSeek-V3 "671B"
    # (main model, without its 14 B multi-token-prediction module); these are the architecture
    # formulas' exact totals
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "deepseek-v3": 671_026_404_352,
    "gpt2-xl": 1_557_611_200,
    "opt-350m": 331_196_416,
    "opt-1.3b": 1_315_758_080,
    "bert-large": 335_174_458,
    "gpt3-175b": gpt2_params(96, 12288, 50257, 2048),
    "megatron-gpt2-8.3b": gpt2_params(72, 3072, 51200, 1024),
}


def test_every_preset_has_a_published_count():
    assert set(model_preset_names()) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name: str):
    spec = load_model(name)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    assert len(chain.layers) == spec.num_layers + 2
    assert chain.model_params == pytest.approx(PUBLISHED[name], rel=1e-3)


def test_paper_sizes():
    assert gpt2_params(96, 12288, 50257, 2048) == pytest.approx(175e9, rel=3e-3)
    assert gpt2_params(72, 3072, 51200, 1024) == pytest.approx(8.3e9, rel=3e-3)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_block_flop_matches_analytical_count(name: str):
    """fwd FLOP of a block = 2*params*tokens + 4*b*s^2*(heads*head_dim) within 2 % (Narayanan et
    al. 2021, eq. 2 per layer), with the parameters a token uses (a mixture-of-experts block's
    active parameters); bwd = 2x fwd within 3 %."""
    spec = load_model(name)
    b, s = 2, 256
    block = extract_chain(spec, ExtractOptions.of(micro_batch=b, seq_len=s)).layers[1]
    cfg = spec.config
    width = cfg.get("hidden_size", cfg.get("n_embd"))
    analytical = 2 * block.active_params * b * s + 4 * b * s * s * width
    assert block.fwd.flop == pytest.approx(analytical, rel=0.02)
    assert block.bwd.flop == pytest.approx(2 * block.fwd.flop, rel=0.03)


@pytest.mark.parametrize(("name", "billions"), [("llama3.1-8b", 8.03), ("llama3.1-70b", 70.6),
                                                ("llama3.1-405b", 405.9)])
def test_llama31_matches_the_rounded_published_sizes(name: str, billions: float):
    """Llama 3.1 model cards: 8.03 B, 70.6 B, 405.9 B parameters (within 0.5 %); GQA with 8 KV heads,
    vocabulary 128,256, context 131,072 by the llama3 RoPE scaling."""
    spec = load_model(name)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    assert chain.model_params == pytest.approx(billions * 1e9, rel=5e-3)
    cfg = spec.config
    assert (spec.kv_heads, spec.vocab_size, cfg["max_position_embeddings"]) == (8, 128_256, 131_072)
    assert cfg["rope_scaling"]["rope_type"] == "llama3" and spec.seq_len == 8192


def test_qwen3_235b_matches_the_published_sizes():
    """Qwen3-235B-A22B model card: 235 B parameters in total, 234 B without the embeddings, 22 B
    activated; 94 layers of 128 experts (width 1,536), 8 per token, GQA 64 / 4 heads of 128.
    The totals agree within 0.5 %. The activated count is the architecture's exact 22.19 B
    (+0.9 % from the card's "22B", which is rounded to the billion: asserted within that
    rounding, and exactly against the per-layer formula)."""
    spec = load_model("qwen3-235b-a22b")
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    h, layers, vocab, head_dim = 4096, 94, 151_936, 128
    embeddings = 2 * vocab * h  # input embedding and untied output head
    assert chain.model_params == pytest.approx(235e9, rel=5e-3)
    assert chain.model_params - embeddings == pytest.approx(234e9, rel=5e-3)
    assert abs(chain.active_params - 22e9) <= 0.5e9
    attention = h * (64 + 2 * 4) * head_dim + 64 * head_dim * h
    experts = 8 * 3 * h * 1536
    router_and_norms = 128 * h + 2 * h + 2 * head_dim
    assert chain.active_params == layers * (attention + experts + router_and_norms) + embeddings + h
    assert (spec.kv_heads, spec.vocab_size, spec.seq_len) == (4, vocab, 4096)
