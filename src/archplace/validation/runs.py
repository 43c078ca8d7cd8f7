"""Published training runs (``published_runs.yaml``) and how to evaluate them with archplace.

Each run is a GPT-style model, a plan as trained, and one published figure (TFLOP/s per GPU,
MFU or iteration time). The figure is turned into the iteration time it implies with the
publisher's own FLOP formula, so every run compares one quantity: the error of a prediction is
``published_time / predicted_time - 1``, the relative error of the predicted throughput
(positive: archplace predicts too fast).

:func:`evaluate_kwargs` builds the keyword arguments of :func:`archplace.api.evaluate` for a run
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
    # PHAZE-style graphs: HF eager attention (explicit s x s scores) and unfused element-wise ops.
    "eager+unfused": {"attention": "eager", "kernels": "unfused"},
}
DEFAULT_VARIANT = "as-trained"
COMPARISON_VARIANT = "eager+unfused"
"""The variant whose errors ``benchmarks/validate.py`` prints next to the default's."""

UNITS = ("tflop_per_gpu", "iteration_time_s", "mfu_percent")


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


@dataclass(frozen=True)
class Plan:
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

    @property
    def dp(self) -> int:
        """Data-parallel degree: the GPUs left after TP and PP."""
        return self.gpus // (self.tp * self.pp)

    def describe(self) -> str:
        """Short form for tables, e.g. ``t8 p4 d32 b2 v3 full``."""
        parts = [f"t{self.tp}", f"p{self.pp}", f"d{self.dp}", f"b{self.micro_batch}"]
        if self.chunks > 1:
            parts.append(f"v{self.chunks}")
        if self.sp:
            parts.append("sp")
        if self.zero_stage:
            parts.append(f"z{self.zero_stage}")
        parts.append(self.recompute)
        return " ".join(parts)


@dataclass(frozen=True)
class Published:
    """The published figure: ``value`` in ``unit`` (see :data:`UNITS`), counted with
    ``flop_formula``; MFU needs the publisher's ``peak_flop_per_s`` and, for ``mosaic_mfu``, the
    published parameter count ``params``; ``mfu_percent`` / ``tokens_per_s_per_gpu`` are
    further published columns kept for consistency checks."""

    value: float
    unit: str
    flop_formula: str
    peak_flop_per_s: float | None = None
    params: int | None = None
    mfu_percent: float | None = None
    tokens_per_s_per_gpu: float | None = None


@dataclass(frozen=True)
class Run:
    """One published measurement with its plan and citation."""

    case: str
    source: str
    hardware: str
    model: Model
    plan: Plan
    published: Published

    def flop_per_iteration(self) -> float:
        """FLOP of one iteration by the publisher's formula (see :data:`FLOP_FORMULAS`)."""
        return FLOP_FORMULAS[self.published.flop_formula](self)

    def published_iteration_time_s(self) -> float:
        """The iteration time the published figure implies, in seconds."""
        pub = self.published
        if pub.unit == "iteration_time_s":
            return pub.value
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
    b, s, n, h, v = (run.plan.global_batch, run.model.seq_len, run.model.layers, run.model.hidden,
                     run.model.vocab)
    return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def korthikanti_mfu(run: Run) -> float:
    """The model FLOP behind Korthikanti et al. 2022's MFU (Table 5; recomputation not counted):
    72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per iteration, Narayanan et al.'s eq. (3) without the
    recomputed forward pass (forward + backward = 3 passes instead of 4, logits included).
    test_published_runs.py checks it against Table 5's MFU column."""
    b, s, n, h, v = (run.plan.global_batch, run.model.seq_len, run.model.layers, run.model.hidden,
                     run.model.vocab)
    return 72.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))


def mosaic_mfu(run: Run) -> float:
    """llm-foundry scripts/train/benchmarking/README.md, "MFU": per sample
    3 (2 N s) + 3 (4 l h s^2) FLOP, N the published parameter count (attention included,
    recomputation not)."""
    assert run.published.params is not None  # checked by load_runs
    s, n, h = run.model.seq_len, run.model.layers, run.model.hidden
    per_sample = 6.0 * run.published.params * s + 12.0 * n * h * s * s
    return run.plan.global_batch * per_sample


FLOP_FORMULAS: dict[str, Callable[[Run], float]] = {
    "narayanan_eq3": narayanan_eq3,
    "korthikanti_mfu": korthikanti_mfu,
    "mosaic_mfu": mosaic_mfu,
}


def _check_run(run: Run) -> None:
    pub, plan = run.published, run.plan
    for name in ("value", "peak_flop_per_s", "mfu_percent", "tokens_per_s_per_gpu", "params"):
        number = getattr(pub, name)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
            raise ValueError(f"{run.case}: published.{name} must be a number, got {number!r}")
    if pub.unit not in UNITS:
        raise ValueError(f"{run.case}: published.unit {pub.unit!r} not in {UNITS}")
    if pub.flop_formula not in FLOP_FORMULAS:
        raise ValueError(f"{run.case}: published.flop_formula {pub.flop_formula!r} unknown")
    if pub.unit == "mfu_percent" and pub.peak_flop_per_s is None:
        raise ValueError(f"{run.case}: an MFU needs published.peak_flop_per_s")
    if pub.flop_formula == "mosaic_mfu" and pub.params is None:
        raise ValueError(f"{run.case}: mosaic_mfu needs published.params")
    if plan.gpus % (plan.tp * plan.pp) or plan.global_batch % (plan.micro_batch * plan.dp):
        raise ValueError(f"{run.case}: gpus / (tp pp) or global_batch / (micro_batch dp) not whole")
    if not (math.isfinite(pub.value) and pub.value > 0):
        raise ValueError(f"{run.case}: published.value must be > 0")


def load_runs(path: Path) -> tuple[Run, ...]:
    """Every run of ``path``, checked (units, formulas, whole dp and micro-batch counts).

    Raises:
        ValueError: a malformed run, or two runs with one case name.
    """
    data = yaml.safe_load(path.read_text())
    runs = []
    for entry in data["runs"]:
        run = Run(case=entry["case"], source=entry["source"], hardware=entry["hardware"],
                  model=Model(**entry["model"]), plan=Plan(**entry["plan"]),
                  published=Published(**entry["published"]))
        _check_run(run)
        runs.append(run)
    names = [run.case for run in runs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate case names in " + str(path))
    return tuple(runs)


def evaluate_kwargs(run: Run, model_path: str, variant: str = DEFAULT_VARIANT) -> dict[str, Any]:
    """Keyword arguments of :func:`archplace.api.evaluate` for ``run`` as trained, under
    ``variant`` (a key of :data:`VARIANTS`, which may override the run's attention and kernels).
    ``grad_reduce_dtype`` is passed only where the source states it (else the API's default).

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
        "attention": plan.attention, "kernels": plan.kernels, **VARIANTS[variant],
    }
    if plan.grad_reduce_dtype is not None:
        kwargs["grad_reduce_dtype"] = plan.grad_reduce_dtype
    return kwargs


def write_model_config(run: Run, directory: Path) -> Path:
    """Write ``run``'s model as ``directory/<case>/config.json`` and return its path."""
    path = directory / run.case / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.model.hf_config()))
    return path


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
    """Evaluate ``run`` with ``archplace.api.evaluate``; an ``ArchplaceError`` (e.g. the plan
    does not fit in memory) becomes the outcome's ``failure`` instead of an exception."""
    from archplace import api
    from archplace.errors import ArchplaceError

    kwargs = evaluate_kwargs(run, str(write_model_config(run, directory)), variant)
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
