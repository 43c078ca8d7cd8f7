"""``archplace calibrate``: fit a chip's efficiency parameters to a user's measured runs.

:func:`calibrate` takes runs in the format of ``tests/validation/published_runs.yaml``
(:func:`archplace.validation.runs.load_runs`), keeps those on the hardware being calibrated, fits
the chosen parameters (:mod:`archplace.calibration.fit`) and returns a :class:`Calibration`,
which :func:`archplace.calibration.output.calibrated_yaml` writes as a hardware file.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from archplace.base.errors import ConfigError
from archplace.base.inputs import read_mapping
from archplace.calibration.fit import (
    FittedParameter,
    RunResidual,
    RunSet,
    evaluable,
    fit,
    mean_max_abs,
    with_values,
)
from archplace.calibration.parameters import Parameter, default_fit, parse_fit
from archplace.front.specs.resolved import ResolvedHardware
from archplace.validation.runs import DEFAULT_VARIANT, VARIANTS, Run, load_runs


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate`.

    Attributes:
        base: the hardware calibrated, as given (a preset name or a hardware file path).
        hardware: that hardware with the fitted values written in.
        parameters: the fitted parameters (bounds, start, value).
        residuals: every fitted run, predicted before and after.
        skipped: one line per run left out (other hardware, or it cannot be evaluated).
        notes: one line per thing worth knowing about the fit (a parameter no run depends on,
            one that ended on a bound).
        variant: the graph variant the runs were evaluated with (``validation.runs.VARIANTS``).
        runs_file: the runs file's name, or None for runs given as objects.
        date: the day of the fit, ISO 8601 (``2026-11-27``).
        evaluations: residual evaluations the optimizer asked for.
        message: the optimizer's stopping reason.
    """

    base: str
    hardware: ResolvedHardware
    parameters: tuple[FittedParameter, ...]
    residuals: tuple[RunResidual, ...]
    skipped: tuple[str, ...]
    notes: tuple[str, ...]
    variant: str
    runs_file: str | None
    date: str
    evaluations: int
    message: str

    @property
    def values(self) -> dict[str, float]:
        """``{parameter name: fitted value}``."""
        return {p.name: p.value for p in self.parameters}

    def errors(self, when: str = "after") -> tuple[float, float]:
        """(mean |error|, max |error|) of the fitted runs' throughput ``before`` or ``after``
        the fit."""
        attribute = "error_after" if when == "after" else "error_before"
        return mean_max_abs([getattr(r, attribute) for r in self.residuals])

    def to_dict(self) -> dict[str, Any]:
        """The hardware file's ``calibration`` section (plain data)."""
        return {"date": self.date, "tool": "archplace calibrate", "runs_file": self.runs_file,
                "hardware": self.base, "variant": self.variant,
                "optimizer": "scipy.optimize.least_squares (trf, bounds) on log(predicted) - "
                             "log(measured) iteration time",
                "evaluations": self.evaluations, "message": self.message,
                "parameters": [p.to_dict() for p in self.parameters],
                "runs": [r.to_dict() for r in self.residuals],
                "skipped": list(self.skipped), "notes": list(self.notes)}


def read_runs(path: str | os.PathLike[str]) -> tuple[Run, ...]:
    """The runs of a runs file (the format of ``tests/validation/published_runs.yaml``).

    The file is first read as every input file is (:func:`archplace.base.inputs.read_mapping`: size
    and depth caps, UTF-8, no YAML alias bombs), then by
    :func:`archplace.validation.runs.load_runs` (which checks every field, sizes included).

    Raises:
        ConfigError: one line naming the file: missing or unreadable, not YAML, a missing or
            malformed field, no runs.
    """
    where = os.fspath(path)
    read_mapping(path, "runs file", syntax="yaml")
    try:
        runs = load_runs(Path(path))
    except KeyError as exc:
        raise ConfigError(f"runs file {where}: a run lacks the field {exc}") from None
    except (TypeError, ValueError, AttributeError, ArithmeticError, yaml.YAMLError) as exc:
        raise ConfigError(f"runs file {where}: {' '.join(str(exc).split())}") from None
    if not runs:
        raise ConfigError(f"runs file {where}: no runs")
    return runs



def runs_on(runs: Iterable[Run], hardware: ResolvedHardware) -> tuple[list[Run], list[str]]:
    """The runs measured on ``hardware`` (``run.hardware`` is its name as given, or its chip's
    name), and one line per other run."""
    names = {hardware.hardware, hardware.accelerator.name}
    kept, skipped = [], []
    for run in runs:
        if run.hardware in names:
            kept.append(run)
        else:
            skipped.append(f"{run.case}: skipped, measured on {run.hardware}, not {hardware.hardware}")
    return kept, skipped


def calibrate(runs: Sequence[Run], hardware: str | os.PathLike[str] | ResolvedHardware, *,
              fit_parameters: str | Iterable[str] | None = None, variant: str = DEFAULT_VARIANT,
              runs_file: str | None = None, date: datetime.date | None = None) -> Calibration:
    """Fit ``fit_parameters`` of ``hardware`` to the runs measured on it.

    Args:
        runs: measured runs (those on other hardware are skipped, with a line in ``skipped``).
        hardware: a preset name, a hardware file, or a resolved hardware; its values are the start.
        fit_parameters: registry names (:data:`~archplace.calibration.parameters.PARAMETERS`),
            a list or ``"a,b"``; None: the chip's default
            (:func:`~archplace.calibration.parameters.default_fit`).
        variant: the graph variant to evaluate the runs with.
        runs_file: the runs file's name, recorded in the result.
        date: the day recorded (default: today, UTC).

    Raises:
        ConfigError: an unknown parameter or variant, a hardware without the parameters, no run
            on the hardware, fewer evaluable runs than parameters.
        ArchplaceError: a run that evaluated at the start fails at a candidate.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"variant: unknown variant {variant!r}; choose from: {', '.join(VARIANTS)}")
    base = hardware if isinstance(hardware, ResolvedHardware) else ResolvedHardware.load(hardware)
    parameters = parse_fit(default_fit(base) if fit_parameters is None else fit_parameters)
    for parameter in parameters:
        parameter.read(base)  # a hardware without the parameter is refused before any work
    if not runs:
        raise ConfigError("calibrate: no runs given")
    kept, skipped = runs_on(runs, base)
    if not kept:
        found = ", ".join(sorted({run.hardware for run in runs}))
        raise ConfigError(f"calibrate: no run was measured on {base.hardware} "
                          f"({base.accelerator.name}); the runs are on {found}", fields=("hardware",))
    day = (date or datetime.datetime.now(datetime.UTC).date()).isoformat()
    with tempfile.TemporaryDirectory(prefix="archplace-calibrate-") as directory:
        run_set = RunSet(kept, Path(directory), variant)
        indices, failed, before = evaluable(run_set, base)
        skipped.extend(failed)
        if not indices:
            raise ConfigError(f"calibrate: no run on {base.hardware} can be evaluated; {failed[0]}")
        solution = fit(run_set, indices, base, parameters)
        fitted = with_values(base, parameters, solution.values)
        after = run_set.predict(indices, fitted)
        evaluations = run_set.evaluations
    chosen = [FittedParameter(p.name, p.low, p.high, start, value)
              for p, start, value in zip(parameters, solution.start, solution.values, strict=True)]
    residuals = tuple(RunResidual(run_set.runs[i].case, run_set.runs[i].source,
                                  float(run_set.measured_s[i]), float(b), float(a))
                      for i, b, a in zip(indices, before, after, strict=True))
    return Calibration(base.hardware, fitted, tuple(chosen), residuals, tuple(skipped),
                       _notes(chosen, parameters, solution.insensitive), variant, runs_file, day,
                       evaluations, solution.message)


def _notes(chosen: Sequence[FittedParameter], parameters: Sequence[Parameter],
           insensitive: Sequence[str]) -> tuple[str, ...]:
    notes = [f"{name}: no fitted run depends on it; kept at its start value" for name in insensitive]
    for fitted, parameter in zip(chosen, parameters, strict=True):
        if fitted.at_bound and fitted.name not in insensitive:
            notes.append(f"{fitted.name}: the fit ended on its bound {fitted.value:g} "
                         f"({parameter.bounds_reason}): the runs ask for a value outside it, so "
                         "the model lacks a mechanism they show")
    return tuple(notes)


def calibrate_file(runs: str | os.PathLike[str], hardware: str | os.PathLike[str], *,
                   fit: str | Iterable[str] | None = None, variant: str = DEFAULT_VARIANT,
                   out: str | os.PathLike[str] | None = None, option: str = "out") -> Calibration:
    """:func:`calibrate` to the runs of the file ``runs`` (:func:`read_runs`); with ``out``, the
    calibrated hardware file (:func:`archplace.calibration.output.calibrated_yaml`) is written
    there. ``out`` is checked before the fit (an existing regular file is replaced, as every
    command's output is; a directory, a result store or an unwritable path is refused).

    Raises:
        ConfigError: as :func:`read_runs` and :func:`calibrate`; ``out`` refused
            (:func:`archplace.base.outputs.check_output`, the message names ``option``).
    """
    from archplace.base.outputs import check_output, write_text_output
    from archplace.calibration.output import calibrated_yaml

    target = None if out is None else Path(out)
    if target is not None:
        check_output(target, option)
        if target.resolve() == Path(runs).resolve():
            raise ConfigError(f"{option} {target}: is the runs file, which calibrate only reads",
                              fields=(option,))
    chosen = None if fit is None else [p.name for p in parse_fit(fit)]
    result = calibrate(read_runs(runs), hardware, fit_parameters=chosen,
                       variant=variant, runs_file=Path(runs).name)
    if target is not None:
        write_text_output(target, option, calibrated_yaml(result))
    return result
