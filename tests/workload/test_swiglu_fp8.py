"""The SwiGLU inputs kept in FP8 for the backward pass (``swiglu_fp8_input``: Megatron-Core's
``--activation-func-fp8-input-store``, DeepSeek-V3 sec. 3.3.3): a layer keeps one byte a
element of its gate and up projections' outputs instead of two, counted by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli_helpers import run
from tests.helpers.small_moe import QWEN2, QWEN3

from archplace.base.errors import ConfigError
from archplace.front import api
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model

BATCH, SEQ = 2, 32
TOKENS = BATCH * SEQ
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64, "vocab_size": 128}
GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64, "vocab_size": 128}


def _layers(config: dict[str, Any], tmp_path: Path, on: bool, **options: Any) -> list[Any]:
    path = tmp_path / f"{config['model_type']}.json"
    path.write_text(json.dumps(config))
    return list(extract_chain(load_model(str(path)), ExtractOptions.of(
        micro_batch=BATCH, seq_len=SEQ, swiglu_fp8_input=on, **options)).layers)


@pytest.mark.parametrize("recompute_modules", [("core_attn",), ("mlp",)])
def test_a_dense_swiglu_keeps_its_gate_and_up_in_fp8(tmp_path: Path,
                                                     recompute_modules: tuple[str, ...]) -> None:
    """Each block's gate and up outputs, [T, I] bf16 each, take T I bytes less apiece; with the
    MLP recomputed (selective) nothing of the MLP is kept, so the selective figure is unchanged."""
    off, on = (_layers(LLAMA, tmp_path, flag, recompute_modules=recompute_modules) for flag in (False, True))
    saved = 2 * TOKENS * LLAMA["intermediate_size"]
    for a, b in zip(off, on, strict=True):
        expected = saved if a.kind.value == "block" else 0
        assert a.activation_bytes - b.activation_bytes == expected, a.name
        kept = 0 if "mlp" in recompute_modules else expected
        assert a.selective_activation_bytes - b.selective_activation_bytes == kept, a.name
        assert (a.fwd_flop, a.bwd_flop, a.working_bytes) == (b.fwd_flop, b.bwd_flop, b.working_bytes)


def test_the_experts_and_the_shared_expert_keep_theirs_in_fp8(tmp_path: Path) -> None:
    """Qwen2-MoE: the routed experts' fused gate-up output, [T k, 2 I_moe], and the shared
    expert's gate and up outputs, [T, I_shared] each; Qwen3-MoE has no shared expert."""
    for config, shared in ((QWEN2, QWEN2["shared_expert_intermediate_size"]), (QWEN3, 0)):
        off, on = (_layers(config, tmp_path, flag) for flag in (False, True))
        routed = TOKENS * config["num_experts_per_tok"]
        expected = routed * 2 * config["moe_intermediate_size"] + 2 * TOKENS * shared
        for a, b in zip(off, on, strict=True):
            assert a.activation_bytes - b.activation_bytes == (expected if a.experts else 0), a.name


def test_gelu_has_no_swiglu_input(tmp_path: Path) -> None:
    off, on = (_layers(GPT, tmp_path, flag) for flag in (False, True))
    assert [a.activation_bytes for a in off] == [b.activation_bytes for b in on]


def test_the_option_reaches_graph_evaluate_and_the_command_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    graphs = {flag: api.graph(str(path), seq_len=SEQ, micro_batch=BATCH, swiglu_fp8_input=flag)
              for flag in (False, True)}
    assert graphs[True]["swiglu_fp8_input"] is True
    with pytest.raises(ConfigError, match="swiglu_fp8_input"):  # not read as a truthy string
        api.graph(str(path), seq_len=SEQ, swiglu_fp8_input="false")  # type: ignore[arg-type]
    kept = {flag: sum(layer["activation_bytes"] for layer in g["layers"]) for flag, g in graphs.items()}
    assert kept[False] - kept[True] == LLAMA["num_hidden_layers"] * 2 * TOKENS * LLAMA["intermediate_size"]
    plan = {"devices": 2, "global_batch": 4, "seq_len": SEQ, "tp": 1, "pp": 1, "dp": 2, "micro_batch": BATCH}
    memory = {flag: api.evaluate(str(path), "h100-80gb", **plan, swiglu_fp8_input=flag).memory[0].activations
              for flag in (False, True)}
    assert memory[True] < memory[False]
    argv = ["graph", "--model", str(path), "--seq-len", str(SEQ), "--swiglu-fp8-input", "--json"]
    status, out, _ = run(argv, capsys)
    assert status == 0 and json.loads(out)["swiglu_fp8_input"] is True
