"""Model specifications: bundled presets and Hugging Face ``config.json`` files.

A :class:`LoadedModel` is the published configuration of a model (the fields of
its HF ``config.json``) plus a default sequence length.  No weights are ever
loaded: the model is only instantiated on the meta device by
:mod:`archplace.workload.extract`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.inputs import read_mapping
from archplace.workload.config_checks import (
    check_model_config,
    check_with_transformers,
    moe_value,
    refuse_mixture_of_experts,
)
from archplace.workload.options import Attention


@dataclass(frozen=True)
class Family:
    """How archplace reads one HF ``model_type``.

    Attributes:
        task: ``causal-lm`` (decoder, next-token loss) or ``masked-lm`` (encoder, MLM loss).
        layers_field: field holding the number of blocks.
        context_field: field holding the maximum sequence length.
        hidden_field: field holding the hidden size.
        heads_field: field holding the number of attention heads.
        kv_heads_field: field holding the number of key/value heads (grouped-query
            attention), or None when every head has its own.
        ffn_field: field holding the FFN (intermediate) size.
        ffn_optional: whether the FFN field may be null or absent, meaning 4x hidden (GPT-2's
            ``n_inner``); elsewhere transformers' default would not be 4x hidden, so it is required.
        rotary: positions are rotary (RoPE, Su et al. 2021): the model has no position table, so
            it can be trained at a longer sequence than its config's context length (context
            extension, e.g. Llama 2 Long, Xiong et al. 2023, sec. 2); learned position tables
            (GPT-2, OPT, BERT) cannot.
        experts_field: for a mixture-of-experts family, the field holding the number of routed
            experts per MoE layer (the experts chosen per token are ``num_experts_per_tok``);
            None for a dense family.
        dense_layers_field: for a mixture-of-experts family whose first blocks are dense (DeepSeek-V3's
            ``first_k_dense_replace``), the field holding how many; None otherwise.
        default_context: for a family without a position table whose configs may leave the
            context field out (BLOOM's ALiBi), the sequence length trained when they do; None:
            the context field is required.
        aliases: earlier or alternative names of the fields (``(alias, field)`` pairs), renamed
            to the family's field when a config is loaded (:func:`normalised`), as the family's
            transformers config class reads them (BLOOM's ``n_embed`` is ``hidden_size``).
        fused_attention: the model code routes attention through transformers' attention
            interface, so that archplace can run it as one fused operator (``flash``, ``sdpa``);
            False: the code computes the scores itself (BLOOM's ALiBi ``baddbmm``), and only
            ``eager`` attention is traced (:func:`check_attention`).

    A family whose FFN width is not a config field but fixed at 4 x hidden (BLOOM's
    ``BloomMLP``) has ``ffn_field`` None.
    """

    task: str
    layers_field: str
    context_field: str
    hidden_field: str
    heads_field: str
    kv_heads_field: str | None
    ffn_field: str | None
    ffn_optional: bool = False
    rotary: bool = False
    experts_field: str | None = None
    dense_layers_field: str | None = None
    default_context: int | None = None
    aliases: tuple[tuple[str, str], ...] = ()
    fused_attention: bool = True

    def context(self, config: Mapping[str, Any]) -> Any:
        """The context length of ``config``: its context field, else :attr:`default_context`
        (None when neither; the config checks refuse that)."""
        value = config.get(self.context_field)
        return self.default_context if value is None else value


_DECODER: dict[str, Any] = dict(layers_field="num_hidden_layers", context_field="max_position_embeddings",
                                hidden_field="hidden_size", heads_field="num_attention_heads")
FAMILIES: dict[str, Family] = {
    "gpt2": Family("causal-lm", "n_layer", "n_positions", "n_embd", "n_head", None, "n_inner",
                   ffn_optional=True),
    "bert": Family("masked-lm", **_DECODER, kv_heads_field=None, ffn_field="intermediate_size"),
    "opt": Family("causal-lm", **_DECODER, kv_heads_field=None, ffn_field="ffn_dim"),
    "llama": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                    ffn_field="intermediate_size", rotary=True),
    "mistral": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                      ffn_field="intermediate_size", rotary=True),
    "mixtral": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                      ffn_field="intermediate_size", rotary=True, experts_field="num_local_experts"),
    "qwen2_moe": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                        ffn_field="intermediate_size", rotary=True, experts_field="num_experts"),
    "qwen3_moe": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                        ffn_field="intermediate_size", rotary=True, experts_field="num_experts"),
    "deepseek_v3": Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                          ffn_field="intermediate_size", rotary=True, experts_field="n_routed_experts",
                          dense_layers_field="first_k_dense_replace"),
    # BLOOM (BigScience, Le Scao et al. 2022, arXiv 2211.05100): ALiBi positions (no table, any
    # length; sec. 3.2.2 and Table 3: trained at 2,048 tokens), FFN 4 x hidden fixed in
    # transformers' BloomMLP, the aliases of transformers' BloomConfig (its attribute_map and
    # the n_embed keyword), attention computed in the model code (alibi.baddbmm).
    "bloom": Family("causal-lm", layers_field="n_layer", context_field="seq_length",
                    hidden_field="hidden_size", heads_field="n_head", kv_heads_field=None,
                    ffn_field=None, rotary=True, default_context=2048,
                    aliases=(("n_embed", "hidden_size"), ("num_hidden_layers", "n_layer"),
                             ("num_attention_heads", "n_head")),
                    fused_attention=False),
}


@dataclass(frozen=True)
class LoadedModel:
    """A model to train.

    Attributes:
        name: preset name or the config file's stem.
        config_json: the HF config fields as canonical JSON (sorted keys), hashable.
        seq_len: default tokens per sample.
        source: where the hyperparameters come from.

    Raises:
        ConfigError: a config :func:`validate_config` refuses; a sequence length that is not a
            whole number >= 1 or exceeds the model's context length.
    """

    name: str
    config_json: str
    seq_len: int
    source: str = ""

    def __post_init__(self) -> None:
        family = validate_config(f"model {self.name!r}", self.config)
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len <= 0:
            raise ConfigError(f"model {self.name!r}: sequence length must be a whole number >= 1, "
                              f"got {self.seq_len!r}")
        context = family.context(self.config)
        if self.seq_len > context:
            raise ConfigError(f"model {self.name!r}: sequence length {self.seq_len} exceeds its context "
                              f"length {context} ({family.context_field})")

    @property
    def config(self) -> dict[str, Any]:
        """The HF config fields (a fresh dict)."""
        return dict(json.loads(self.config_json))

    @property
    def model_type(self) -> str:
        """HF ``model_type``, e.g. ``gpt2``."""
        return str(self.config["model_type"])

    @property
    def family(self) -> Family:
        """Field map of the model's family."""
        family = family_of(self.model_type)
        assert family is not None  # checked when built
        return family

    @property
    def num_layers(self) -> int:
        """Number of transformer blocks."""
        return int(self.config[self.family.layers_field])

    def _int(self, field: str) -> int:
        value = self.config.get(field)
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"model {self.name!r}: {field} must be a positive integer, got {value!r}")
        return value

    @property
    def hidden_size(self) -> int:
        """Hidden (model) width."""
        return self._int(self.family.hidden_field)

    @property
    def heads(self) -> int:
        """Attention heads."""
        return self._int(self.family.heads_field)

    @property
    def kv_heads(self) -> int:
        """Key/value heads (= heads without grouped-query attention)."""
        field = self.family.kv_heads_field
        return self._int(field) if field and self.config.get(field) is not None else self.heads

    @property
    def ffn_size(self) -> int:
        """FFN intermediate width (4x hidden when the config leaves it null, or when the family
        fixes it: ``ffn_field`` None)."""
        if self.family.ffn_field is None or self.config.get(self.family.ffn_field) is None:
            return 4 * self.hidden_size
        return self._int(self.family.ffn_field)

    def moe_field(self, field: str) -> Any:
        """A mixture-of-experts or latent-attention field as transformers builds the model: the
        config's value, else its config class's default
        (:func:`archplace.workload.config_checks.moe_value`).

        Raises:
            KeyError: not such a field of the model's architecture.
        """
        return moe_value(self.config, field)

    @property
    def experts(self) -> int:
        """Routed experts per mixture-of-experts layer; 0 for a dense model."""
        field = self.family.experts_field
        return int(self.moe_field(field)) if field else 0

    @property
    def block_runs(self) -> tuple[int, ...]:
        """Blocks of each kind in chain order: ``(L,)`` when every block is alike, ``(d, L - d)``
        when the first d blocks are dense and the others mixture-of-experts (DeepSeek-V3:
        ``(3, 58)``). One block of each kind is traced."""
        field = self.family.dense_layers_field
        dense = self.moe_field(field) if field else None
        layers = self.num_layers
        if isinstance(dense, int) and 0 < dense < layers:
            return (dense, layers - dense)
        return (layers,)

    @property
    def experts_per_token(self) -> int:
        """Experts each token is routed to (``num_experts_per_tok``); 0 for a dense model."""
        return int(self.moe_field("num_experts_per_tok")) if self.family.experts_field else 0

    @property
    def vocab_size(self) -> int:
        """Vocabulary size."""
        return self._int("vocab_size")

    def with_seq_len(self, seq_len: int) -> LoadedModel:
        """The same model trained at another sequence length.

        A model with rotary positions (:attr:`Family.rotary`) may be trained beyond its config's
        context length: its context field is raised to ``seq_len`` (it has no position table
        whose size would change).

        Raises:
            ConfigError: seq_len is not positive, or exceeds the context length of a model with a
                learned position table.
        """
        if seq_len <= 0:
            raise ConfigError(f"sequence length must be positive, got {seq_len}")
        field = self.family.context_field
        config = self.config
        context = self.family.context(config)
        if isinstance(context, int) and seq_len > context:
            if not self.family.rotary:
                raise ConfigError(
                    f"model {self.name!r}: sequence length {seq_len} exceeds its context length "
                    f"{context} (its learned position table has {context} rows)")
            config[field] = seq_len
            return LoadedModel(self.name, _canonical(config), seq_len, self.source)
        return LoadedModel(self.name, self.config_json, seq_len, self.source)


# Any other architecture transformers knows is read through the standard HF field names.
GENERIC_DECODER = Family("causal-lm", **_DECODER, kv_heads_field="num_key_value_heads",
                         ffn_field="intermediate_size")


def family_of(model_type: object) -> Family | None:
    """Field map of an HF ``model_type``: the family table, else the generic decoder for an
    architecture transformers knows, else None."""
    if not isinstance(model_type, str):
        return None
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return GENERIC_DECODER if model_type in CONFIG_MAPPING else None


def check_attention(model: LoadedModel, attention: Attention) -> None:
    """Refuse a fused attention (``flash``, ``sdpa``) for a model whose code computes attention
    itself (:attr:`Family.fused_attention` False): archplace runs attention fused by routing it
    through transformers' attention interface, which that code does not call, so its layers
    would be traced eager while costed as fused.

    Raises:
        ConfigError: naming the model, its architecture and the attention it can be traced with.
    """
    if attention is not Attention.EAGER and not model.family.fused_attention:
        raise ConfigError(f"model {model.name!r}: {model.model_type}'s Hugging Face code computes its "
                          "scores itself, without transformers' interface for fused kernels, so "
                          f"{attention.value} cannot be traced: use attention eager")


def normalised(where: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each field its family spells otherwise (:attr:`Family.aliases`) under the
    family's name, as transformers' config class reads it; unchanged for a family without
    aliases or an unknown ``model_type``.

    Raises:
        ConfigError: a config that gives a field under both names, with different values.
    """
    family = FAMILIES.get(config.get("model_type"))  # type: ignore[arg-type]
    if family is None or not family.aliases:
        return config
    out = dict(config)
    for alias, field in family.aliases:
        if alias not in out:
            continue
        value = out.pop(alias)
        if field in out and out[field] != value:
            raise ConfigError(f"{where}: fields {alias!r} ({value!r}) and {field!r} ({out[field]!r}) "
                              f"name the same size; give one of them")
        out[field] = value
    return out


def validate_config(where: str, config: dict[str, Any], *, user_file: bool = False) -> Family:
    """Check an HF config before transformers sees it; returns its family.

    Args:
        where: how to name the config in messages (its file, or ``model 'name'``).
        config: the HF config fields.
        user_file: for a user's file: also refuse a field that looks like a misspelling
            (:func:`check_fields`), before the fields are checked, so that a misspelt field is
            named rather than reported missing; and after them, what transformers' own config
            refuses (:func:`~archplace.workload.config_checks.check_with_transformers`). Both
            import torch, so the bundled presets skip them.

    Raises:
        ConfigError: a mixture-of-experts model, an unknown ``model_type``, a misspelt field,
            or a field :func:`archplace.workload.config_checks.check_model_config` refuses.
    """
    refuse_mixture_of_experts(where, config)
    model_type = config.get("model_type")
    family = family_of(model_type)
    if family is None:
        raise ConfigError(
            f"{where}: unknown architecture model_type={model_type!r}; supported: "
            f"{', '.join(sorted(FAMILIES))} and other architectures transformers knows")
    if user_file:
        check_fields(where, config)
    check_model_config(where, config, family)
    if user_file:
        check_with_transformers(where, config)
    return family


def check_fields(where: str, config: dict[str, Any]) -> None:
    """Refuse a config whose field looks like a misspelling of one its architecture defines.

    Real config.json files carry extra metadata (``architectures``, ``auto_map`` ...), so
    an unknown field is only an error when it is close to a known one (difflib ratio >= 0.85).

    Raises:
        ConfigError: naming the field and the one it was probably meant to be.
    """
    import difflib

    from transformers import AutoConfig

    known = set(AutoConfig.for_model(config["model_type"]).to_dict())
    for field in config:
        if field in known:
            continue
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.85)
        if close:
            raise ConfigError(f"{where}: unknown field {field!r} (did you mean {close[0]!r}?)")


def _canonical(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def _presets() -> dict[str, dict[str, Any]]:
    source = resources.files("archplace.workload").joinpath("presets/models.yaml")
    return read_mapping(source, "model presets", syntax="yaml", label="presets/models.yaml")


def model_preset_names() -> list[str]:
    """Names of the bundled model presets."""
    return sorted(_presets())


def model_preset_summaries() -> list[dict[str, Any]]:
    """One dict per preset: name, model_type, layers, seq_len, source (for ``archplace models``)."""
    out = []
    for name in model_preset_names():
        spec = load_model(name)
        cfg = spec.config
        hidden = cfg.get("hidden_size", cfg.get("n_embd"))
        out.append({"name": name, "model_type": spec.model_type, "layers": spec.num_layers,
                    "hidden": hidden, "seq_len": spec.seq_len, "source": spec.source})
    return out


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name the OS refuses (too long, a NUL character)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def load_model(name_or_path: str) -> LoadedModel:
    """Load a bundled preset by name, or an HF ``config.json`` by path.

    Raises:
        ConfigError: unknown preset (lists the valid ones), a file
            :func:`archplace.base.inputs.read_mapping` refuses, or a config :func:`validate_config`
            refuses.
    """
    presets = _presets()
    if name_or_path in presets:
        entry = presets[name_or_path]
        return LoadedModel(name_or_path, _canonical(normalised(name_or_path, entry["config"])),
                           int(entry["seq_len"]),
                         str(entry.get("source", "")))
    path = Path(name_or_path)
    if path.suffix != ".json" and not _exists(path):
        raise ConfigError(
            f"unknown model {name_or_path!r}; choose a preset ({', '.join(sorted(presets))}) "
            "or give the path of a Hugging Face config.json"
        )
    config = normalised(name_or_path, read_mapping(path, "model config", syntax="json", label=name_or_path))
    family = validate_config(name_or_path, config, user_file=True)
    seq_len = family.context(config)
    return LoadedModel(path.stem if path.stem != "config" else path.parent.name or "config",
                     _canonical(config), seq_len, str(path))
