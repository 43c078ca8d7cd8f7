"""Run files on the command line: ``plan --config`` and ``evaluate --plan``.

A run's fields come from three layers, later ones winning: the options' defaults, the file,
and the options given on the command line (``click``'s parameter source tells them apart).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from archplace import api
from archplace.app import read_run_file
from archplace.errors import ConfigError
from archplace.specs import EvaluateRun, PlanRun
from archplace.specs.runs import PLAN_SETUP_KEYS, evaluate_fields

Fields = Callable[[str, Any], dict[str, Any]]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line (not its default)."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def _layers(ctx: typer.Context, options: Mapping[str, Any], fields: Fields,
            loaded: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults of ``options`` (None: no value), then ``loaded`` (the file's fields), then the
    options given on the command line; ``fields`` turns one option into its run fields."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is not None and not given(ctx, name):
            _merge(out, fields(name, value))
    _merge(out, loaded)
    for name, value in options.items():
        if given(ctx, name):
            _merge(out, fields(name, value))
    return out


def _merge(out: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if key == "plan" and isinstance(out.get("plan"), dict) and isinstance(value, Mapping):
            out["plan"] = {**out["plan"], **value}
        else:
            out[key] = value


_PLAN_RENAMES = {"tp": "tps", "micro_batch": "micro_batches", "recompute": "recomputes",
                 "schedule": "schedules", "top": "top_k", "precision": "precisions", "cp": "cps",
                 "ep": "eps", "etp": "etps"}


def _plan_fields(name: str, value: Any) -> dict[str, Any]:
    if name == "no_sp":
        return {"sp": not value}
    if name in ("tp", "micro_batch", "recompute", "schedule", "precision", "cp", "ep", "etp"):
        return {_PLAN_RENAMES[name]: list(value)} if value else {}
    if name == "top":
        return {"top_k": value}
    return {name: value}


def plan_run(ctx: typer.Context, config: Path | None, options: dict[str, Any],
             zero_stage: str | None, no_zero: bool) -> PlanRun:
    """The plan run of ``plan``'s options over the ``config`` file's fields.

    Raises:
        ConfigError: a bad file, an unknown or missing field, a bad value.
    """
    loaded = read_run_file(config, "plan config") if config is not None else {}
    values = _layers(ctx, options, _plan_fields, loaded)
    if given(ctx, "zero_stage") or given(ctx, "no_zero"):
        values["zero_stages"] = [0] if no_zero else list(api.parse_zero_stages(zero_stage))
    return PlanRun.from_dict(values)


_PLAN_OPTIONS = ("tp", "cp", "ep", "etp", "pp", "dp", "micro_batch", "recompute", "schedule", "chunks", "sp",
                 "dp_overlap", "precision", "rank_order", *PLAN_SETUP_KEYS)


def _evaluate_fields(name: str, value: Any) -> dict[str, Any]:
    if name in _PLAN_OPTIONS:
        return {"plan": {name: value}}
    if name == "stages":
        return {"plan": {"stages": [list(pair) for pair in api.parse_stages(value)]}}
    return {name: value}


def evaluate_run(ctx: typer.Context, plan_file: Path | None, options: dict[str, Any],
                 zero_stage: int | None, zero: bool) -> EvaluateRun:
    """The evaluate run of ``evaluate``'s options over the fields of the ``plan_file`` (a plan
    object, or the document ``plan --json`` or ``evaluate --json`` wrote). A file's stage split
    is dropped when ``--pp``, ``--chunks`` or ``--schedule`` change the plan's shape without
    ``--stages``.

    Raises:
        ConfigError: a bad file, an unknown or missing field, a bad value.
    """
    loaded = (evaluate_fields(read_run_file(plan_file, "plan"), f"{plan_file}: plan file")
              if plan_file is not None else {})
    reshaped = any(given(ctx, name) for name in ("pp", "chunks", "schedule")) and not given(ctx, "stages")
    if reshaped and isinstance(loaded.get("plan"), Mapping):
        loaded["plan"] = {k: v for k, v in loaded["plan"].items() if k != "stages"}
    values = _layers(ctx, options, _evaluate_fields, loaded)
    if given(ctx, "zero_stage") or given(ctx, "zero"):
        _merge(values, {"plan": {"zero_stage": api.fixed_zero_stage(zero_stage, zero)}})
    if not isinstance(values.get("plan"), Mapping):
        missing = ("tp", "pp", "dp", "micro_batch")
        raise ConfigError(f"plan: missing fields {', '.join(missing)}", fields=missing)
    return EvaluateRun.from_dict(values)


def run_fields(run: PlanRun | EvaluateRun) -> dict[str, Any]:
    """What a JSON output carries so that ``evaluate --plan`` can score its plan again: the
    model, hardware and cluster fields, and the optimizer and gradient dtype."""
    setup = run.space if isinstance(run, PlanRun) else run.plan
    return {**run.model.to_dict(), **run.hardware.to_dict(), **run.cluster.to_dict(),
            **{key: getattr(setup, key).value for key in PLAN_SETUP_KEYS}}
