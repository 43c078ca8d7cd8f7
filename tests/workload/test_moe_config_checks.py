"""The mixture-of-experts and latent-attention fields of the traced MoE architectures are checked
before transformers or torch sees them (issue #23): one line naming the field, the value and the
rule; a field left out takes transformers' default; torch's own log stays off stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archplace.base.errors import ConfigError
from archplace.workload import config_checks
from archplace.workload.config_checks import MOE_ALIASES, MOE_DEFAULTS, moe_value
from archplace.workload.expert_parallel import shared_expert_width, shared_experts
from archplace.workload.expert_tensor import expert_width
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import LoadedModel, load_model, validate_config
from cli_helpers import run
from small_moe import DEEPSEEK, MIXTRAL, QWEN2, QWEN3

BASE = {"mixtral": MIXTRAL, "qwen2_moe": QWEN2, "qwen3_moe": QWEN3, "deepseek_v3": DEEPSEEK}


def config(model_type: str, **changes: Any) -> dict[str, Any]:
    """The small config of ``model_type`` with ``changes`` (None: the field left out)."""
    out = dict(BASE[model_type])
    for field, value in changes.items():
        if value is None:
            out.pop(field, None)
        else:
            out[field] = value
    return out


def refusal(cfg: dict[str, Any], tmp_path: Path) -> str:
    """The one-line message ``load_model`` of ``cfg`` as a user's config.json gives."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as info:
        load_model(str(path))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return message


@pytest.mark.parametrize("model_type", sorted(BASE))
def test_the_small_configs_pass(model_type: str, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BASE[model_type]))
    assert load_model(str(path)).experts in (4, 8)


@pytest.mark.parametrize(("model_type", "changes", "message"), [
    # the four tracebacks of the issue
    ("deepseek_v3", {"n_shared_experts": -1}, "field 'n_shared_experts' must be a whole number >= 0, got -1"),
    ("qwen2_moe", {"shared_expert_intermediate_size": -1},
     "field 'shared_expert_intermediate_size' must be a whole number >= 0, got -1"),
    ("deepseek_v3", {"v_head_dim": -1}, "field 'v_head_dim' must be a whole number >= 1, got -1"),
    # top-k above the experts, and topk_group above n_group, reached torch
    ("mixtral", {"num_experts_per_tok": 5},
     "field 'num_experts_per_tok' (5) must be at most the routed experts ('num_local_experts' = 4)"),
    ("qwen2_moe", {"num_experts_per_tok": 5},
     "field 'num_experts_per_tok' (5) must be at most the routed experts ('num_experts' = 4)"),
    ("qwen3_moe", {"num_experts_per_tok": 5},
     "field 'num_experts_per_tok' (5) must be at most the routed experts ('num_experts' = 4)"),
    ("deepseek_v3", {"num_experts_per_tok": 9},
     "field 'num_experts_per_tok' (9) must be at most the routed experts ('n_routed_experts' = 8)"),
    ("deepseek_v3", {"topk_group": 3}, "field 'topk_group' (3) must be at most 'n_group' (2)"),
    # zero top-k and zero-width latent dimensions were accepted
    ("mixtral", {"num_experts_per_tok": 0}, "field 'num_experts_per_tok' must be a whole number >= 1, got 0"),
    ("qwen3_moe", {"num_experts_per_tok": 0},
     "field 'num_experts_per_tok' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"num_experts_per_tok": 0},
     "field 'num_experts_per_tok' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"kv_lora_rank": 0}, "field 'kv_lora_rank' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"v_head_dim": 0}, "field 'v_head_dim' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"q_lora_rank": 0}, "field 'q_lora_rank' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"qk_rope_head_dim": 0}, "field 'qk_rope_head_dim' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"qk_nope_head_dim": 0}, "field 'qk_nope_head_dim' must be a whole number >= 1, got 0"),
    # widths, counts and the group rules
    ("qwen2_moe", {"moe_intermediate_size": 0}, "field 'moe_intermediate_size' must be a whole number >= 1"),
    ("qwen3_moe", {"moe_intermediate_size": -64},
     "field 'moe_intermediate_size' must be a whole number >= 1, got -64"),
    ("deepseek_v3", {"moe_intermediate_size": 0},
     "field 'moe_intermediate_size' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"n_routed_experts": 0}, "field 'n_routed_experts' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"n_group": 0}, "field 'n_group' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"topk_group": 0}, "field 'topk_group' must be a whole number >= 1, got 0"),
    ("deepseek_v3", {"n_group": 3, "topk_group": 1}, "field 'n_group' (3) must divide the routed experts"),
    ("deepseek_v3", {"n_group": 8, "topk_group": 1}, "field 'n_group' (8) leaves 1 expert per group"),
    ("deepseek_v3", {"num_experts_per_tok": 5},
     "field 'num_experts_per_tok' (5) must be at most the experts of the 1 chosen groups"),
    ("deepseek_v3", {"qk_rope_head_dim": 15}, "field 'qk_rope_head_dim' must be even"),
    ("deepseek_v3", {"n_group": None, "topk_group": None},  # DeepseekV3Config's 8 groups of 1
     "field 'n_group' (8) leaves 1 expert per group"),
    ("deepseek_v3", {"first_k_dense_replace": -1},
     "field 'first_k_dense_replace' must be a whole number >= 0, got -1"),
    ("deepseek_v3", {"n_group": 2.0}, "field 'n_group' must be a whole number >= 1, got 2.0"),
    ("mixtral", {"num_experts": 8},
     "fields 'num_local_experts' (4) and 'num_experts' (8) name the same setting"),
])
def test_each_moe_refusal_is_one_line_naming_the_field(model_type: str, changes: dict[str, Any], message: str,
                                                        tmp_path: Path) -> None:
    assert message in refusal(config(model_type, **changes), tmp_path)


@pytest.mark.parametrize("field", ["n_group", "topk_group", "v_head_dim", "num_experts_per_tok",
                                   "first_k_dense_replace"])
def test_a_null_deepseek_field_is_refused(field: str) -> None:
    """DeepseekV3Config types these ``int | None`` and keeps a null, on which the model fails."""
    cfg = dict(DEEPSEEK, **{field: None})
    with pytest.raises(ConfigError, match=f"field '{field}' must be a whole number >= [01], got null$"):
        validate_config("cfg.json", cfg)


def test_refusals_reach_the_cli_as_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config("deepseek_v3", topk_group=3)))
    code, _, err = run(["graph", "--model", str(path), "--seq-len", "64"], capfd)
    assert code == 2
    assert err.strip().splitlines() == [
        f"archplace: error: {path}: field 'topk_group' (3) must be at most 'n_group' (2): the router picks "
        "that many of the groups"]


def test_defaults_are_transformers_own() -> None:
    """:data:`MOE_DEFAULTS` and :data:`MOE_ALIASES` are those of the installed transformers."""
    from transformers import AutoConfig

    for model_type, defaults in MOE_DEFAULTS.items():
        hf = AutoConfig.for_model(model_type)
        assert {field: getattr(hf, field) for field in defaults} == dict(defaults), model_type
        assert {alias: field for field, alias in MOE_ALIASES.get(model_type, {}).items()}.items() <= {
            **hf.attribute_map, **{v: k for k, v in hf.attribute_map.items()}}.items(), model_type


def test_deepseek_v3_without_moe_intermediate_size_gets_transformers_default(tmp_path: Path) -> None:
    """transformers builds DeepseekV3Config's experts 2,048 wide when the config leaves
    ``moe_intermediate_size`` out (this crashed with a KeyError); archplace counts them so."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config("deepseek_v3", moe_intermediate_size=None)))
    spec = load_model(str(path))
    assert moe_value(spec.config, "moe_intermediate_size") == 2048
    assert expert_width(spec) == 2048 and shared_expert_width(spec) == 2048
    h = 128
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    moe = chain.layers[2]
    assert moe.expert_params == 8 * 3 * h * 2048  # the traced model's experts have the default width


def test_missing_fields_take_transformers_defaults() -> None:
    """A Mixtral config without its expert count and top-k gets MixtralConfig's 8 and 2, a
    DeepSeek-V3 one without ``first_k_dense_replace`` 3 dense blocks, a Qwen2-MoE one without
    ``shared_expert_intermediate_size`` a shared expert 5,632 wide; an alias names the count."""
    mixtral = LoadedModel("m", json.dumps(config("mixtral", num_local_experts=None,
                                               num_experts_per_tok=None)), 64)
    assert (mixtral.experts, mixtral.experts_per_token) == (8, 2)
    alias = LoadedModel("m", json.dumps(config("mixtral", num_local_experts=None, num_experts=4)), 64)
    assert alias.experts == 4
    deepseek = LoadedModel("d", json.dumps(config("deepseek_v3", first_k_dense_replace=None,
                                                num_hidden_layers=5)), 64)
    assert deepseek.block_runs == (3, 2)
    qwen2 = LoadedModel("q", json.dumps(config("qwen2_moe", shared_expert_intermediate_size=None)), 64)
    assert (shared_experts(qwen2), shared_expert_width(qwen2)) == (1, 5632)


@pytest.mark.parametrize(("model_type", "field"), [("deepseek_v3", "n_shared_experts"),
                                                   ("qwen2_moe", "shared_expert_intermediate_size")])
def test_zero_shared_experts_are_accepted(model_type: str, field: str) -> None:
    """0 shared experts is meaningful: transformers builds a zero-width shared MLP, no work."""
    spec = LoadedModel("s", json.dumps(config(model_type, **{field: 0})), 64)
    assert (shared_experts(spec), shared_expert_width(spec)) == (0, 0)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64))
    assert chain.layers[-2].experts == spec.experts


def test_a_config_refused_by_torch_while_tracing_prints_one_line(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the check switched off, top-k above the experts reaches torch's ``topk`` on fake
    tensors, whose logger printed 15 lines of traceback before archplace's one line; torch's
    loggers are silenced while tracing, and restored after."""
    import logging

    monkeypatch.setattr(config_checks, "check_moe_fields", lambda where, config: None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config("mixtral", num_experts_per_tok=5)))
    fake_tensor = logging.getLogger("torch._subclasses.fake_tensor")
    before = (logging.getLogger("torch").level, fake_tensor.level)
    code, _, err = run(["graph", "--model", str(path), "--seq-len", "64"], capfd)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("archplace: error: cannot trace "), err
    assert lines[0].endswith("RuntimeError: k not in range for dimension"), err
    assert (logging.getLogger("torch").level, fake_tensor.level) == before
