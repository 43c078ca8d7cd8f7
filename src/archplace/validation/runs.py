"""Published training runs (``published_runs.yaml``) and how to evaluate them with archplace.

Each run is a model (a GPT-style architecture given by its sizes, a bundled preset name, or an
inline Hugging Face config), a plan as trained, and one published figure (TFLOP/s per GPU, MFU,
tokens/s per GPU or iteration time). The figure is turned into the iteration time it implies
(with the publisher's own FLOP formula where it is a FLOP rate), so every run compares one
quantity: the error of a prediction is ``published_time / predicted_time - 1``, the relative
error of the predicted throughput (positive: archplace predicts too fast).

A run with an ``excluded_reason`` (e.g. a kernel archplace has no published or measured speed
for) is evaluated and reported but kept outside the suite's thresholds (:func:`included`).

:func:`evaluate_kwargs` builds the keyword arguments of :func:`archplace.front.api.evaluate` for a run
and a *variant* in one place. Used by ``tests/validation``, ``benchmarks/validate.py`` and
``archplace calibrate`` (a user's own runs in the same format).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

VARIANTS: dict[str, dict[str, str]] = {
    # Each run's attention and kernels as it was trained (its plan's ``attention`` / ``kernels``).
    "as-trained": {},
    # archplace's defaults for every run: FlashAttention and fused kernels.
    "flash+fused": {"attention": "flash", "kernels": "fused"},
    # PHAZE-style graphs: HF eager attention (explicit s x s scores), unfused element-wise ops and
    # HF's own loss (the logits upcast to float32).
    "eager+unfused": {"attention": "eager", "kernels": "unfused", "loss": "fp32"},
}
DEFAULT_VARIANT = "as-trained"
COMPARISON_VARIANT = "eager+unfused"
"""The variant whose errors ``benchmarks/validate.py`` prints next to the default's."""

UNITS = ("tflop_per_gpu", "iteration_time_s", "mfu_percent", "tokens_per_s_per_gpu")
PRECISIONS = ("bf16", "fp8")


@dataclass(frozen=True)
class Model:
    """A GPT-style decoder: ``layers`` blocks of width ``hidden`` with ``heads`` heads, a 4h MLP,
    ``vocab`` tokens, trained on sequences of ``seq_len`` tokens."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    dropout: float | None = None

    def hf_config(self) -> dict[str, Any]:
        """The model as a Hugging Face GPT-2 config (Megatron's GPT and MPT share its block);
        ``dropout`` (when given) sets the residual, embedding and attention dropout, else GPT-2's
        default 0.1 (Megatron-LM's default hidden and attention dropout too)."""
        config = {"model_type": "gpt2", "n_layer": self.layers, "n_embd": self.hidden,
                  "n_head": self.heads, "n_positions": self.seq_len, "vocab_size": self.vocab}
        if self.dropout is not None:
            config.update(resid_pdrop=self.dropout, embd_pdrop=self.dropout, attn_pdrop=self.dropout)
        return config

    def model_argument(self, directory: Path) -> str:
        """``api.evaluate``'s ``model``: this config written as ``directory/config.json``."""
        return _write_config(self.hf_config(), directory)


@dataclass(frozen=True)
class PresetModel:
    """A model bundled with archplace (``archplace models``), trained on ``seq_len`` tokens."""

    preset: str
    seq_len: int

    def model_argument(self, directory: Path) -> str:
        """``api.evaluate``'s ``model``: the preset's name."""
        return self.preset


@dataclass(frozen=True)
class ConfigModel:
    """An inline Hugging Face ``config.json`` (any architecture archplace traces), trained on
    ``seq_len`` tokens. ``config`` is kept as sorted (key, value) pairs so the run stays
    hashable; :meth:`hf_config` gives the dictionary back."""

    config: tuple[tuple[str, Any], ...]
    seq_len: int

    def hf_config(self) -> dict[str, Any]:
        """The config as a dictionary."""
        return dict(self.config)

    def model_argument(self, directory: Path) -> str:
        """``api.evaluate``'s ``model``: this config written as ``directory/config.json``."""
        return _write_config(self.hf_config(), directory)


AnyModel = Model | PresetModel | ConfigModel


def _write_config(config: dict[str, Any], directory: Path) -> str:
    path = directory / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return str(path)


def _model_of(case: str, entry: dict[str, Any]) -> AnyModel:
    """A run's ``model`` mapping: ``{preset, seq_len}``, ``{config, seq_len}`` or GPT sizes."""
    if not isinstance(entry, dict):
        raise ValueError(f"{case}: model must be a mapping, got {entry!r}")
    if "preset" in entry:
        return PresetModel(**entry)
    if "config" in entry:
        if not isinstance(entry["config"], dict):
            raise ValueError(f"{case}: model.config must be a mapping (an HF config.json)")
        return ConfigModel(config=tuple(sorted(entry["config"].items())), seq_len=entry["seq_len"])
    return Model(**entry)


@dataclass(frozen=True)
class PublishedPlan:
    """The parallel plan a run was trained with (fields as in ``published_runs.yaml``)."""

    gpus: int
    tp: int
    pp: int
    micro_batch: int
    global_batch: int
    recompute: str
    schedule: str
    chunks: int
    sp: bool
    zero_stage: int
    dp_overlap: bool
    attention: str = "flash"
    kernels: str = "fused"
    grad_reduce_dtype: str | None = None
    assumptions: str | None = None
    cp: int = 1
    ep: int = 1
    etp: int = 1
    precision: str = "bf16"
    rank_order: str | None = None
    stages: str | None = None
    attention_kernel: str | None = None
    tp_comm_overlap: bool = False
    pp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    recompute_modules: tuple[str, ...] | None = None
    grad_sync: str | None = None
    expert_weighting: str | None = None
    loss: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.recompute_modules, list):  # YAML gives a list: kept as a tuple
            object.__setattr__(self, "recompute_modules", tuple(self.recompute_modules))

    @property
    def dp(self) -> int:
        """Data-parallel degree: the GPUs left after TP, CP and PP (EP is folded into dp)."""
        return self.gpus // (self.tp * self.cp * self.pp)

    def describe(self) -> str:
        """Short form for tables, e.g. ``t8 p4 d32 b2 v3 full`` (``c2`` context parallel,
        ``e8`` expert parallel, ``fp8`` FP8 GEMMs when present)."""
        parts = [f"t{self.tp}", f"p{self.pp}", f"d{self.dp}", f"b{self.micro_batch}"]
        if self.cp > 1:
            parts.insert(1, f"c{self.cp}")
        if self.ep > 1:
            parts.append(f"e{self.ep}")
        if self.ep_comm_overlap:
            parts.append("a2a-ov")
        if self.chunks > 1:
            parts.append(f"v{self.chunks}")
        if self.sp:
            parts.append("sp")
        if self.zero_stage:
            parts.append(f"z{self.zero_stage}")
        parts.append(self.recompute)
        if self.precision != "bf16":
            parts.append(self.precision)
        return " ".join(parts)


@dataclass(frozen=True)
class Published:
    """The published figure: ``value`` in ``unit`` (see :data:`UNITS`), counted with
    ``flop_formula`` (FLOP-rate units only; ``tokens_per_s_per_gpu`` and ``iteration_time_s``
    need none); MFU needs the publisher's ``peak_flop_per_s`` and, for ``mosaic_mfu``, the
    published parameter count ``params``; ``mfu_percent`` / ``tokens_per_s_per_gpu`` /
    ``model_tflop_per_gpu`` are further published columns kept for consistency checks."""

    value: float
    unit: str
    flop_formula: str | None = None
    peak_flop_per_s: float | None = None
    params: int | None = None
    mfu_percent: float | None = None
    tokens_per_s_per_gpu: float | None = None
    model_tflop_per_gpu: float | None = None


@dataclass(frozen=True)
class Run:
    """One published measurement with its plan and citation."""

    case: str
    source: str
    hardware: str
    model: AnyModel
    plan: PublishedPlan
    published: Published
    excluded_reason: str | None = None

    @property
    def group(self) -> str:
        """The run's group in tables: source (the case name's first word less a trailing
        version number, e.g. ``nemo2407`` -> ``nemo``), hardware, precision, and ``moe`` for a
        mixture-of-experts run, e.g. ``mpt a100-80gb bf16``, ``mbridge h100-80gb fp8 moe``."""
        source = self.case.split("-")[0].rstrip("0123456789")
        return f"{source} {self.hardware} {self.plan.precision}" + (" moe" if self.moe else "")

    @property
    def moe(self) -> bool:
        """A mixture-of-experts run: one with expert parallelism (every published MoE plan of the
        file shards its experts, ``plan.ep`` > 1). Issue #26's thresholds apply to these, issue
        #24's to the others."""
        return self.plan.ep > 1

    @property
    def tokens_per_iteration(self) -> int:
        """Tokens of one global batch."""
        return self.plan.global_batch * self.model.seq_len

    def gpt(self) -> Model:
        """The run's model as GPT sizes (what the FLOP formulas need).

        Raises:
            ValueError: the model is a preset or an inline config.
        """
        if not isinstance(self.model, Model):
            raise ValueError(f"{self.case}: the FLOP formulas need a GPT-style model (layers, hidden, ...)")
        return self.model

    def flop_per_iteration(self) -> float:
        """FLOP of one iteration by the publisher's formula (see :data:`FLOP_FORMULAS`).

        Raises:
            ValueError: the run has no FLOP formula.
        """
        if self.published.flop_formula is None:
            raise ValueError(f"{self.case}: no published.flop_formula")
        return FLOP_FORMULAS[self.published.flop_formula](self)

    def published_iteration_time_s(self) -> float:
        """The iteration time the published figure implies, in seconds."""
        pub = self.published
        if pub.unit == "iteration_time_s":
            return pub.value
        if pub.unit == "tokens_per_s_per_gpu":
            return self.tokens_per_iteration / (pub.value * self.plan.gpus)
        if pub.unit == "tflop_per_gpu":
            return self.flop_per_iteration() / (pub.value * 1e12 * self.plan.gpus)
        assert pub.peak_flop_per_s is not None  # checked by load_runs
        return self.flop_per_iteration() / (pub.value / 100 * pub.peak_flop_per_s * self.plan.gpus)

    def figure_of(self, iteration_time_s: float) -> float:
        """The published quantity (in ``published.unit``) for an iteration time."""
        if self.published.unit == "iteration_time_s":
            return iteration_time_s
        return self.published.value * self.published_iteration_time_s() / iteration_time_s

    def error_of(self, iteration_time_s: float) -> float:
        """Relative error of the throughput that ``iteration_time_s`` implies (> 0: too fast)."""
        return self.published_iteration_time_s() / iteration_time_s - 1.0


def narayanan_eq3(run: Run) -> float:
    """Narayanan et al. SC 2021, eq. (3): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOP per
    iteration with full activation recomputation (forward, recomputed forward, backward)."""
    m = run.gpt()
    b, s, n, h, v = run.plan.global_batch, m.seq_len, m.layers, m.hidden, m.vocab
    return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def korthikanti_mfu(run: Run) -> float:
    """The model FLOP behind Korthikanti et al. 2022's MFU (Table 5; recomputation not counted):
    72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per iteration, Narayanan et al.'s eq. (3) without the
    recomputed forward pass (forward + backward = 3 passes instead of 4, logits included).
    test_published_runs.py checks it against Table 5's MFU column."""
    m = run.gpt()
    b, s, n, h, v = run.plan.global_batch, m.seq_len, m.layers, m.hidden, m.vocab
    return 72.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))


def mosaic_mfu(run: Run) -> float:
    """llm-foundry scripts/train/benchmarking/README.md, "MFU": per sample
    3 (2 N s) + 3 (4 l h s^2) FLOP, N the published parameter count (attention included,
    recomputation not)."""
    assert run.published.params is not None  # checked by load_runs
    m = run.gpt()
    s, n, h = m.seq_len, m.layers, m.hidden
    per_sample = 6.0 * run.published.params * s + 12.0 * n * h * s * s
    return run.plan.global_batch * per_sample


FLOP_FORMULAS: dict[str, Callable[[Run], float]] = {
    "narayanan_eq3": narayanan_eq3,
    "korthikanti_mfu": korthikanti_mfu,
    "mosaic_mfu": mosaic_mfu,
}


def _check_run(run: Run) -> None:
    pub, plan = run.published, run.plan
    for name in ("value", "peak_flop_per_s", "mfu_percent", "tokens_per_s_per_gpu", "params",
                 "model_tflop_per_gpu"):
        number = getattr(pub, name)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
            raise ValueError(f"{run.case}: published.{name} must be a number, got {number!r}")
    if pub.unit not in UNITS:
        raise ValueError(f"{run.case}: published.unit {pub.unit!r} not in {UNITS}")
    if pub.unit in ("tflop_per_gpu", "mfu_percent") and pub.flop_formula is None:
        raise ValueError(f"{run.case}: published.unit {pub.unit} needs a published.flop_formula")
    if pub.flop_formula is not None:
        if pub.flop_formula not in FLOP_FORMULAS:
            raise ValueError(f"{run.case}: published.flop_formula {pub.flop_formula!r} unknown")
        run.gpt()  # every formula needs the GPT sizes
    if pub.unit == "mfu_percent" and pub.peak_flop_per_s is None:
        raise ValueError(f"{run.case}: an MFU needs published.peak_flop_per_s")
    if pub.flop_formula == "mosaic_mfu" and pub.params is None:
        raise ValueError(f"{run.case}: mosaic_mfu needs published.params")
    if plan.precision not in PRECISIONS:
        raise ValueError(f"{run.case}: plan.precision {plan.precision!r} not in {PRECISIONS}")
    sizes = {"gpus": plan.gpus, "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep,
             "etp": plan.etp, "micro_batch": plan.micro_batch, "global_batch": plan.global_batch,
             "chunks": plan.chunks, "seq_len": run.model.seq_len}
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{run.case}: {name} must be a whole number >= 1, got {size!r}")
    if plan.gpus % (plan.tp * plan.cp * plan.pp) or plan.global_batch % (plan.micro_batch * plan.dp):
        raise ValueError(f"{run.case}: gpus / (tp cp pp) or global_batch / (micro_batch dp) not whole")
    if (plan.tp * plan.cp * plan.dp) % (plan.ep * plan.etp):
        raise ValueError(f"{run.case}: ep etp must divide tp cp dp")
    if not (math.isfinite(pub.value) and pub.value > 0):
        raise ValueError(f"{run.case}: published.value must be > 0")
    for flag in ("tp_comm_overlap", "pp_comm_overlap", "ep_comm_overlap"):
        if not isinstance(getattr(plan, flag), bool):
            raise ValueError(f"{run.case}: plan.{flag} must be true or false")
    modules = plan.recompute_modules
    if modules is not None and (not modules or not all(isinstance(m, str) and m for m in modules)):
        raise ValueError(f"{run.case}: plan.recompute_modules must be a list of module names")
    if run.excluded_reason is not None and not str(run.excluded_reason).strip():
        raise ValueError(f"{run.case}: excluded_reason must say why")


def load_runs(path: Path) -> tuple[Run, ...]:
    """Every run of ``path``, checked (units, formulas, whole dp and micro-batch counts).

    Raises:
        ValueError: a malformed run, or two runs with one case name.
    """
    data = yaml.safe_load(path.read_text())
    runs = []
    for entry in data["runs"]:
        case = entry["case"]
        try:
            run = Run(case=case, source=entry["source"], hardware=entry["hardware"],
                      model=_model_of(case, entry["model"]), plan=PublishedPlan(**entry["plan"]),
                      published=Published(**entry["published"]),
                      excluded_reason=entry.get("excluded_reason"))
        except TypeError as exc:  # an unknown or missing field
            raise ValueError(f"{case}: {exc}") from None
        _check_run(run)
        runs.append(run)
    names = [run.case for run in runs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate case names in " + str(path))
    return tuple(runs)


def included(runs: tuple[Run, ...] | list[Run]) -> tuple[Run, ...]:
    """The runs without an ``excluded_reason``: those the suite's thresholds apply to."""
    return tuple(run for run in runs if run.excluded_reason is None)


_STATED = ("grad_reduce_dtype", "rank_order", "stages", "recompute_modules", "grad_sync", "expert_weighting",
           "loss")
"""Plan fields passed to ``evaluate`` only when the run gives them (else the API's defaults)."""

_SWITCHES = ("tp_comm_overlap", "pp_comm_overlap", "ep_comm_overlap")
"""Plan switches passed to ``evaluate`` only when the run turns them on."""


def evaluate_kwargs(run: Run, model_path: str, variant: str = DEFAULT_VARIANT) -> dict[str, Any]:
    """Keyword arguments of :func:`archplace.front.api.evaluate` for ``run`` as trained, under
    ``variant`` (a key of :data:`VARIANTS`, which may override the run's attention, kernels and
    loss).
    ``grad_reduce_dtype``, ``rank_order``, ``stages``, ``attention_kernel`` (with fused
    attention only), ``tp_comm_overlap``, ``pp_comm_overlap``, ``ep_comm_overlap``,
    ``recompute_modules``, ``grad_sync``, ``expert_weighting`` and ``loss`` are passed only where
    the run states them (else the API's defaults; the variant's own choices win);
    ``cp``, ``ep``, ``etp`` and ``precision`` always.

    Raises:
        KeyError: an unknown variant.
    """
    plan = run.plan
    kwargs: dict[str, Any] = {
        "model": model_path, "hardware": run.hardware, "devices": plan.gpus,
        "global_batch": plan.global_batch, "tp": plan.tp, "pp": plan.pp, "dp": plan.dp,
        "micro_batch": plan.micro_batch, "seq_len": run.model.seq_len, "recompute": plan.recompute,
        "schedule": plan.schedule, "chunks": plan.chunks, "sp": plan.sp,
        "dp_overlap": plan.dp_overlap, "zero_stage": plan.zero_stage,
        "attention": plan.attention, "kernels": plan.kernels, "cp": plan.cp, "ep": plan.ep,
        "etp": plan.etp, "precision": plan.precision,
    }
    for name in _STATED:  # only where the run states them
        if getattr(plan, name) is not None:
            kwargs[name] = getattr(plan, name)
    kwargs.update(VARIANTS[variant])
    for name in _SWITCHES:
        if getattr(plan, name):
            kwargs[name] = True
    if plan.attention_kernel is not None and kwargs["attention"] == "flash":
        kwargs["attention_kernel"] = plan.attention_kernel
    return kwargs


def model_argument(run: Run, directory: Path) -> str:
    """``api.evaluate``'s ``model`` for ``run``: a preset name, or the path of its HF config
    written as ``directory/<case>/config.json``."""
    return run.model.model_argument(directory / run.case)


def write_model_config(run: Run, directory: Path) -> Path:
    """Write ``run``'s model as ``directory/<case>/config.json`` and return its path.

    Raises:
        ValueError: the run's model is a bundled preset (there is no config to write).
    """
    if isinstance(run.model, PresetModel):
        raise ValueError(f"{run.case}: model is the preset {run.model.preset!r}, not a config")
    return Path(model_argument(run, directory))


@dataclass(frozen=True)
class Outcome:
    """archplace's prediction for one run: the iteration time, or why there is none."""

    run: Run
    variant: str
    iteration_time_s: float | None
    failure: str | None = None

    @property
    def error(self) -> float | None:
        """Relative throughput error (> 0: predicted too fast); None without a prediction."""
        return None if self.iteration_time_s is None else self.run.error_of(self.iteration_time_s)

    @property
    def predicted(self) -> float | None:
        """The prediction in the published unit; None without a prediction."""
        return None if self.iteration_time_s is None else self.run.figure_of(self.iteration_time_s)


def predict(run: Run, directory: Path, variant: str = DEFAULT_VARIANT) -> Outcome:
    """Evaluate ``run`` with ``archplace.front.api.evaluate``; an ``ArchplaceError`` (e.g. the plan
    does not fit in memory) becomes the outcome's ``failure`` instead of an exception."""
    from archplace.base.errors import ArchplaceError
    from archplace.front import api

    kwargs = evaluate_kwargs(run, model_argument(run, directory), variant)
    try:
        result = api.evaluate(**kwargs)
    except ArchplaceError as exc:
        return Outcome(run, variant, None, f"{type(exc).__name__}: {exc}")
    return Outcome(run, variant, result.iteration_time_s)


def summary(outcomes: list[Outcome]) -> tuple[float, float, int]:
    """(mean |error|, max |error|) over the outcomes with a prediction (NaN if none has one), and
    the number without a prediction (each a miss that no threshold may excuse)."""
    errors = [abs(o.error) for o in outcomes if o.error is not None]
    missing = len(outcomes) - len(errors)
    if not errors:
        return math.nan, math.nan, missing
    return sum(errors) / len(errors), max(errors), missing
