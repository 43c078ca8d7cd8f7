"""Selective recomputation of named modules (Megatron-Core's ``--recompute-modules``): what each
module frees and reruns, against Korthikanti et al. 2022's per-block counts (sec. 4.1) and counts
by hand on small mixture-of-experts blocks.

Korthikanti's GPT block keeps, in s·b·h bytes (bf16, dropout masks one byte): attention 11 + 5as/h,
MLP 19 (the first GEMM's input 2, GeLU's input 8, the second GEMM's input 8, the dropout mask
1), the two layer norms' inputs 4. The tests add the norms' fp32 per-row statistics
(``NORM_STATS``, which Korthikanti neglects), as ``test_kernels`` does.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from archplace.base.errors import ConfigError
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.layers import Layer
from archplace.workload.options import RecomputeModule
from archplace.workload.zoo import LoadedModel

sys.path.insert(0, str(Path(__file__).parent))
from test_moe import SMALL_DEEPSEEK  # noqa: E402

H, A, S, B = 64, 4, 48, 2  # hidden, heads, sequence, micro-batch (as test_kernels)
SBH = S * B * H
NORM_STATS = 16 * S * B  # fp32 mean + rstd of two layer norms
GPT = LoadedModel("tiny-gpt", json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": H, "n_head": A,
                                          "n_positions": 64, "vocab_size": 128}, sort_keys=True), 64)


def gpt_block(modules: tuple[str, ...], attention: str = "eager", **options: Any) -> Layer:
    opts = ExtractOptions.of(B, S, attention=attention, kernels="fused", recompute_modules=modules, **options)
    return extract_chain(GPT, opts).layers[1]


def test_default_is_megatron_cores_core_attn():
    assert ExtractOptions.of(1, 8).recompute_modules == (RecomputeModule.CORE_ATTN,)


@pytest.mark.parametrize(("modules", "kept_sbh", "stats"), [
    (("core_attn",), 34, NORM_STATS),               # Korthikanti sec. 5: the 5as²b core only
    (("mlp",), 34 - 17, NORM_STATS),                # 19 freed, its input 2 kept
    (("layernorm",), 34 - 4, 0),                    # both norms' outputs and statistics freed
    (("layernorm", "mlp"), 34 - 21, 0),             # the second norm's output is the MLP input: freed
    (("core_attn", "layernorm", "mlp"), 13, 0),
])
def test_gpt_block_against_korthikanti(modules: tuple[str, ...], kept_sbh: int, stats: int):
    layer = gpt_block(modules)
    core = 5 * A * S * S * B
    assert layer.activation_bytes == 34 * SBH + core + NORM_STATS
    expected = kept_sbh * SBH + stats + (0 if "core_attn" in modules else core)
    assert layer.selective_activation_bytes == expected


def test_flash_keeps_its_log_sum_exp_and_core_attn_frees_nothing():
    lse = 4 * A * S * B
    assert gpt_block(("core_attn",), "flash").selective_activation_bytes == 34 * SBH + NORM_STATS + lse
    assert gpt_block(("core_attn",), "flash").selective_ops == ()
    assert gpt_block(("mlp",), "flash").selective_activation_bytes == 17 * SBH + NORM_STATS + lse


def test_tensor_and_sequence_parallel_split_what_is_freed():
    t = 4
    layer = gpt_block(("mlp",), tp=t, sp=True)
    assert layer.selective_activation_bytes == (17 * SBH + NORM_STATS + 5 * A * S * S * B) / t


def test_rerun_operators_are_the_modules_forward():
    mlp = gpt_block(("mlp",))
    gemms = [op for op in mlp.fwd.ops if op.name in mlp.selective_ops and op.kind.value == "matmul"]
    assert sorted(op.flop for op in gemms) == [2 * S * B * H * 4 * H] * 2  # c_fc and c_proj
    norms = gpt_block(("layernorm",))
    assert [op.kind.value for op in norms.fwd.ops if op.name in norms.selective_ops] == ["norm", "norm"]


def test_order_and_repeats_do_not_matter():
    a = gpt_block(("mlp", "layernorm", "mlp"))
    b = gpt_block(("layernorm", "mlp"))
    assert a.selective_activation_bytes == b.selective_activation_bytes
    assert sorted(a.selective_ops) == sorted(b.selective_ops)


@pytest.mark.parametrize(("value", "message"), [
    (("bogus",), "unknown recompute_module 'bogus'"),
    ((), "needs at least one value"),
    ("mlp", "must be a list"),
])
def test_bad_modules_are_refused(value: object, message: str):
    with pytest.raises(ConfigError, match=message):
        ExtractOptions.of(1, 8, recompute_modules=value)


# A small DeepSeek-V3 block: b·s = 256 tokens, top-2 of 8 experts of width 64 -> 512 routed rows.
DEEPSEEK = LoadedModel("small-deepseek", json.dumps(SMALL_DEEPSEEK, sort_keys=True), 256)
DS_B, DS_S, ROWS, EXPERT_FFN = 2, 128, 2 * 128 * 2, 64


def deepseek(modules: tuple[str, ...], **options: Any) -> tuple[Layer, Layer]:
    chain = extract_chain(DEEPSEEK, ExtractOptions.of(DS_B, DS_S, recompute_modules=modules, **options))
    return chain.layers[1], chain.layers[2]  # the dense block, an MoE block


def freed(layer: Layer) -> float:
    return layer.activation_bytes - layer.selective_activation_bytes


def test_moe_act_frees_the_second_grouped_gemms_input():
    """The fused SwiGLU keeps its input (the first grouped GEMM's output); the product it makes,
    ROWS x EXPERT_FFN bf16 elements, is what moe_act frees."""
    dense, moe = deepseek(("moe_act",))
    assert freed(dense) == 0 and dense.selective_ops == ()
    assert freed(moe) == ROWS * EXPERT_FFN * 2
    imbalanced = deepseek(("moe_act",), ep=2, expert_load_imbalance=1.5)[1]
    assert freed(imbalanced) == 1.5 * ROWS * EXPERT_FFN * 2  # the busiest rank's rows


def test_moe_reruns_the_all_to_alls_and_frees_what_the_imbalance_adds():
    _, moe = deepseek(("moe",))
    assert "grouped_mm" in moe.selective_ops and "grouped_mm_1" in moe.selective_ops
    _, sharded = deepseek(("moe",), ep=2, expert_load_imbalance=1.5)
    assert {"all_to_all_dispatch", "all_to_all_combine"} <= set(sharded.selective_ops)
    _, plain = deepseek(("core_attn",), ep=2, expert_load_imbalance=1.5)
    # the imbalance's extra rows are freed with the rest of the MoE layer
    assert sharded.selective_activation_bytes == moe.selective_activation_bytes
    assert plain.activation_bytes == sharded.activation_bytes > moe.activation_bytes


def test_shared_experts_mlp_and_layernorm_on_moe_blocks():
    dense, moe = deepseek(("shared_experts",))
    assert freed(dense) == 0 and freed(moe) > 0
    assert all("grouped" not in name for name in moe.selective_ops)
    dense, moe = deepseek(("mlp",))
    assert freed(dense) > 0 and freed(moe) == 0  # mlp is the dense MLP; moe names the MoE layer
    dense, moe = deepseek(("layernorm",))
    assert freed(dense) > 0 and len(dense.selective_ops) == len(moe.selective_ops)


def test_mla_up_proj_frees_the_attention_inputs():
    """Per token, the up projections and RoPE make q (4 heads x 48) and k (4 x 48) and v (4 x 32)
    for the attention kernel, all freed: at least 2·(192 + 192 + 128) bytes a token."""
    dense, moe = deepseek(("mla_up_proj",))
    assert freed(dense) == freed(moe) >= DS_B * DS_S * 2 * (192 + 192 + 128)
    # the rerun GEMMs are the two up projections: 256 tokens x (64 -> 4 x 48 and 32 -> 4 x 64)
    rerun = [op for op in dense.fwd.ops if op.name in dense.selective_ops and op.kind.value == "matmul"]
    assert sorted(op.flop for op in rerun) == [2 * 256 * 32 * 256, 2 * 256 * 64 * 192]
    gpt = gpt_block(("mla_up_proj",))  # no latent attention: nothing to recompute
    assert gpt.selective_ops == () and freed(gpt) == 0


def test_graph_cli_shows_what_the_modules_free(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from jsonschema import Draft202012Validator

    from archplace.schemas import load_schema
    from cli_helpers import run

    path = tmp_path / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(GPT.config_json)
    argv = ["graph", "--model", str(path), "--seq-len", str(S), "--micro-batch", str(B)]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    plain = json.loads(out)
    assert plain["recompute_modules"] == ["core_attn"]
    assert all(layer["selective_activation_bytes"] == layer["activation_bytes"] for layer in plain["layers"])
    code, out, err = run([*argv, "--json", "--recompute-modules", "layernorm,mlp"], capsys)
    assert code == 0, err
    graph = json.loads(out)
    assert not list(Draft202012Validator(load_schema("graph")).iter_errors(graph))
    assert graph["recompute_modules"] == ["layernorm", "mlp"]
    block = graph["layers"][1]
    assert block["activation_bytes"] - block["selective_activation_bytes"] == 21 * SBH + NORM_STATS
    code, out, _ = run(argv, capsys)
    assert "selective MiB" not in out  # flash + core_attn frees nothing: no column
    code, out, _ = run([*argv, "--recompute-modules", "layernorm,mlp"], capsys)
    assert code == 0 and "selective MiB" in out
    code, _, err = run([*argv, "--recompute-modules", "layernorm,bogus"], capsys)
    assert code == 2 and "unknown recompute_module 'bogus'" in err


def test_an_evaluate_that_does_not_fit_names_the_modules(tmp_path: Path):
    import yaml

    from archplace.base.errors import OutOfMemoryError
    from archplace.front import api

    path = tmp_path / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(GPT.config_json)
    data = yaml.safe_load(resources.files("archplace.hw").joinpath("presets/a100-80gb.yaml").read_text())
    data["accelerator"]["hbm"]["value"] = "1 MiB"
    chip = tmp_path / "tiny-hbm.yaml"
    chip.write_text(yaml.safe_dump(data))
    plan = dict(devices=1, global_batch=2, tp=1, pp=1, dp=1, micro_batch=2, seq_len=S, recompute="selective")
    with pytest.raises(OutOfMemoryError, match=r"B HBM .*\(selective recompute of layernorm,mlp\)$"):
        api.evaluate(str(path), str(chip), recompute_modules=["layernorm", "mlp"], **plan)  # type: ignore[arg-type]
    with pytest.raises(OutOfMemoryError) as default:
        api.evaluate(str(path), str(chip), **plan)  # type: ignore[arg-type]
    assert "selective recompute of" not in str(default.value)
