"""Checks of a Hugging Face model config before anything is built from it.

transformers accepts many configs it then fails on deep inside a model's ``__init__`` (a
hidden size the heads do not divide, a float where a count belongs, an unknown activation
name), or silently builds something else (``"n_layer": true`` is the integer 1; Llama's
head size is ``hidden // heads`` even when that leaves a remainder). These checks refuse
them first, with one line naming the field:

* counts (layers, hidden size, heads, key/value heads, FFN size, vocabulary, positions, and
  ``head_dim``, ``word_embed_proj_dim``, ``type_vocab_size``, ``sliding_window`` when set)
  are whole numbers >= 1: not booleans, not text, and not floats -- not even ``4.0``, which
  torch refuses as a tensor size (``nn.Linear(4.0, 8)`` raises TypeError);
* the heads divide the hidden size (unless the config sets ``head_dim``), the key/value heads
  divide the heads;
* the activation (``activation_function`` / ``hidden_act``) is a key of transformers'
  ``ACT2FN``;
* dropout probabilities are numbers in [0, 1] (torch's ``nn.Dropout`` rule), normalisation
  epsilons are numbers >= 0;
* every number anywhere is finite; ``pad_token_id`` (the embedding's padding row) is a token
  of the vocabulary (``-vocab <= id < vocab``, as ``nn.Embedding`` requires);
* the size stays within what archplace can trace and place: at most :data:`MAX_LAYERS`
  blocks, :data:`MAX_POSITIONS` positions and about :data:`MAX_PARAMETERS` parameters;
* mixture-of-experts configs are refused (:func:`refuse_mixture_of_experts`) except those of the
  architectures whose experts archplace traces as grouped GEMMs (:data:`TRACED_MOE_MODEL_TYPES`,
  :mod:`archplace.workload.experts_op`); elsewhere their experts' FLOP and memory would be lost;
  the architectures of :data:`NOT_TRACED` are refused with what is not traced (gpt-oss);
* in those, every mixture-of-experts and multi-head latent attention field the model code reads
  (:data:`MOE_DEFAULTS`; a missing one is transformers' default, :func:`moe_value`) is a whole
  number in its range (:func:`check_moe_fields`): widths, ranks and head sizes >= 1, the shared
  experts >= 0, 1 <= top-k <= the routed experts, DeepSeek's expert groups dividing the experts
  and ``topk_group <= n_group`` -- so that no config reaches torch to fail there (a negative
  width) or to trace something meaningless (a top-0 router, a zero-width latent);
* for a user's config.json, :func:`check_with_transformers` also builds transformers' own
  config object (no model, no weights), which checks the types of every field it declares
  (``"tie_word_embeddings": "x"``) and its cross-field rules (an odd RoPE head size), and
  checks the RoPE type and base and the dtype name that only the model's construction would
  trip on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from archplace.base.errors import ConfigError
from archplace.base.inputs import show_value as show

if TYPE_CHECKING:
    from archplace.workload.zoo import Family

MAX_LAYERS = 1_000
"""Most transformer blocks accepted (the largest real models have about 200; GPT-3 has 96)."""

MAX_POSITIONS = 2**24
"""Most positions (context length, tokens) accepted: 16,777,216 (real models: up to ~10 M)."""

MAX_PARAMETERS = 1e14
"""Largest model accepted, parameters (estimated from the config; GPT-3 has 1.75e11)."""

ACTIVATION_FIELDS = ("activation_function", "hidden_act")
"""Fields naming the activation function, looked up in ``transformers.activations.ACT2FN``."""

KNOWN_ACTIVATIONS = frozenset({
    "gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
    "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu", "quick_gelu",
    "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "xielu"})
"""The keys of ``ACT2FN`` in transformers 5.23 (tested to be keys of the installed one), so that a
known name is accepted without importing transformers' activations, which imports torch
(seconds); any other name is looked up in ``ACT2FN`` itself."""

EXPERT_COUNT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Fields holding the number of experts of a mixture-of-experts layer."""

MOE_MODEL_TYPES = frozenset({"mixtral", "dbrx", "deepseek_v2", "deepseek_v3", "deepseek_v32",
                             "deepseek_v4", "gpt_oss", "jamba", "llama4", "llama4_text",
                             "switch_transformers", "nllb-moe"})
"""HF ``model_type`` values of mixture-of-experts architectures (besides every ``*moe*`` one)."""

TRACED_MOE_MODEL_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"})
"""Mixture-of-experts architectures whose experts module goes through transformers' experts
interface, so that :mod:`archplace.workload.experts_op` traces it as grouped GEMMs."""

NOT_TRACED: Mapping[str, str] = MappingProxyType({
    "gpt_oss": "its blocks alternate sliding-window and full attention (layer_types) and its "
               "attention adds learned sinks, while archplace traces one block for every block of a "
               "kind and costs attention as full causal attention",
})
"""Architectures transformers knows that archplace refuses, each with the reason (what is not
traced); their configs are refused with it before any other check."""

MOE_DEFAULTS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    "mixtral": MappingProxyType({"num_local_experts": 8, "num_experts_per_tok": 2}),
    "qwen2_moe": MappingProxyType({"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                                   "shared_expert_intermediate_size": 5632}),
    "qwen3_moe": MappingProxyType({"num_experts": 128, "num_experts_per_tok": 8,
                                   "moe_intermediate_size": 768}),
    "deepseek_v3": MappingProxyType({
        "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
        "n_shared_experts": 1, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3,
        "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}),
})
"""The mixture-of-experts and latent-attention fields each traced architecture's model code reads,
with the defaults of its transformers 5.23 config class (``MixtralConfig``, ``Qwen2MoeConfig``,
``Qwen3MoeConfig``, ``DeepseekV3Config``; tested to be the installed ones), which a config that
leaves a field out gets. Kept here so that the bundled presets are checked without importing
transformers."""

MOE_ALIASES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "mixtral": MappingProxyType({"num_local_experts": "num_experts"}),
    "qwen3_moe": MappingProxyType({"num_experts": "num_local_experts"}),
    "deepseek_v3": MappingProxyType({"n_routed_experts": "num_local_experts"}),
})
"""Other names transformers' config class accepts for a field of :data:`MOE_DEFAULTS` (its
``attribute_map``): ``{model_type: {field: alias}}``."""

_NON_NEGATIVE = frozenset({"n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace"})
"""Fields of :data:`MOE_DEFAULTS` for which 0 is meaningful: no shared experts (transformers then
builds a zero-width shared MLP, which does no work), no dense blocks."""

_NULLABLE = frozenset({"q_lora_rank"})
"""Fields of :data:`MOE_DEFAULTS` that may be null: DeepSeek's queries then skip the low-rank
projection (``q_proj`` instead of ``q_a_proj`` and ``q_b_proj``)."""

_OPTIONAL_COUNTS = ("head_dim", "word_embed_proj_dim", "type_vocab_size", "sliding_window")
_DROPOUT = re.compile(r"(dropout|pdrop|dropout_prob|dropout_rate)$")
_EPSILON = re.compile(r"(^|_)(eps|epsilon)$")


def count_field(where: str, config: Mapping[str, Any], field: str, *, required: bool = True) -> int | None:
    """The whole number >= 1 in ``config[field]``; None when absent or null and not ``required``.

    Raises:
        ConfigError: absent or null when required; a boolean, text, a float (even 4.0) or a
            number below 1.
    """
    value = config.get(field)
    if value is None:
        if required:
            raise ConfigError(f"{where}: missing field {field!r} (a whole number >= 1)")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: field {field!r} must be a whole number >= 1, got {show(value)}")
    return value


def refuse_mixture_of_experts(where: str, config: Mapping[str, Any]) -> None:
    """Refuse a mixture-of-experts config: experts > 1 in one of :data:`EXPERT_COUNT_FIELDS`,
    ``num_experts_per_tok`` > 1, a ``moe_intermediate_size``, or a MoE ``model_type`` -- unless its
    ``model_type`` is one of :data:`TRACED_MOE_MODEL_TYPES`.

    Raises:
        ConfigError: an architecture of :data:`NOT_TRACED` (with its reason); "the
            mixture-of-experts layers of model_type ... are not traced yet (config has ...)", or an
            expert field that is not a whole number.
    """
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in NOT_TRACED:
        raise ConfigError(f"{where}: model_type {model_type!r} is not supported yet: "
                          f"{NOT_TRACED[model_type]}")
    traced = isinstance(model_type, str) and model_type in TRACED_MOE_MODEL_TYPES
    if traced:
        check_moe_fields(where, config)
    for field in (*EXPERT_COUNT_FIELDS, "num_experts_per_tok", "moe_intermediate_size"):
        value = config.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: field {field!r} must be a whole number >= 0, got {show(value)}")
        if value > (0 if field == "moe_intermediate_size" else 1) and not traced:
            raise ConfigError(f"{where}: the mixture-of-experts layers of model_type {model_type!r} are not "
                              f"traced yet (config has {field}={value}); {_TRACED}")
    if traced:
        _check_moe_layout(where, config)
    if not traced and isinstance(model_type, str) and ("moe" in model_type or model_type in MOE_MODEL_TYPES):
        raise ConfigError(f"{where}: the mixture-of-experts layers of model_type {model_type!r} are not "
                          f"traced yet; {_TRACED}")


_TRACED = f"archplace traces those of {', '.join(sorted(TRACED_MOE_MODEL_TYPES))}"


def _check_moe_layout(where: str, config: Mapping[str, Any]) -> None:
    """The block layouts archplace traces: every block alike, or (``first_k_dense_replace``) the
    first blocks dense and the others mixture-of-experts; Qwen-MoE's dense blocks scattered among
    the others (``mlp_only_layers``, ``decoder_sparse_step`` > 1) are refused."""
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        raise ConfigError(f"{where}: dense blocks among the mixture-of-experts blocks (mlp_only_layers="
                          f"{show(config.get('mlp_only_layers'))}, decoder_sparse_step="
                          f"{show(config.get('decoder_sparse_step'))}) are not traced yet")


def moe_setting(config: Mapping[str, Any], field: str) -> tuple[str, Any]:
    """``(name, value)`` of a field of :data:`MOE_DEFAULTS` as transformers builds the model of
    ``config``: the config's value under ``field`` or its alias (:data:`MOE_ALIASES`), with the
    name it is written under (null included), else the config class's default under ``field``.

    Raises:
        KeyError: ``field`` is not one of the config's ``model_type`` in :data:`MOE_DEFAULTS`.
    """
    model_type = config.get("model_type")
    defaults = MOE_DEFAULTS[model_type] if isinstance(model_type, str) and model_type in MOE_DEFAULTS else {}
    if field not in defaults:
        raise KeyError(f"{field!r} is not a mixture-of-experts field of model_type {model_type!r}")
    if field in config:
        return field, config[field]
    alias = MOE_ALIASES.get(str(model_type), {}).get(field)
    if alias is not None and alias in config:
        return alias, config[alias]
    return field, defaults[field]


def moe_value(config: Mapping[str, Any], field: str) -> Any:
    """The value of ``field`` in ``config`` as transformers builds the model (:func:`moe_setting`)."""
    return moe_setting(config, field)[1]


def check_moe_fields(where: str, config: Mapping[str, Any]) -> None:
    """Refuse a traced mixture-of-experts config (:data:`MOE_DEFAULTS` has its ``model_type``)
    whose experts or latent attention transformers would fail to build or route, or would build
    without meaning. Each field of :data:`MOE_DEFAULTS` is read as the model reads it
    (:func:`moe_setting`: missing means the config class's default) and must be:

    * a whole number (not a boolean, text or float) and not null, except ``q_lora_rank``;
    * >= 1: the routed experts, the experts per token, the expert widths, DeepSeek's
      ``n_group`` and ``topk_group``, and multi-head latent attention's LoRA ranks and head
      sizes (a zero-width latent or head traces as an empty matmul);
    * >= 0: ``n_shared_experts``, ``shared_expert_intermediate_size`` (0: no shared expert) and
      ``first_k_dense_replace``;
    * ``num_experts_per_tok`` <= the routed experts (torch's ``topk`` refuses more);
    * DeepSeek's group-limited routing (DeepSeek-V3 technical report, sec. 2.1.2;
      ``DeepseekV3TopkRouter`` in transformers): ``n_group`` divides the routed experts (the
      scores are viewed as ``[n_group, experts / n_group]``), each group has >= 2 experts (a
      group's score is the sum of its top 2), ``topk_group <= n_group``, and
      ``num_experts_per_tok`` <= the experts of the chosen groups, ``topk_group x experts /
      n_group`` (the others are masked to minus infinity);
    * ``qk_rope_head_dim`` even (RoPE rotates pairs of dimensions).

    A field written under both its name and its alias (:data:`MOE_ALIASES`) with two values is
    refused too.

    Raises:
        ConfigError: one line naming the field, its value and the rule.
    """
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MOE_DEFAULTS:
        return
    for field, alias in MOE_ALIASES.get(model_type, {}).items():
        if field in config and alias in config and config[field] != config[alias]:
            raise ConfigError(f"{where}: fields {field!r} ({show(config[field])}) and {alias!r} "
                              f"({show(config[alias])}) name the same setting with two values")
    values: dict[str, int] = {}
    for field in MOE_DEFAULTS[model_type]:
        name, value = moe_setting(config, field)
        if value is None and field in _NULLABLE:
            continue
        least = 0 if field in _NON_NEGATIVE else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{where}: field {name!r} must be a whole number >= {least}, got {show(value)}")
        values[field] = value
    experts_field = next(iter(MOE_DEFAULTS[model_type]))  # the routed experts come first
    experts_name = moe_setting(config, experts_field)[0]
    experts, top_k = values[experts_field], values["num_experts_per_tok"]
    top_k_name = moe_setting(config, "num_experts_per_tok")[0]
    if top_k > experts:
        raise ConfigError(f"{where}: field {top_k_name!r} ({top_k}) must be at most the routed experts "
                          f"({experts_name!r} = {experts}): each token goes to that many distinct experts")
    if model_type != "deepseek_v3":
        return
    groups, chosen = values["n_group"], values["topk_group"]
    if experts % groups:
        raise ConfigError(f"{where}: field 'n_group' ({groups}) must divide the routed experts "
                          f"({experts_name!r} = {experts}): the router splits them into n_group groups")
    if experts // groups < 2:
        raise ConfigError(f"{where}: field 'n_group' ({groups}) leaves {experts // groups} expert per group "
                          f"of the {experts} routed experts; the router scores each group by its top 2, "
                          "so each group needs >= 2")
    if chosen > groups:
        raise ConfigError(f"{where}: field 'topk_group' ({chosen}) must be at most 'n_group' ({groups}): "
                          "the router picks that many of the groups")
    if top_k > chosen * (experts // groups):
        raise ConfigError(f"{where}: field {top_k_name!r} ({top_k}) must be at most the experts of the "
                          f"{chosen} chosen groups (topk_group x {experts_name} / n_group = "
                          f"{chosen * (experts // groups)}): the other experts are masked out")
    if values["qk_rope_head_dim"] % 2:
        raise ConfigError(f"{where}: field 'qk_rope_head_dim' must be even (RoPE rotates pairs of "
                          f"dimensions), got {values['qk_rope_head_dim']}")


def check_model_config(where: str, config: Mapping[str, Any], family: Family) -> None:
    """Refuse a config transformers would reject or build wrongly (see the module docstring).

    Args:
        where: how to name the config in messages (its file, or ``model 'name'``).
        config: the HF config fields.
        family: the field map of the config's ``model_type``.

    Raises:
        ConfigError: one line naming the first bad field and its value.
    """
    _finite_everywhere(where, config, "")
    layers = count_field(where, config, family.layers_field)
    assert layers is not None
    if layers > MAX_LAYERS:
        raise ConfigError(f"{where}: field {family.layers_field!r} is {show(layers)}; archplace accepts "
                          f"at most {MAX_LAYERS:,} layers (the largest real models have about 200)")
    hidden = count_field(where, config, family.hidden_field)
    heads = count_field(where, config, family.heads_field)
    vocab = count_field(where, config, "vocab_size")
    positions = count_field(where, config, family.context_field, required=family.default_context is None)
    positions = family.default_context if positions is None else positions
    ffn = (count_field(where, config, family.ffn_field, required=not family.ffn_optional)
           if family.ffn_field is not None else None)
    assert hidden is not None and heads is not None and vocab is not None and positions is not None
    if positions > MAX_POSITIONS:
        raise ConfigError(f"{where}: field {family.context_field!r} is {show(positions)}; archplace "
                          f"accepts at most {MAX_POSITIONS:,} positions")
    optional = {field: count_field(where, config, field, required=False) for field in _OPTIONAL_COUNTS}
    if optional["head_dim"] is None and hidden % heads:
        raise ConfigError(f"{where}: field {family.heads_field!r} ({heads}) must divide field "
                          f"{family.hidden_field!r} ({hidden}), or set 'head_dim'")
    if family.kv_heads_field is not None:
        kv_heads = count_field(where, config, family.kv_heads_field, required=False)
        if kv_heads is not None and heads % kv_heads:
            raise ConfigError(f"{where}: field {family.kv_heads_field!r} ({kv_heads}) must divide field "
                              f"{family.heads_field!r} ({heads})")
    # exact integers: a count may have hundreds of digits, beyond float range
    params = layers * (4 * hidden * hidden + 3 * hidden * (ffn or 4 * hidden)) + (vocab + positions) * hidden
    if family.experts_field is not None:  # every block's routed experts, at their own width
        experts = moe_value(config, family.experts_field)
        model_type = config.get("model_type")
        width = (moe_value(config, "moe_intermediate_size")
                 if "moe_intermediate_size" in MOE_DEFAULTS.get(str(model_type), {}) else ffn or 4 * hidden)
        params += layers * 3 * hidden * width * experts
    if params > MAX_PARAMETERS:
        raise ConfigError(f"{where}: the model would have about {Decimal(params):.3g} parameters "
                          f"({layers:,} layers of hidden size {show(hidden)}); archplace accepts at most "
                          f"{MAX_PARAMETERS:.0e}")
    pad = config.get("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not -vocab <= pad < vocab):
        raise ConfigError(f"{where}: field 'pad_token_id' must be a token id in [-{vocab}, {vocab}) (the "
                          f"vocabulary), got {show(pad)}")
    _check_activation(where, config)
    _check_probabilities(where, config)


def check_with_transformers(where: str, config: Mapping[str, Any]) -> None:
    """Build transformers' config object from ``config`` (imports torch; no model is built) and
    refuse what it refuses, then what only building the model would trip on: an unknown RoPE
    type, a RoPE base that is not a positive number, a dtype name torch does not have.
    transformers' warnings (e.g. a BOS id outside the vocabulary, which the model never uses)
    are silenced here, so that stderr keeps to one line.

    Raises:
        ConfigError: transformers' message on one line, or the field at fault.
    """
    import warnings

    import torch
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.utils import logging as hf_logging

    for field in ("torch_dtype", "dtype"):
        value = config.get(field)
        if value is not None and value != "auto" and not (
                isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype)):
            raise ConfigError(f"{where}: field {field!r} must name a torch dtype (e.g. \"bfloat16\"), "
                              f"got {show(value)}")
    fields = {key: value for key, value in config.items() if key != "model_type"}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf_config = AutoConfig.for_model(config["model_type"], **fields)
    except Exception as exc:  # transformers raises many types (strict dataclass errors, ValueError ...)
        raise ConfigError(f"{where}: transformers refuses the config: {' '.join(str(exc).split())}") \
            from None
    finally:
        hf_logging.set_verbosity(verbosity)
    rope = getattr(hf_config, "rope_parameters", None)
    if not isinstance(rope, Mapping):
        return
    named = next((f for f in ("rope_parameters", "rope_scaling") if config.get(f) is not None),
                 "rope_parameters")
    for params in [rope] if "rope_type" in rope else [v for v in rope.values() if isinstance(v, Mapping)]:
        kind = params.get("rope_type")
        if kind is not None and kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
            raise ConfigError(f"{where}: field {named!r} has an unknown RoPE type {show(kind)}; choose from: "
                              f"default, {', '.join(sorted(ROPE_INIT_FUNCTIONS))}")
        theta = params.get("rope_theta")
        if theta is not None and (
                isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0):
            raise ConfigError(f"{where}: field 'rope_theta' must be a number > 0, got {show(theta)}")


def _finite_everywhere(where: str, value: object, path: str) -> None:
    """Every float in the (nested) config is finite; NaN and infinities are refused by path."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: field {path!r} must be a finite number, got {show(value)}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _finite_everywhere(where, item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _finite_everywhere(where, item, f"{path}[{i}]")


def _check_activation(where: str, config: Mapping[str, Any]) -> None:
    for field in ACTIVATION_FIELDS:
        value = config.get(field)
        if value is None or (isinstance(value, str) and value in KNOWN_ACTIVATIONS):
            continue
        from transformers.activations import ACT2FN

        if not isinstance(value, str) or value not in ACT2FN:
            raise ConfigError(f"{where}: field {field!r} must name an activation transformers knows, got "
                              f"{show(value)}; choose from: {', '.join(sorted(ACT2FN))}")


def _check_probabilities(where: str, config: Mapping[str, Any]) -> None:
    for field, value in config.items():
        if value is None:
            continue
        if _DROPOUT.search(field):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(f"{where}: field {field!r} must be a probability in [0, 1], "
                                  f"got {show(value)}")
        elif _EPSILON.search(field) and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ConfigError(f"{where}: field {field!r} must be a number >= 0, got {show(value)}")
