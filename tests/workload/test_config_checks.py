"""Hugging Face configs are checked before transformers or torch see them: a bad field gets one
line naming it, mixture-of-experts models are refused, sizes are capped; good configs pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.workload.config_checks import (
    KNOWN_ACTIVATIONS,
    MAX_LAYERS,
    MAX_PARAMETERS,
    MAX_POSITIONS,
    MOE_MODEL_TYPES,
    NOT_TRACED,
    TRACED_MOE_MODEL_TYPES,
)
from archplace.workload.zoo import LoadedModel, load_model, model_preset_names, validate_config

# One small good config per family the zoo reads, and the generic path (Qwen2).
GOOD: dict[str, dict[str, Any]] = {
    "gpt2": {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256,
             "vocab_size": 2048, "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
             "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5},
    "bert": {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 128,
             "type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
             "attention_probs_dropout_prob": 0.1, "layer_norm_eps": 1e-12},
    "opt": {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
            "ffn_dim": 512, "vocab_size": 1000, "max_position_embeddings": 128, "word_embed_proj_dim": 128,
            "dropout": 0.1, "attention_dropout": 0.0, "activation_function": "relu"},
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 8,
              "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 1000,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "hidden_act": "silu"},
    "mistral": {"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 128,
                "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 352,
                "vocab_size": 1000, "max_position_embeddings": 256, "sliding_window": 128,
                "rms_norm_eps": 1e-5, "hidden_act": "silu"},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
              "max_position_embeddings": 64, "hidden_act": "silu", "rms_norm_eps": 1e-6},
}
# The count fields of each, every one of which must be a whole number >= 1.
COUNTS = {family: [field for field in config if field != "model_type" and isinstance(config[field], int)
                   and not field.endswith(("_eps", "_epsilon"))]
          for family, config in GOOD.items()}
# Fields that may not be left out (or null): all counts but the optional ones.
REQUIRED = {family: [f for f in fields if f not in ("num_key_value_heads", "type_vocab_size",
                                                     "word_embed_proj_dim", "sliding_window")]
            for family, fields in COUNTS.items()}

# A bad value of each class where a count belongs: boolean, text, fractions (4.0 included,
# which torch refuses as a size), zero, negative, non-finite, a list.
BAD_COUNTS = [True, False, "12", 4.5, 4.0, 0, -4, float("nan"), float("inf"), [4], {"value": 4}]


def refused(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config("cfg.json", config)
    message = str(info.value)
    assert "\n" not in message and message.startswith("cfg.json: ")
    return message


@pytest.mark.parametrize("family", list(GOOD))
def test_good_configs_pass(family: str, tmp_path: Path) -> None:
    path = tmp_path / family / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GOOD[family]))
    spec = load_model(str(path))
    assert spec.name == family and spec.model_type == family
    assert spec.seq_len == GOOD[family][spec.family.context_field]


@pytest.mark.parametrize("name", model_preset_names())
def test_every_bundled_preset_passes(name: str) -> None:
    spec = load_model(name)
    assert validate_config(name, spec.config) is spec.family
    assert 1 <= spec.num_layers <= MAX_LAYERS and spec.seq_len >= 1


@given(data=st.data())
def test_any_count_field_with_any_bad_value_is_named(data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(list(GOOD)))
    field = data.draw(st.sampled_from(COUNTS[family]))
    value = data.draw(st.sampled_from(BAD_COUNTS))
    config = dict(GOOD[family], **{field: value})
    message = refused(config)
    assert f"field {field!r} must be" in message
    # and a LoadedModel built directly (the Python API) refuses it the same way
    with pytest.raises(ConfigError, match=f"model 'x': field '{field}' must be"):
        LoadedModel("x", json.dumps(config), 8)


@given(data=st.data())
def test_any_required_field_left_out_is_named(data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(list(GOOD)))
    field = data.draw(st.sampled_from(REQUIRED[family]))
    config = dict(GOOD[family])
    if data.draw(st.booleans()):
        del config[field]
    else:
        config[field] = None
    assert refused(config) == f"cfg.json: missing field {field!r} (a whole number >= 1)"


@pytest.mark.parametrize(("value", "shown"), [(True, "true"), ("12", '"12"'), (4.0, "4.0"), (4.5, "4.5"),
                                              (0, "0"), (-2, "-2"), (None, "null")])
def test_messages_show_the_value_as_written(value: object, shown: str) -> None:
    """4.0 is refused like 4.5: HF writes counts as integers and torch refuses float sizes."""
    message = refused(dict(GOOD["gpt2"], n_head=value))
    expected = ("missing field 'n_head'" if value is None
                else f"field 'n_head' must be a whole number >= 1, got {shown}")
    assert message.startswith(f"cfg.json: {expected}")
    assert refused(dict(GOOD["gpt2"], n_head=float("nan"))) == \
        "cfg.json: field 'n_head' must be a finite number, got NaN"


@given(data=st.data())
def test_non_finite_numbers_anywhere_are_named(data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(list(GOOD)))
    config = dict(GOOD[family])
    value = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    key = data.draw(st.sampled_from([*config.keys() - {"model_type"}, "rope_scaling", "initializer_range"]))
    path = key
    if key == "rope_scaling":
        config[key] = {"type": "linear", "factor": value}
        path = "rope_scaling.factor"
    else:
        config[key] = value
    assert f"field {path!r} must be a finite number" in refused(config)


def test_heads_must_divide_hidden_and_kv_heads_the_heads() -> None:
    assert refused(dict(GOOD["gpt2"], n_head=3)) == \
        "cfg.json: field 'n_head' (3) must divide field 'n_embd' (256), or set 'head_dim'"
    assert refused(dict(GOOD["llama"], num_key_value_heads=3)) == \
        "cfg.json: field 'num_key_value_heads' (3) must divide field 'num_attention_heads' (8)"
    assert "'num_attention_heads' (5) must divide field 'hidden_size' (128)" in \
        refused(dict(GOOD["bert"], num_attention_heads=5))
    # an explicit head size need not be hidden / heads (Gemma, Mistral-Nemo)
    validate_config("cfg.json", dict(GOOD["qwen2"], num_attention_heads=6, num_key_value_heads=2,
                                     head_dim=32))
    assert "'head_dim' must be a whole number >= 1, got 0" in refused(dict(GOOD["qwen2"], head_dim=0))


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_unknown_activation_is_named(family: str) -> None:
    message = refused(dict(GOOD[family], activation_function="gelu_newest"))
    assert "field 'activation_function' must name an activation transformers knows, got \"gelu_newest\"" \
        in message and "gelu_new, " in message
    for value in (7, ["silu"], {"name": "silu"}, True):
        assert "field 'hidden_act' must name an activation transformers knows, got " in \
            refused(dict(GOOD["llama"], hidden_act=value))


def test_every_transformers_activation_is_accepted() -> None:
    from transformers.activations import ACT2FN

    assert set(ACT2FN) >= KNOWN_ACTIVATIONS  # the list that avoids importing torch is not stale
    for name in ACT2FN:
        validate_config("cfg.json", dict(GOOD["llama"], hidden_act=name))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("resid_pdrop", 1.5, "field 'resid_pdrop' must be a probability in [0, 1], got 1.5"),
    ("attn_pdrop", -0.1, "field 'attn_pdrop' must be a probability in [0, 1], got -0.1"),
    ("embd_pdrop", "0.1", "field 'embd_pdrop' must be a probability in [0, 1], got \"0.1\""),
    ("layer_norm_epsilon", -1e-5, "field 'layer_norm_epsilon' must be a number >= 0, got -1e-05"),
    ("layer_norm_epsilon", True, "field 'layer_norm_epsilon' must be a number >= 0, got true"),
])
def test_dropout_and_epsilon_ranges(field: str, value: object, message: str) -> None:
    assert refused(dict(GOOD["gpt2"], **{field: value})) == f"cfg.json: {message}"
    validate_config("cfg.json", dict(GOOD["gpt2"], resid_pdrop=0, attn_pdrop=1.0, layer_norm_epsilon=0))


def test_ffn_size_is_required_except_gpt2_null() -> None:
    """GPT-2's n_inner null means 4x hidden in transformers too; elsewhere the default is not
    4x hidden (Llama: 11008), so a missing FFN size would silently give another model."""
    assert LoadedModel("g", json.dumps(GOOD["gpt2"]), 8).ffn_size == 4 * 256
    assert LoadedModel("g", json.dumps(dict(GOOD["gpt2"], n_inner=512)), 8).ffn_size == 512
    for family, field in (("llama", "intermediate_size"), ("opt", "ffn_dim"), ("bert", "intermediate_size")):
        config = dict(GOOD[family])
        del config[field]
        assert refused(config) == f"cfg.json: missing field {field!r} (a whole number >= 1)"


def test_size_caps_name_the_numbers() -> None:
    assert refused(dict(GOOD["gpt2"], n_layer=10_000)) == (
        "cfg.json: field 'n_layer' is 10000; archplace accepts at most 1,000 layers (the largest real "
        "models have about 200)")
    validate_config("cfg.json", dict(GOOD["gpt2"], n_layer=MAX_LAYERS))
    huge = refused(dict(GOOD["llama"], hidden_size=10**9, num_attention_heads=8, intermediate_size=10**9))
    assert huge == ("cfg.json: the model would have about 1.40e+19 parameters (2 layers of hidden size "
                    f"1000000000); archplace accepts at most {MAX_PARAMETERS:.0e}")
    assert "about 6.40e+801 parameters" in refused(dict(GOOD["gpt2"], n_embd=10**400, n_head=1))
    assert refused(dict(GOOD["gpt2"], n_positions=MAX_POSITIONS + 1)) == (
        f"cfg.json: field 'n_positions' is {MAX_POSITIONS + 1}; archplace accepts at most 16,777,216 "
        "positions")
    # GPT-3 175B and Llama-2 70B are far inside
    assert load_model("gpt3-175b").num_layers == 96 and load_model("llama2-70b").num_layers == 80


@pytest.mark.parametrize(("extra", "shown"), [
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts=8"),
    ({"num_experts": 60}, "num_experts=60"),
    ({"n_routed_experts": 64}, "n_routed_experts=64"),
    ({"moe_num_experts": 16}, "moe_num_experts=16"),
    ({"num_experts_per_tok": 2}, "num_experts_per_tok=2"),
    ({"moe_intermediate_size": 1408}, "moe_intermediate_size=1408"),
])
def test_mixture_of_experts_fields_are_refused(extra: dict[str, int], shown: str) -> None:
    assert refused(dict(GOOD["llama"], **extra)) == (
        f"cfg.json: the mixture-of-experts layers of model_type 'llama' are not traced yet (config has "
        f"{shown}); archplace traces those of deepseek_v3, mixtral, qwen2_moe, qwen3_moe")


@pytest.mark.parametrize("model_type",
                         sorted((MOE_MODEL_TYPES | {"qwen2_moe", "qwen3_moe", "olmoe", "phimoe"})
                                - TRACED_MOE_MODEL_TYPES - set(NOT_TRACED)))
def test_mixture_of_experts_model_types_are_refused(model_type: str) -> None:
    config = dict(GOOD["llama"], model_type=model_type)
    assert refused(config) == (f"cfg.json: the mixture-of-experts layers of model_type {model_type!r} are "
                               "not traced yet; archplace traces those of deepseek_v3, mixtral, qwen2_moe, "
                               "qwen3_moe")


def test_dense_configs_with_one_or_no_expert_pass() -> None:
    validate_config("cfg.json", dict(GOOD["qwen2"], num_experts=1, num_experts_per_tok=1))
    validate_config("cfg.json", dict(GOOD["qwen2"], num_experts=0, moe_intermediate_size=None))
    assert "field 'num_experts' must be a whole number >= 0, got true" in \
        refused(dict(GOOD["qwen2"], num_experts=True))


MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "num_local_experts": 8, "vocab_size": 32000, "hidden_act": "silu", "rms_norm_eps": 1e-05}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.mark.parametrize(("config", "message"), [
    (dict(MIXTRAL, model_type="phimoe"),
     "the mixture-of-experts layers of model_type 'phimoe' are not traced yet (config has "
     "num_local_experts=8)"),
    (dict(GOOD["gpt2"], n_layer=True), "field 'n_layer' must be a whole number >= 1, got true"),
    (dict(GOOD["llama"], num_key_value_heads=3), "field 'num_key_value_heads' (3) must divide"),
    (dict(GOOD["opt"], activation_function="swishy"), "field 'activation_function' must name"),
    (dict(GOOD["bert"], num_hidden_layers=10_000), "archplace accepts at most 1,000 layers"),
])
def test_cli_one_line_for_bad_configs(config: dict[str, Any], message: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for argv in (["graph", "--model", str(path)],
                 ["plan", "--model", str(path), "--hardware", "tpuv4", "--devices", "8",
                  "--global-batch", "8"]):
        code, err = run(argv, capsys)
        assert code == 2 and err.startswith(f"archplace: error: {path}: ") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_sequence_length_within_the_context() -> None:
    spec = LoadedModel("g", json.dumps(GOOD["gpt2"]), 256)
    assert spec.with_seq_len(128).seq_len == 128
    with pytest.raises(ConfigError, match="sequence length 512 exceeds its context length 256 .n_positions."):
        LoadedModel("g", json.dumps(GOOD["gpt2"]), 512)
    with pytest.raises(ConfigError, match="sequence length must be a whole number >= 1, got True"):
        LoadedModel("g", json.dumps(GOOD["gpt2"]), True)


@pytest.mark.parametrize(("family", "change", "message"), [
    ("gpt2", {"tie_word_embeddings": "x"}, "transformers refuses the config: Validation error for field "
                                           "'tie_word_embeddings': TypeError: Field 'tie_word_embeddings' "
                                           "expected bool, got str"),
    ("llama", {"head_dim": 7}, "transformers refuses the config: Class validation error for validator "
                               "'validate_rope': ValueError: RoPE requires an even rotary dimension"),
    ("llama", {"rope_scaling": {"type": "bogus", "factor": 2.0}},
     "field 'rope_scaling' has an unknown RoPE type \"bogus\"; choose from: default, dynamic, linear"),
    ("llama", {"rope_theta": "x"}, "field 'rope_theta' must be a number > 0, got \"x\""),
    ("llama", {"rope_theta": 0}, "field 'rope_theta' must be a number > 0, got 0"),
    ("llama", {"torch_dtype": "float99"}, "field 'torch_dtype' must name a torch dtype (e.g. \"bfloat16\"), "
                                          "got \"float99\""),
    ("llama", {"pad_token_id": 1000}, "field 'pad_token_id' must be a token id in [-1000, 1000) (the "
                                      "vocabulary), got 1000"),
])
def test_what_only_transformers_or_the_model_would_trip_on(family: str, change: dict[str, Any], message: str,
                                                           tmp_path: Path) -> None:
    """Each of these passed the field checks before and failed inside transformers or torch with a
    traceback (strict-dataclass errors, KeyError for the RoPE type, AssertionError for the padding row)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(GOOD[family], **change)))
    with pytest.raises(ConfigError) as info:
        load_model(str(path))
    assert str(info.value).startswith(f"{path}: {message}"), info.value
    assert "\n" not in str(info.value)


def test_transformers_warnings_stay_off_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A BOS/EOS id outside the vocabulary makes transformers log a warning; the model never uses
    them, so the config is accepted and stderr stays empty (or the one error line alone)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(GOOD["llama"], bos_token_id=5000, eos_token_id=[5001, 2],
                                    pad_token_id=-1)))
    assert load_model(str(path)).vocab_size == 1000
    assert capfd.readouterr().err == ""


def test_rotary_models_train_beyond_their_context_learned_tables_do_not() -> None:
    """RoPE has no position table: llama2-7b (4,096 positions) at 8,192 tokens gets a config with
    8,192 positions; GPT-2's learned table of 1,600 x 1,024 cannot grow."""
    from archplace.workload.zoo import load_model

    llama = load_model("llama2-7b")
    assert llama.config["max_position_embeddings"] == 4096
    longer = llama.with_seq_len(8192)
    assert longer.seq_len == 8192 and longer.config["max_position_embeddings"] == 8192
    assert {k: v for k, v in longer.config.items() if k != "max_position_embeddings"} == {
        k: v for k, v in llama.config.items() if k != "max_position_embeddings"}
    assert llama.with_seq_len(2048).config_json == llama.config_json
    with pytest.raises(ConfigError, match="exceeds its context length 1024 .its learned position table"):
        load_model("gpt2-xl").with_seq_len(2048)


@pytest.mark.parametrize(("extra", "message"), [
    ({"model_type": "qwen3_moe", "num_experts": 8, "mlp_only_layers": [0]},
     "dense blocks among the mixture-of-experts blocks (mlp_only_layers=[0], decoder_sparse_step=null)"),
    ({"model_type": "qwen3_moe", "num_experts": 8, "decoder_sparse_step": 2}, "decoder_sparse_step=2"),
    ({"model_type": "deepseek_v3", "first_k_dense_replace": 1.5},
     "field 'first_k_dense_replace' must be a whole number >= 0, got 1.5"),
])
def test_moe_block_layouts_not_traced_are_refused(extra: dict[str, Any], message: str) -> None:
    assert message in refused(dict(GOOD["llama"], **extra))


def test_traced_moe_architectures_pass() -> None:
    for model_type in sorted(TRACED_MOE_MODEL_TYPES):
        validate_config("cfg.json", dict(GOOD["llama"], model_type=model_type, num_experts_per_tok=2,
                                         num_local_experts=4, num_experts=4, n_routed_experts=4,
                                         n_group=2, topk_group=1))


def test_moe_size_cap_counts_the_experts() -> None:
    config = dict(GOOD["llama"], model_type="mixtral", num_local_experts=1_000_000, num_experts_per_tok=2,
                  num_hidden_layers=100, hidden_size=4096, intermediate_size=14336)
    assert "parameters" in refused(config)
