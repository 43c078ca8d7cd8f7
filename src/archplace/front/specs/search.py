"""A search written down: :class:`SearchSpec` (what ``archplace search --config run.yaml`` reads).

A spec holds everything a search needs -- the models, the cluster, the design space, the plan
options searched for every design, how the space is explored and where the work runs -- as
plain values (names, paths, numbers), checked when the spec is made: a bad value is one
:class:`~archplace.base.errors.ConfigError` naming the field.  Names and files (models, the space,
presets) are loaded when the search runs (:func:`archplace.front.api.search`), not here.

:data:`EXAMPLE` is a commented starting file (``archplace config --example search``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

from archplace.base import inputs, limits
from archplace.base.errors import ConfigError
from archplace.base.executor import EXECUTORS
from archplace.base.fields import as_dict, checked, current_names
from archplace.base.options import declared, option, redeclared
from archplace.base.units import parse_area_mm2, parse_power_w
from archplace.dse.objective import Objective
from archplace.dse.strategies import STRATEGIES
from archplace.front.specs.plan import parse_zero_stages
from archplace.front.specs.run import ClusterSpec, ModelSpec
from archplace.placement.grid import PlanChoices
from archplace.placement.plan import PipelineSchedule, Plan, Recompute
from archplace.workload.options import Tracing

RECOMPUTES = ("none", "selective", "full", "both", "all")
"""Recompute choices: the policies, ``both`` (none and full) and ``all`` (the three)."""

DEFAULT_SCHEDULES = (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED, PipelineSchedule.GPIPE)


def parse_recompute(choices: Iterable[str]) -> tuple[Recompute, ...]:
    """``["none", "full"]`` -> Recompute members; ``"both"`` means none and full, ``"all"`` adds
    selective.

    Raises:
        ConfigError: an unknown choice.
    """
    out: list[Recompute] = []
    for choice in choices:
        if choice in ("both", "all"):
            out.extend((Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL) if choice == "all"
                       else (Recompute.NONE, Recompute.FULL))
            continue
        try:
            out.append(Recompute(choice))
        except ValueError:
            raise ConfigError(
                f"unknown recompute {choice!r}; choose from: none, selective, full, both, all") from None
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class SearchChoices(PlanChoices):
    """The plan choices a design search tries for every design: the plan's choices
    (:class:`~archplace.placement.grid.PlanChoices`, declared once there), with the defaults of a
    search, which evaluates many designs and so tries fewer plans per design: recompute none and
    full (not selective), the schedules 1F1B first, TP widths within a node, and one
    context-parallel, expert-parallel and expert-TP degree (1) unless told.
    """

    tps: tuple[int, ...] | None = redeclared(PlanChoices, "tps", default_shown="valid widths within a node",
                                             formerly=("tp",))
    recomputes: tuple[Recompute, ...] = redeclared(
        PlanChoices, "recomputes", (Recompute.NONE, Recompute.FULL), metavar="|".join(RECOMPUTES),
        formerly=("recompute",),
        help="Activation recomputation to try: a policy, both (none and full) or all")
    schedules: tuple[PipelineSchedule, ...] = redeclared(PlanChoices, "schedules", DEFAULT_SCHEDULES)
    cps: tuple[int, ...] | None = redeclared(PlanChoices, "cps", default_shown="1")
    eps: tuple[int, ...] | None = redeclared(PlanChoices, "eps", default_shown="1")
    etps: tuple[int, ...] | None = redeclared(PlanChoices, "etps", default_shown="1")


@dataclass(frozen=True)
class _SearchTarget:
    """The first option group of a search spec: what is trained, on which designs, how the space
    is explored (a group of its own so that it comes first in ``--help`` and files)."""

    models: tuple[str, ...] = option(flag="--model", help=(
        "Model preset or path of an HF config.json; several: the objective is the geometric mean "
        "over the models, or see --per-model. Required, here or in --config"))
    devices: int = option(help="Accelerators in the cluster. Required, here or in --config",
                          like=(ClusterSpec, "devices"))
    global_batch: int = option(help="Samples per iteration. Required, here or in --config",
                               like=(ClusterSpec, "global_batch"))
    space: str = option("tiny", help="Search space: 'tiny', 'phaze', 'phaze-square' or a space YAML file")
    cluster: str | None = option(None, default_shown="the space's base", help=(
        "Hardware or cluster preset (phaze-paper) or YAML whose links form the cluster"))
    strategy: str = option("exhaustive", metavar="|".join(STRATEGIES),
                           help="How the space is explored (exhaustive: provable pruning)")
    objective: str = option("throughput", metavar="|".join(o.value for o in Objective),
                            help="What the best design maximises")
    area_budget: str | float | None = option(None, parse=str, metavar="AREA",
                                             help="Largest die area, e.g. '280 mm2'")
    power_budget: str | float | None = option(None, parse=str, metavar="POWER",
                                              help="Largest TDP per chip, e.g. '300 W'")
    trials: int | None = option(None, default_shown="the strategy's rule", help="Most designs to evaluate",
                                low=1, high=limits.MAX_TRIALS)
    seed: int = option(0, help="Random seed (optuna)", low=0, high=limits.MAX_SEED)
    seq_len: int | None = option(None, default_shown="model's context", like=(ModelSpec, "seq_len"))


@dataclass(frozen=True)
class SearchSpec(Tracing, SearchChoices, _SearchTarget):
    """One search: what to train, the design space, and how to search it.

    Attributes:
        models: model preset names or paths of HF ``config.json`` files (several: the objective
            is the geometric mean over them, or see ``per_model``); a single name is taken as
            a list of one.
        devices: accelerators in the cluster (1..2**20).
        global_batch: samples per iteration (1..2**30).
        space: design space: a bundled name (``tiny``, ``phaze``, ``phaze-square``) or a space YAML file.
        cluster: hardware preset (or YAML) whose links form the cluster; None: the space's base.
        strategy: ``exhaustive`` (provable pruning), ``exhaustive-all``, ``phaze``, ``wham`` or
            ``optuna``.
        objective: ``throughput``, ``throughput-per-watt`` or ``pareto``.
        area_budget: largest die area (``"280 mm2"`` or mm² as a number); None: the space's rule.
        power_budget: largest TDP per chip (``"300 W"`` or watts as a number); None: none.
        trials: most designs to evaluate (1..10**6); None: the strategy's own rule.
        seed: random seed of stochastic strategies (0..2**32 - 1).
        seq_len: tokens per sample; None: each model's context length.
        tps ... dp_replicates: the plan choices tried for every design
            (:class:`SearchChoices`: the plan's choices, :class:`~archplace.placement.grid.PlanChoices`,
            with a search's defaults); ``recomputes`` also reads ``both`` (none and full) and
            ``all``, ``zero_stages`` ``"all"`` or ``"0,1,3"``; ``tps``, ``recomputes`` and
            ``micro_batch_sizes`` also read their earlier names ``tp``, ``recompute`` and
            ``micro_batches``.
        attention, kernels, fuse, capacity_factor, expert_load_imbalance: how the layers are
            traced (:class:`~archplace.workload.options.Tracing`, as a model spec's).
        baseline: hardware preset evaluated the same way for comparison; None (or ``"none"``):
            no baseline.
        executor: ``local`` (worker processes) or ``dask``.
        scheduler: address of a running Dask scheduler (implies ``dask``); None: a local one.
        jobs: worker processes; None: the usable CPUs (1: in this process).
        store: SQLite file where every result is written as it finishes (a re-run resumes);
            None: no store.
        exact_top: re-evaluate the best this-many designs with CP-SAT layer schedules (0..1,000);
            None: ``top``.
        per_model: with several models, search each on its own (one result per model).
        top: designs reported (the table's rows; the pruned search proves this many), 1..1,000.

    Raises:
        ConfigError: a value of the wrong type or out of range, an unknown choice, or no model,
            naming the field (never a CLI flag).
    """

    TRIES: ClassVar[type] = Plan
    """The class whose fields this spec's plan fields try (:attr:`archplace.base.options.Option.tries`)."""

    baseline: str | None = option("tpuv4", help="Preset to compare with ('none' to skip)")
    executor: str = option("local", metavar="|".join(EXECUTORS), help="Where the work runs: worker "
                                                                       "processes or Dask")
    scheduler: str | None = option(None, help="Dask scheduler address, e.g. tcp://host:8786 (implies "
                                               "--executor dask)")
    jobs: int | None = option(None, default_shown="the usable CPUs", help="Worker processes")
    store: str | None = option(None, help="SQLite file: results written as they finish; re-running resumes")
    exact_top: int | None = option(None, default_shown="--top: the designs shown", help=(
        "Re-evaluate the best K designs with exact CP-SAT layer schedules"), low=0, high=limits.MAX_TOP)
    per_model: bool = option(False, help="With several --model: search each model on its own")
    top: int = option(5, help="Designs reported (the rows of the table)", low=1, high=limits.MAX_TOP)

    def __post_init__(self) -> None:
        for name in FIELDS:
            object.__setattr__(self, name, _checked(name, getattr(self, name)))

    @property
    def exact(self) -> int:
        """Designs re-evaluated with CP-SAT: ``exact_top``, or ``top`` when it is None."""
        return self.top if self.exact_top is None else self.exact_top

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The models of each search this spec runs: one per model with ``per_model``, else all
        together."""
        return tuple((name,) for name in self.models) if self.per_model else (self.models,)

    def replace(self, **changes: Any) -> SearchSpec:
        """A copy with ``changes`` (field names) applied, checked again.

        Raises:
            ConfigError: an unknown field, or a bad value.
        """
        unknown = [name for name in changes if name not in FIELDS]
        if unknown:
            raise ConfigError(f"unknown field {unknown[0]!r}; the fields are: {', '.join(FIELDS)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field, as plain data (lists for tuples, None for unset): what :meth:`from_dict`
        and a ``--config`` YAML file read."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "search spec") -> SearchSpec:
        """The spec of a mapping of field names to values (fields left out take their defaults).

        Raises:
            ConfigError: "``where``: ..." for not a mapping, an unknown field, a missing
                ``models``, ``devices`` or ``global_batch``, or a bad value (see the class).
        """
        values = check_fields(data, where)
        missing = [name for name in ("models", "devices", "global_batch") if name not in values]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> SearchSpec:
        """The spec of a YAML file (:data:`EXAMPLE` shows every field).

        Raises:
            ConfigError: a missing, unreadable or malformed file, or a bad field (named, after
                the file's name).
        """
        return cls.from_dict(read_fields(path), os.fspath(path))

    def to_yaml(self) -> str:
        """The spec as YAML text (every field), which :meth:`from_yaml` reads back."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


FIELDS = tuple(item.name for item in dataclasses.fields(SearchSpec))
"""The field names of :class:`SearchSpec`, in order."""


def check_fields(data: object, where: str) -> dict[str, Any]:
    """Each field of ``data`` checked and normalised on its own (what :class:`SearchSpec` keeps).

    Raises:
        ConfigError: "``where``: ..." for not a mapping, an unknown field or a bad value.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    data = current_names(data, (SearchSpec,), where)
    unknown = [str(name) for name in data if name not in FIELDS]
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; the fields are: {', '.join(FIELDS)}")
    out = {}
    for name, value in data.items():
        try:
            out[name] = _checked(name, value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def read_fields(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields of a search spec YAML file, each checked (:func:`check_fields`); fields it
    leaves out are left out (a ``--config`` file may leave the required ones to flags).

    Raises:
        ConfigError: a missing, unreadable or malformed file, an unknown field or a bad value,
            after the file's name.
    """
    return check_fields(inputs.read_mapping(path, "search spec", syntax="yaml"), os.fspath(path))


def _listed(value: object) -> object:
    """A single value as a list of one (YAML ``micro_batch_sizes: 4``); lists and tuples as they are."""
    if isinstance(value, list | tuple):
        return tuple(value)
    if isinstance(value, int | str) and not isinstance(value, bool):
        return (value,)
    return value


def _nonempty(values: object, field: str) -> tuple[Any, ...]:
    if not isinstance(values, tuple) or not values:
        raise ConfigError(f"{field} must be a non-empty list, got {limits.shown(values)}")
    return values


def _names(value: object, field: str) -> tuple[str, ...]:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    items = _listed([os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
                    if isinstance(value, list | tuple) else value)
    if not isinstance(items, tuple) or not items:
        raise ConfigError(f"{field}: at least one model (a preset name or a config.json path) is needed")
    return tuple(_text(item, field, "a model preset name or a config.json path") for item in items)


def _text(value: object, field: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{field} must be {what}, got {limits.shown(value)}")
    return value


def _optional_text(value: object, field: str, what: str) -> str | None:
    return None if value is None else _text(value, field, what)


def _choice(value: object, field: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"unknown {field} {value!r}; choose from: {', '.join(choices)}")
    return value


def _quantity(value: object, field: str) -> str | float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{field} must be a quantity such as '280 mm2' or a number, "
                          f"got {limits.shown(value)}")
    return value


def _positive(value: float, field: str, given: object) -> float:
    if not value > 0:
        raise ConfigError(f"{field}: must be positive, got {given!r}")
    return value


def _zero_stages(value: object) -> tuple[int, ...]:
    if isinstance(value, list):
        value = tuple(value)
    return parse_zero_stages(value)  # type: ignore[arg-type]


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _area_budget(value: object) -> str | float:
    given = _quantity(value, "area_budget")
    _positive(parse_area_mm2(given, "area_budget"), "area_budget", given)
    return given


def _power_budget(value: object) -> str | float:
    given = _quantity(value, "power_budget")
    _positive(parse_power_w(given, "power_budget"), "power_budget", given)
    return given


def _baseline(value: object) -> str | None:
    name = _optional_text(value, "baseline", "a hardware preset, a file path or none")
    return None if name == "none" else name


def _path_text(field: str, what: str) -> Callable[[Any], str | None]:
    def check(value: object) -> str | None:
        return _optional_text(os.fspath(value) if isinstance(value, os.PathLike) else value, field, what)
    return check


def _recompute(value: object) -> tuple[Recompute, ...]:
    return parse_recompute(str(r) if isinstance(r, Recompute) else _choice(r, "recompute", RECOMPUTES)
                           for r in _nonempty(_listed(value), "recomputes"))


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "models": lambda v: _names(v, "models"),
    "space": lambda v: _text(os.fspath(v) if isinstance(v, os.PathLike) else v, "space",
                             "a space name or a file path"),
    "cluster": _path_text("cluster", "a hardware preset or a file path"),
    "strategy": lambda v: _choice(v, "strategy", STRATEGIES),
    "objective": lambda v: _choice(v, "objective", tuple(o.value for o in Objective)),
    "area_budget": _optional(_area_budget),
    "power_budget": _optional(_power_budget),
    "recomputes": _recompute,
    "zero_stages": _zero_stages,
    "baseline": _baseline,
    "executor": lambda v: _choice(v, "executor", EXECUTORS),
    "scheduler": lambda v: _optional_text(v, "scheduler", "a Dask scheduler address"),
    "jobs": _optional(limits.jobs),
    "store": _path_text("store", "a file path"),
}
"""How the fields whose check their declaration does not give (texts, choices given as text,
quantities with units) are checked and normalised; every other field is checked from its
declaration (:func:`archplace.base.fields.checked`)."""


def _checked(name: str, value: object) -> Any:
    """Field ``name``'s ``value`` checked and normalised: by :data:`_CHECKS`, else from its
    declaration, a single value taken as a list of one for a list field."""
    if name in _CHECKS:
        return _CHECKS[name](value)
    field = declared(SearchSpec)[name]
    return checked(field, value if field.element is None else _listed(value), name)


EXAMPLE = """\
# archplace search --config run.yaml: one search, written down.
# Flags given on the command line override these fields. Paths are relative to the directory
# archplace runs in. Only models, devices and global_batch are required; every other field
# shows its default.

# What to train, on how many chips
models: [gpt2-xl]            # presets (archplace models) or paths of HF config.json files
devices: 1024                # accelerators in the cluster
global_batch: 4096           # samples per iteration
seq_len: null                # tokens per sample; null: each model's context length
per_model: false             # with several models: search each on its own

# The designs
space: tiny                  # tiny, phaze, phaze-square, or a space YAML file
cluster: null                # preset whose links form the cluster; null: the space's base
area_budget: null            # largest die area, e.g. "280 mm2"; null: the space's rule
power_budget: null           # largest TDP per chip, e.g. "300 W"
baseline: tpuv4              # preset evaluated the same way for comparison; none: no baseline

# The parallel plans tried for every design
micro_batch_sizes: [1, 2, 4, 8]
recomputes: [both]           # none, selective, full, both (none and full), all
tps: null                    # TP widths, e.g. [1, 2, 4]; null: every valid width within a node
schedules: [1f1b, interleaved, gpipe]
chunks: [2, 4]               # model chunks per device tried with the interleaved schedule
zero_stages: [0, 1, 2, 3]    # or "all", or "0,1"
dp_overlap: [false, true]    # DP gradient reduction exposed and/or overlapped with the last backward
grad_reduce_dtype: fp32      # fp32 or bf16
grad_sync: auto              # gradient reduction: auto (each ZeRO stage's), iteration, micro_batch
precisions: [bf16]           # bf16 and/or fp8 (designs without FP8 tensor cores: bf16 only)
cps: null                    # context-parallel degrees, e.g. [1, 2]; null: 1 only
eps: null                    # expert-parallel degrees, e.g. [1, 8]; null: 1 only
etps: null                   # expert-tensor-parallel widths, e.g. [1, 2]; null: 1 only
dp_replicates: [1]           # hybrid-sharding (HSDP) replica counts, e.g. [1, 4] (ZeRO >= 1)
attention: flash             # flash, sdpa or eager
kernels: fused               # fused or unfused
fuse: false                  # fold element-wise operators into their producing matmul
capacity_factor: 1.0         # MoE expert capacity over the balanced share; 1.0: dropless (>= 1)
expert_load_imbalance: 1.0   # busiest EP rank's tokens over the mean, dropless routing (>= 1)
recompute_modules: [core_attn]  # what selective recompute reruns: core_attn, mlp, moe, shared_experts,
                             # moe_act, layernorm, mla_up_proj (Megatron-Core's --recompute-modules)
expert_weighting: output     # MoE routing weight on the experts' output (HF) or on their
                             # activation (Megatron-Core's, before the down projection)
loss: megatron               # cross-entropy: megatron (Megatron-LM's, logits upcast), megatron-fused
                             # (compiled), te (Transformer Engine's), fp32 (HF's) or fused (llm-foundry)
swiglu_fp8_input: false      # keep SwiGLU inputs in FP8 for backward (Megatron-Core's
                             # --activation-func-fp8-input-store; DeepSeek-V3)

# How to search
strategy: exhaustive         # exhaustive, exhaustive-all, phaze, wham, optuna
objective: throughput        # throughput, throughput-per-watt, pareto
trials: null                 # most designs to evaluate; null: the strategy's rule
seed: 0
top: 5                       # designs reported
exact_top: null              # re-evaluate the best K with CP-SAT layer schedules; null: top

# Where the work runs
executor: local              # local or dask
scheduler: null              # Dask scheduler address, e.g. tcp://host:8786
jobs: null                   # worker processes; null: the usable CPUs
store: null                  # SQLite file: results kept as they finish; a re-run resumes
"""
"""A commented starting file for ``archplace search --config`` (``archplace config --example
search``); it loads into a :class:`SearchSpec` of the defaults for gpt2-xl on 1,024 devices."""
