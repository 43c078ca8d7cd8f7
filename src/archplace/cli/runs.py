"""Run files on the command line: ``plan --config`` and ``evaluate --plan``.

A run's fields come from three layers, later ones winning: the options' defaults, the file,
and the options given on the command line (``click``'s parameter source tells them apart).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import typer

from archplace.base.errors import ConfigError
from archplace.cli.derived import cli_options, fields_of
from archplace.front import api
from archplace.front.app import read_run_file
from archplace.front.specs import ClusterSpec, EvaluateRun, HardwareSpec, ModelSpec, Plan, PlanRun, PlanSpace
from archplace.front.specs.runs import PLAN_SETUP_KEYS, evaluate_fields

PLAN_SPECS = (ModelSpec, HardwareSpec, ClusterSpec, PlanSpace)
"""The specs whose declared fields are ``plan``'s options (:mod:`archplace.cli.derived`)."""

EVALUATE_SPECS = (ModelSpec, HardwareSpec, ClusterSpec, Plan)
"""The specs whose declared fields are ``evaluate``'s options; the plan's are nested under
``"plan"`` in the run."""

Fields = Callable[[str, Any], dict[str, Any]]
"""Turns one option (its parameter name and value) into the run fields it sets."""


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


def plan_run(ctx: typer.Context, config: Path | None, options: dict[str, Any], no_zero: bool) -> PlanRun:
    """The plan run of ``plan``'s derived ``options`` (:mod:`archplace.cli.derived`) over the
    ``config`` file's fields; ``--no-zero`` sets the ZeRO stages to 0 alone.

    Raises:
        ConfigError: a bad file, an unknown or missing field, a bad value.
    """
    loaded = read_run_file(config, "plan config") if config is not None else {}
    values = _layers(ctx, options, fields_of(cli_options(*PLAN_SPECS)), loaded)
    if no_zero:
        values["zero_stages"] = [0]
    with _named_in(config, _given_fields(ctx, PLAN_SPECS)):
        return PlanRun.from_dict(values)


def evaluate_run(ctx: typer.Context, plan_file: Path | None, options: dict[str, Any],
                 zero: bool) -> EvaluateRun:
    """The evaluate run of ``evaluate``'s derived ``options`` (:mod:`archplace.cli.derived`) over
    the fields of the ``plan_file`` (a plan object, or the document ``plan --json`` or
    ``evaluate --json`` wrote); the deprecated ``--zero`` is ``--zero-stage 1``. A file's stage
    split is dropped when ``--pp``, ``--chunks`` or ``--schedule`` change the plan's shape
    without ``--stages``.

    Raises:
        ConfigError: a bad file, an unknown or missing field, a bad value.
    """
    loaded = (evaluate_fields(read_run_file(plan_file, "plan"), f"{plan_file}: plan file")
              if plan_file is not None else {})
    reshaped = any(given(ctx, name) for name in ("pp", "chunks", "schedule")) and not given(ctx, "stages")
    if reshaped and isinstance(loaded.get("plan"), Mapping):
        loaded["plan"] = {k: v for k, v in loaded["plan"].items() if k != "stages"}
    values = _layers(ctx, options, fields_of(cli_options(*EVALUATE_SPECS), {Plan: "plan"}), loaded)
    if given(ctx, "zero"):
        _merge(values, {"plan": {"zero_stage": api.fixed_zero_stage(options["zero_stage"], zero)}})
    if not isinstance(values.get("plan"), Mapping):
        missing = ("tp", "pp", "dp", "micro_batch")
        raise ConfigError(f"plan: missing fields {', '.join(missing)}", fields=missing)
    with _named_in(plan_file, _given_fields(ctx, EVALUATE_SPECS, {Plan: "plan."})):
        return EvaluateRun.from_dict(values)


def _given_fields(ctx: typer.Context, specs: tuple[type, ...], prefixes: Mapping[type, str] | None = None,
                  ) -> set[str]:
    """The fields set by options given on the command line, as errors name them (a plan's
    ``plan.tp`` with ``prefixes={Plan: "plan."}``)."""
    prefix = dict(prefixes or {})
    return {prefix.get(option.field.spec, "") + option.field.name
            for name, option in cli_options(*specs).items() if given(ctx, name)}


@contextlib.contextmanager
def _named_in(path: Path | None, flagged: set[str]) -> Iterator[None]:
    """Re-raise a ConfigError about fields that no option given on the command line set (so the
    file ``path`` did) as one that names the file and its key, not the option
    (:func:`archplace.cli.options.cli_message` shows a field in ``fields`` as its option)."""
    try:
        yield
    except ConfigError as exc:
        if path is None or not exc.fields or flagged.intersection(exc.fields):
            raise
        raise ConfigError(f"{path}: {exc}") from None


def run_fields(run: PlanRun | EvaluateRun) -> dict[str, Any]:
    """What a JSON output carries so that ``evaluate --plan`` can score its plan again: the
    model, hardware and cluster fields, and the optimizer and gradient dtype."""
    setup = run.space if isinstance(run, PlanRun) else run.plan
    return {**run.model.to_dict(), **run.hardware.to_dict(), **run.cluster.to_dict(),
            **{key: getattr(setup, key).value for key in PLAN_SETUP_KEYS}}
